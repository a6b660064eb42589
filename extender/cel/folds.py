"""Comprehensions: cel-go's fold (interpreter/interpretable.go ``evalFold``), compiled.

A fold evaluates its range (an error ends it), then per element binds the iteration
variable(s), evaluates the loop condition (a boolean false stops the loop; anything else,
an error too, goes on) and the step, whose value (an error too) becomes the accumulator;
finally the result.  The accumulator is evaluated lazily, when first read (cel-go
initialises it on first access: ``optMap``'s and ``sortBy``'s bound value is never
evaluated when the result does not read it).  The fold itself costs nothing; its parts
cost what they cost, so an error in a ``map()`` body does not stop the loop.

The macros' folds (``all``, ``exists``, ``exists_one``, ``map``, ``filter``,
``transformList``/``Map``/``MapEntry``) run as loops specialised to their expansion: they
charge, per element, exactly what the generic fold charges for that expansion (in the same
order, so the cost limit stops them at the same unit) and keep the accumulator in a
Python list or dict instead of copying it per element.  ``test_cel_oracle`` compares both
with cel-go.

Map ranges are iterated in insertion order (cel-go iterates a Go map in random order:
the cost of a short-circuiting comprehension over a map may differ from one cel-go run
to the next; ``MAP_ORDER`` lets the differential test try other orders).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.cel.activation import UNINIT, CostLimitExceeded, charge_each
from extender.cel.cost import LIST_CREATE
from extender.cel.lib.comprehensions import insert
from extender.cel.plan import Attr, Call, Const, ListLit, Logic
from extender.cel.values import MISSING, CelError, kind, map_find, map_put
from extender.request import deadline

#: tests only: a function reordering a map's keys before a comprehension iterates them
MAP_ORDER: Callable[[list], list] | None = None
#: tests only: False runs every comprehension through the generic fold
SPECIALISE = True


def _keys(m: dict) -> list:
    keys = list(m)
    return MAP_ORDER(keys) if MAP_ORDER is not None else keys


def _items(r: Any, two: bool, name: str) -> Any:
    k = kind(r)
    if k == "list":
        return enumerate(r) if two else r
    if k == "map":
        keys = _keys(r)
        return [(key, r[key]) for key in keys] if two else keys
    if two:
        raise CelError(f"unsupported comprehension range type: {k}")
    raise CelError(f"got '{k}', expected iterable type")


def _no_overload(v: Any, op: str) -> CelError:
    return v if isinstance(v, CelError) else CelError(f"no such overload: {op}")


def compile_fold(p: Any, compile_plan: Callable) -> Callable:
    rng = compile_plan(p.range)
    two = len(p.iter_slots) == 2
    first = p.iter_slots[0]
    second = p.iter_slots[1] if two else -1
    driver = _specialise(p, compile_plan) if SPECIALISE else None
    if driver is None:
        return _generic(p, compile_plan, rng, two, first, second)

    def bind(b: Any, item: Any) -> None:
        b.ticks += 1
        if not b.ticks & 31 and b.deadline is not None:
            deadline.check(b.deadline)
        if two:
            b.vars[first], b.vars[second] = item
        else:
            b.vars[first] = item

    def charge(b: Any, units: tuple[int, ...], total: int) -> None:
        """``units`` charged at once; over the limit, one at a time (to stop where cel-go
        stops)."""
        b.used += total
        if b.used > b.limit:
            b.used -= total
            charge_each(b, units)

    return driver(rng, bind, charge)


# --- the generic fold ----------------------------------------------------------------------

def _generic(p: Any, compile_plan: Callable, rng: Callable, two: bool, first: int,
             second: int) -> Callable:
    cond, step, result = compile_plan(p.cond), compile_plan(p.step), compile_plan(p.result)
    accu = p.accu_slot
    name = p.macro

    # binds inline, as _quantifier does: calling compile_fold's bind per element costs
    # this loop ~9%
    def fold(b: Any) -> Any:
        r = rng(b)
        b.vars[accu] = UNINIT
        vars_ = b.vars
        for item in _items(r, two, name):
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


# --- specialised loops ----------------------------------------------------------------------

def _specialise(p: Any, compile_plan: Callable) -> Any:
    """A driver (range, bind, charge) -> fold for a macro's expansion, or None for the
    generic fold."""
    macro, step = p.macro, p.step
    two = len(p.iter_slots) == 2
    if macro in ("all", "exists") and isinstance(step, Logic):
        return _quantifier(compile_plan(step.rhs), decisive=macro == "exists", two=two,
                           slots=p.iter_slots)
    if macro in ("exists_one", "existsOne") and isinstance(step, Attr) and step.cond:
        return _exists_one(compile_plan(step.cond), two)
    if macro in ("map", "filter", "transformList"):
        return _list_builder(step, compile_plan, two)
    if macro in ("transformMap", "transformMapEntry"):
        return _map_builder(step, compile_plan, two, entry=macro == "transformMapEntry")
    return None


def _loop(two: bool, name: str) -> Callable:
    return lambda r: _items(r, two, name)


def _quantifier(pred: Callable, decisive: bool, two: bool, slots: tuple[int, ...]) -> Any:
    """``all`` (decisive False): the condition ``@not_strictly_false(@result)`` costs 2,
    the step ``@result && pred`` 1 + pred; ``exists`` (decisive True): the condition
    ``@not_strictly_false(!@result)`` costs 3, the step ``@result || pred`` 1 + pred.  The
    loop stops at the condition after the deciding element; the result reads
    ``@result``: 1.  (The hottest loop: binding and charging are inlined.)"""
    op = "_||_" if decisive else "_&&_"
    cond = (1, 1, 1) if decisive else (1, 1)
    per = cond + (1,)
    cond_total, per_total = sum(cond), sum(per)
    items = _loop(two, "exists" if decisive else "all")
    first = slots[0]
    second = slots[1] if two else -1
    undecided = not decisive

    def driver(rng: Callable, bind: Callable, charge: Callable) -> Callable:
        def quantifier(b: Any) -> Any:
            accu: Any = undecided
            vars_ = b.vars
            r = rng(b)
            for item in r if type(r) is list and not two else items(r):
                if accu is decisive:
                    charge(b, cond, cond_total)
                    break
                used = b.used + per_total
                if used > b.limit:
                    charge_each(b, per)
                b.used = used
                ticks = b.ticks = b.ticks + 1
                if not ticks & 31 and b.deadline is not None:
                    deadline.check(b.deadline)
                if two:
                    vars_[first], vars_[second] = item
                else:
                    vars_[first] = item
                try:
                    v = pred(b)
                except CelError as exc:
                    v = exc
                if v is undecided:
                    continue
                if v is decisive:
                    accu = v
                elif accu is undecided:
                    accu = _no_overload(v, op)
            b.used += 1
            if b.used > b.limit:
                raise CostLimitExceeded(b.used)
            if isinstance(accu, CelError):
                raise accu
            return accu

        return quantifier

    return driver


def _exists_one(pred: Callable, two: bool) -> Any:
    """``pred ? @result + 1 : @result``: pred, then 2 when true (the variable and the
    addition; the false branch resolves the variable for free); no early stop; the result
    ``@result == 1``: 2."""
    items = _loop(two, "exists_one")

    def driver(rng: Callable, bind: Callable, charge: Callable) -> Callable:
        def exists_one(b: Any) -> Any:
            count: Any = 0
            for item in items(rng(b)):
                bind(b, item)
                try:
                    v = pred(b)
                except CelError as exc:
                    v = exc
                if v is True:
                    charge(b, (1, 1), 2)
                    if not isinstance(count, CelError):
                        count += 1
                elif v is not False:
                    count = _no_overload(v, "_?_:_")
            charge(b, (1, 1), 2)
            if isinstance(count, CelError):
                raise count
            return count == 1

        return exists_one

    return driver


def _branches(step: Any) -> tuple[Any, Any]:
    """(filter plan or None, the unconditional step plan)."""
    if isinstance(step, Attr) and step.cond is not None:
        return step.cond, step.then.relative
    return None, step


def _list_builder(step: Any, compile_plan: Callable, two: bool) -> Any:
    """``[filter ?] @result + [e] : @result``: the filter, then 1 (the variable) + the
    element list (0 when ``e`` is a constant, folded; else e + 10) + 1 (``add_list``);
    a filtered-out element costs nothing more.  An error becomes the accumulator and the
    loop goes on (charging the same); the result reads ``@result``: 1."""
    filt, add = _branches(step)
    if not (isinstance(add, Call) and add.function == "_+_" and len(add.args) == 2):
        return None
    element = add.args[1]
    if isinstance(element, Const):
        value = element.value[0]
        elem_fn = None
        units: tuple[int, ...] = (1, 1)
    elif isinstance(element, ListLit) and len(element.elems) == 1 and not element.optional:
        elem_fn = compile_plan(element.elems[0])
        value = None
        units = (1,)
    else:
        return None
    filt_fn = compile_plan(filt) if filt is not None else None
    items = _loop(two, "map")

    def driver(rng: Callable, bind: Callable, charge: Callable) -> Callable:
        def list_builder(b: Any) -> Any:
            out: list = []
            error = None
            for item in items(rng(b)):
                bind(b, item)
                if filt_fn is not None:
                    keep = _filter_verdict(filt_fn, b)
                    if keep is not True:
                        if keep is not False:
                            error = keep
                        continue
                if elem_fn is None:
                    charge(b, units, 2)
                    if error is None:
                        out.append(value)
                    continue
                charge(b, units, 1)
                try:
                    v = elem_fn(b)
                except CelError as exc:
                    v = exc
                charge(b, (LIST_CREATE, 1), LIST_CREATE + 1)
                if error is None:
                    if isinstance(v, CelError):
                        error = v
                    else:
                        out.append(v)
            charge(b, (1,), 1)
            if error is not None:
                raise error
            return out

        return list_builder

    return driver


def _filter_verdict(filt_fn: Callable, b: Any) -> Any:
    """A filter's verdict on the bound element: True (keep it), False (skip it), or the
    CelError that makes the fold's result an error (the element is skipped; the loop goes
    on, charging, as cel-go's fold does)."""
    try:
        keep = filt_fn(b)
    except CelError as exc:
        return exc
    if keep is True or keep is False:
        return keep
    return CelError("no such overload: _?_:_")


