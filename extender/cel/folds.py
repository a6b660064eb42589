"""Comprehensions: cel-go's fold (interpreter/interpretable.go ``evalFold``), compiled.

A fold evaluates its range (an error ends it), then per element binds the iteration
variable(s), evaluates the loop condition (a boolean false stops the loop; anything else,
an error too, goes on) and the step, whose value (an error too) becomes the accumulator;
finally the result.  The accumulator is evaluated lazily, when first read (cel-go
initialises it on first access: ``optMap``'s and ``sortBy``'s bound value is never
evaluated when the result does not read it).  The fold itself costs nothing; its parts
cost what they cost, so an error in a ``map()`` body does not stop the loop.

Map ranges are iterated in insertion order (cel-go iterates a Go map in random order:
the cost of a short-circuiting comprehension over a map may differ from one cel-go run
to the next; ``MAP_ORDER`` lets the differential test try other orders).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.cel import deadline
from extender.cel.values import CelError, kind

#: tests only: a function reordering a map's keys before a comprehension iterates them
MAP_ORDER: Callable[[list], list] | None = None


def _keys(m: dict) -> list:
    keys = list(m)
    return MAP_ORDER(keys) if MAP_ORDER is not None else keys


def compile_fold(p: Any, compile_plan: Callable) -> Callable:
    from extender.cel.runtime import UNINIT

    rng = compile_plan(p.range)
    cond, step, result = compile_plan(p.cond), compile_plan(p.step), compile_plan(p.result)
    accu = p.accu_slot
    slots = p.iter_slots
    two = len(slots) == 2
    first = slots[0]
    second = slots[1] if two else -1

    def fold(b: Any) -> Any:
        r = rng(b)
        b.vars[accu] = UNINIT
        k = kind(r)
        if k == "list":
            items: Any = enumerate(r) if two else r
        elif k == "map":
            keys = _keys(r)
            items = [(key, r[key]) for key in keys] if two else keys
        elif two:
            raise CelError(f"unsupported comprehension range type: {k}")
        else:
            raise CelError(f"got '{k}', expected iterable type")
        vars_ = b.vars
        for item in items:
            b.ticks += 1
            if not b.ticks & 31 and b.deadline is not None:
                deadline.check(b.deadline)
            if two:
                vars_[first], vars_[second] = item
            else:
                vars_[first] = item
            try:
                c = cond(b)
            except CelError:
                c = None
            if c is False:
                break
            try:
                vars_[accu] = step(b)
            except CelError as exc:
                vars_[accu] = exc
        return result(b)

    return fold
