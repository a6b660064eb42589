"""Calls and operators compiled into closures: library calls charged as cel-go's cost
tracker charges them (``extender.cel.tracker.call_cost``), the typed fast paths
(``extender.cel.fastops``), ``==`` / ``!=`` and the short-circuiting ``&&`` / ``||``.
Each ``compile_*`` takes the plan and ``compile_plan`` (the evaluator's, for the
operands).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from extender.cel import fastops
from extender.cel.activation import DEADLINE_CALL_COST, Activation, CostLimitExceeded, charged
from extender.cel.lib import FUNCTIONS
from extender.cel.plan import Call, Equals, Logic
from extender.cel.tracker import ARGUMENT_COSTED, TRACKERS, call_cost, cost_rule
from extender.cel.values import CelError, equal, kind
from extender.request import deadline

Fn = Callable[[Activation], Any]
_STOCK = dict(FUNCTIONS)  # the library as shipped (the typed fast paths must match it)


def _invoker(p: Call) -> Callable[[Activation, list], Any]:
    """How a call runs its implementation: its result, or its error as a value.  The list
    functions whose charge depends on their arguments only and whose work grows faster
    than their input (``distinct``, ``sort``, ``sortBy``, ``sets.*``: quadratic charges)
    are charged first: a call the budget cannot pay is cancelled before it runs, with the
    units cel-go's tracker would report after running it (a quadratic call on an
    oversized list would otherwise run for minutes before the charge stops it)."""
    impl, name = p.impl, p.function
    if impl is None:
        def invoke(b: Activation, args: list) -> Any:
            return CelError(f"no such overload: {name}")
    else:
        def invoke(b: Activation, args: list) -> Any:
            try:
                return impl(*args)
            except CelError as exc:
                return exc
            except Exception as exc:  # noqa: BLE001 - a library defect must not escape
                return CelError(f"{name}: {exc}")
    if p.overload not in ARGUMENT_COSTED:
        return invoke

    def charged_first(b: Activation, args: list) -> Any:
        units = call_cost(name, p.overload, args, None)
        if b.used + units > b.limit:
            b.used += units
            raise CostLimitExceeded(b.used)
        return invoke(b, args)

    return charged_first


def _finisher(p: Call) -> Callable[[Activation, list, Any], Any]:
    """How a call is charged once it ran (cel-go's tracker sees its arguments and its
    result): most calls cost a constant, the others what ``call_cost`` makes of them."""
    name, oid = p.function, p.overload
    units = cost_rule(name, oid)
    if units is not None:
        return lambda b, args, result: charged(b, units, result)
    tracker = TRACKERS.get(oid)  # what call_cost would look up first, looked up once
    if tracker is not None:
        return lambda b, args, result: charged(b, tracker(args, result), result)
    return lambda b, args, result: charged(b, call_cost(name, oid, args, result), result)


def _value(fn: Fn, b: Activation) -> Any:
    try:
        return fn(b)
    except CelError as exc:
        return exc


def compile_call(p: Call, compile_plan: Callable[[Any], Fn]) -> Fn:
    fns = [compile_plan(a) for a in p.args]
    fast = _fast_call(p, fns)
    if fast is not None:
        return fast
    finish = _finisher(p)
    if p.non_strict:  # @not_strictly_false: anything but false is true
        (arg,) = fns

        def not_strictly_false(b: Activation) -> Any:
            v = _value(arg, b)
            return finish(b, [v], v if v is True or v is False else True)

        return not_strictly_false
    units = cost_rule(p.function, p.overload)
    if units is not None and p.impl is not None and p.mode == "unary" and fastops.FAST:
        return _unary_at(fns[0], p.impl, p.function, units)
    run = _invoker(p)
    if p.mode == "zero":
        return lambda b: finish(b, [], run(b, []))
    if p.mode == "unary":
        (arg,) = fns

        def unary(b: Activation) -> Any:
            try:
                v = arg(b)
            except CelError as exc:
                return finish(b, [exc], exc)
            args = [v]
            return finish(b, args, run(b, args))

        return unary
    if p.mode == "binary":
        lhs, rhs = fns

        def binary(b: Activation) -> Any:
            x, y = _value(lhs, b), _value(rhs, b)
            args = [x, y]
            if isinstance(x, CelError):
                return finish(b, args, x)
            if isinstance(y, CelError):
                return finish(b, args, y)
            return finish(b, args, run(b, args))

        return binary

    last = len(fns) - 1

    def varargs(b: Activation) -> Any:
        """cel-go evaluates the arguments up to the first error; the call is charged only
        if that was the last one (its cost tracker finds every argument's value)."""
        values = []
        for i, f in enumerate(fns):
            try:
                values.append(f(b))
            except CelError as exc:
                if i == last:
                    values.append(exc)
                    return finish(b, values, exc)
                raise
        return finish(b, values, run(b, values))

    return varargs


def _unary_at(arg: Fn, impl: Callable[[Any], Any], name: str, units: int) -> Fn:
    """A unary call of a constant charge: the generic path (``_invoker``, ``_finisher``)
    in one closure, one Python call instead of four per evaluation (``double(x)``,
    ``string(d)``, ``x.size()`` of a dyn ... in a comprehension's body)."""

    def unary_at(b: Activation) -> Any:
        try:
            v = arg(b)
        except CelError as exc:
            v = result = exc
        else:
            try:
                result = impl(v)
            except CelError as exc:
                result = exc
            except Exception as exc:  # noqa: BLE001 - a library defect must not escape
                result = CelError(f"{name}: {exc}")
        b.used += units
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        if units >= DEADLINE_CALL_COST and b.deadline is not None:
            deadline.check(b.deadline)
        if isinstance(result, CelError):
            raise result
        return result

    return unary_at


def _fast_call(p: Call, fns: list[Fn]) -> Fn | None:
    """Typed operators compiled without the generic call (extender.cel.fastops)."""
    if p.impl is not _STOCK.get(p.function) or p.impl is None or not fastops.FAST:
        return None
    oid, types = p.overload, p.types
    leaves = [fastops.leaf(a) for a in p.args]
    if p.mode == "binary" and oid in fastops.INT_OPS and types == ("int", "int"):
        return fastops.binary(fns[0], fns[1], fastops.INT_OPS[oid], *leaves)
    if oid in ("starts_with_string", "ends_with_string") and types == ("string", "string"):
        return fastops.prefix_test(fns[0], fns[1], oid == "ends_with_string", *leaves)
    if oid in fastops.CONVERSIONS and p.mode == "unary":
        return fastops.conversion(fns[0], p.impl, p.function, *fastops.CONVERSIONS[oid])
    if (p.function == "size" and len(fns) == 1 and oid
            and (types[0] in ("string", "bytes") or (isinstance(types[0], tuple)
                                                      and types[0][0] in ("list", "map")))):
        return fastops.size_of(fns[0], leaves[0])
    return None


#: operand types whose ``==`` costs 1 unit
_UNIT_EQUALITY = frozenset({("int", "int"), ("uint", "uint"), ("bool", "bool"),
                            ("double", "double")})


def compile_equals(p: Equals, compile_plan: Callable[[Any], Fn]) -> Fn:
    lhs, rhs = compile_plan(p.lhs), compile_plan(p.rhs)
    negate = p.negate
    leaves = fastops.leaf(p.lhs), fastops.leaf(p.rhs)
    if p.types in _UNIT_EQUALITY:
        return fastops.binary(lhs, rhs, operator.ne if negate else operator.eq, *leaves)
    if p.types == ("string", "string"):
        return fastops.text_equals(lhs, rhs, negate, *leaves)
    fn, oid = ("_!=_", "not_equals") if negate else ("_==_", "equals")

    def equals(b: Activation) -> Any:
        x, y = _value(lhs, b), _value(rhs, b)
        if isinstance(x, CelError):
            result: Any = x
        elif isinstance(y, CelError):
            result = y
        elif negate:  # cel-go: Equal(x, y) != true, an error included
            result = equal(x, y) is not True
        else:
            result = equal(x, y)
        b.used += call_cost(fn, oid, [x, y], result)
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        if isinstance(result, CelError):
            raise result
        return result

    return equals


def compile_logic(p: Logic, compile_plan: Callable[[Any], Fn]) -> Fn:
    """``||`` and ``&&``: short-circuit; an error is absorbed when the other side
    decides; no cost of their own."""
    left, right = compile_plan(p.lhs), compile_plan(p.rhs)
    decisive = p.is_or
    op = "_||_" if decisive else "_&&_"

    def logic(b: Activation) -> Any:
        try:
            lv = left(b)
        except CelError as exc:
            lv = exc
        if lv is decisive:
            return lv
        try:
            rv = right(b)
        except CelError as exc:
            rv = exc
        if rv is decisive:
            return rv
        for v in (lv, rv):
            if isinstance(v, CelError):
                raise v
            if v is not True and v is not False:
                raise CelError(f"no such overload: {op}({kind(lv)}, {kind(rv)})")
        return not decisive

    return logic