def _map_builder(step: Any, compile_plan: Callable, two: bool, entry: bool) -> Any:
    """``transformMap``: ``cel.@mapInsert(@result, k, e)`` is variadic: 1 (the variable),
    and with the accumulator an error nothing more (the call stops there, uncharged);
    else 1 (k) + e + 1.  ``transformMapEntry``: ``cel.@mapInsert(@result, e)`` is binary:
    1 + e + 1.  A repeated key is an error."""
    filt, call = _branches(step)
    if not (isinstance(call, Call) and call.function == "cel.@mapInsert"):
        return None
    fn = compile_plan(call.args[-1])
    key_fn = compile_plan(call.args[1]) if not entry else None
    filt_fn = compile_plan(filt) if filt is not None else None
    items = _loop(two, "transformMap")

    def driver(rng: Callable, bind: Callable, charge: Callable) -> Callable:
        def map_builder(b: Any) -> Any:
            out: dict = {}
            error = None
            for item in items(rng(b)):
                bind(b, item)
                if filt_fn is not None:
                    keep = _filter_verdict(filt_fn, b)
                    if keep is not True:
                        if keep is not False:
                            error = keep
                        continue
                charge(b, (1,), 1)
                if error is not None and not entry:
                    continue
                key = key_fn(b) if key_fn is not None else None
                try:
                    v = fn(b)
                except CelError as exc:
                    v = exc
                charge(b, (1,), 1)
                if error is not None:
                    continue
                if isinstance(v, CelError):
                    error = v
                    continue
                try:
                    if entry:
                        if kind(v) != "map":
                            raise CelError("no such overload: cel.@mapInsert")
                        for k, x in v.items():
                            out = _insert_in_place(out, k, x)
                    else:
                        out = _insert_in_place(out, key, v)
                except CelError as exc:
                    error = exc
            charge(b, (1,), 1)
            if error is not None:
                raise error
            return out

        return map_builder

    return driver


def _insert_in_place(out: dict, key: Any, value: Any) -> dict:
    """``insert`` without the copy (the accumulator is this loop's own)."""
    if map_find(out, key) is not MISSING:
        insert(out, key, value)  # raises the error
    map_put(out, key, value)
    return out
