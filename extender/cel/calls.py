"""Calls and operators compiled into closures: library calls charged as cel-go's cost
tracker charges them (``extender.cel.cost.call_cost``), the typed fast paths
(``extender.cel.fastops``), ``==`` / ``!=`` and the short-circuiting ``&&`` / ``||``.
Each ``compile_*`` takes the plan and ``compile_plan`` (the evaluator's, for the
operands).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.cel import fastops
from extender.cel.budget import Budget, CostLimitExceeded, charged
from extender.cel.cost import ARGUMENT_COSTED, call_cost, cost_rule
from extender.cel.lib import FUNCTIONS
from extender.cel.plan import Call, Equals, Logic
from extender.cel.values import CelError, equal, kind

Fn = Callable[[Budget], Any]
_STOCK = dict(FUNCTIONS)  # the library as shipped (the typed fast paths must match it)


def _invoke(impl: Callable | None, name: str, args: list) -> Any:
    """The implementation's result, or its error as a value."""
    if impl is None:
        return CelError(f"no such overload: {name}")
    try:
        return impl(*args)
    except CelError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - a library defect must not escape
        return CelError(f"{name}: {exc}")


def _invoker(p: Call) -> Callable[[Budget, list], Any]:
    """How a call runs its implementation.  The list functions whose charge depends on
    their arguments only and whose work grows faster than their input (``distinct``,
    ``sort``, ``sortBy``, ``sets.*``: quadratic charges) are charged first: a call the
    budget cannot pay is cancelled before it runs, with the units cel-go's tracker would
    report after running it (a quadratic call on an oversized list would otherwise run
    for minutes before the charge stops it)."""
    impl, name = p.impl, p.function
    if p.overload not in ARGUMENT_COSTED:
        return lambda b, args: _invoke(impl, name, args)

    def charged_first(b: Budget, args: list) -> Any:
        units = call_cost(name, p.overload, args, None)
        if b.used + units > b.limit:
            b.used += units
            raise CostLimitExceeded(b.used)
        return _invoke(impl, name, args)

    return charged_first


def _finish(b: Budget, p: Call, args: list, result: Any) -> Any:
    units = call_cost(p.function, p.overload, args, result)
    return charged(b, units, result)



def _value(fn: Fn, b: Budget) -> Any:
    try:
        return fn(b)
    except CelError as exc:
        return exc


def compile_call(p: Call, compile_plan: Callable[[Any], Fn]) -> Fn:
    fns = [compile_plan(a) for a in p.args]
    name = p.function
    fast = _fast_call(p, fns)
    if fast is not None:
        return fast
    constant = cost_rule(name, p.overload)
    if constant is not None:
        return _constant_cost_call(p, fns, constant)
    if p.non_strict:  # @not_strictly_false: anything but false is true
        (arg,) = fns

        def not_strictly_false(b: Budget) -> Any:
            v = _value(arg, b)
            result = v if v is True or v is False else True
            return _finish(b, p, [v], result)

        return not_strictly_false
    run = _invoker(p)
    if p.mode == "zero":
        return lambda b: _finish(b, p, [], run(b, []))
    if p.mode == "unary":
        (arg,) = fns

        def unary(b: Budget) -> Any:
            v = _value(arg, b)
            result = v if isinstance(v, CelError) else run(b, [v])
            return _finish(b, p, [v], result)

        return unary
    if p.mode == "binary":
        lhs, rhs = fns

        def binary(b: Budget) -> Any:
            x, y = _value(lhs, b), _value(rhs, b)
            if isinstance(x, CelError):
                result = x
            elif isinstance(y, CelError):
                result = y
            else:
                result = run(b, [x, y])
            return _finish(b, p, [x, y], result)

        return binary

    last = len(fns) - 1

    def varargs(b: Budget) -> Any:
        """cel-go evaluates the arguments up to the first error; the call is charged only
        if that was the last one (its cost tracker finds every argument's value)."""
        values = []
        for i, f in enumerate(fns):
            try:
                values.append(f(b))
            except CelError as exc:
                if i == last:
                    values.append(exc)
                    return _finish(b, p, values, exc)
                raise
        return _finish(b, p, values, run(b, values))

    return varargs


def _fast_call(p: Call, fns: list[Fn]) -> Fn | None:
    """Typed operators compiled without the generic call (extender.cel.fastops)."""
    if p.impl is not _STOCK.get(p.function) or p.impl is None:
        return None
    oid, types = p.overload, p.types
    if p.mode == "binary" and oid in fastops.INT_OPS and types == ("int", "int"):
        return fastops.binary(fns[0], fns[1], fastops.INT_OPS[oid], CostLimitExceeded)
    if oid in ("starts_with_string", "ends_with_string") and types == ("string", "string"):
        return fastops.prefix_test(fns[0], fns[1], oid == "ends_with_string",
                                   CostLimitExceeded)
    if (p.function == "size" and len(fns) == 1 and oid
            and (types[0] in ("string", "bytes") or (isinstance(types[0], tuple)
                                                      and types[0][0] in ("list", "map")))):
        return fastops.size_of(fns[0], CostLimitExceeded)
    return None


def _constant_cost_call(p: Call, fns: list[Fn], units: int) -> Fn:
    """A call whose charge does not depend on its values (most of them)."""
    impl, name = p.impl, p.function
    if p.non_strict:  # @not_strictly_false: anything but false is true
        (arg,) = fns

        def not_strictly_false(b: Budget) -> Any:
            v = _value(arg, b)
            return charged(b, units, v if v is True or v is False else True)

        return not_strictly_false
    if p.mode == "zero":
        return lambda b: charged(b, units, _invoke(impl, name, []))
    if p.mode == "unary":
        (arg,) = fns

        def unary(b: Budget) -> Any:
            try:
                v = arg(b)
            except CelError as exc:
                return charged(b, units, exc)
            return charged(b, units, _invoke(impl, name, [v]))

        return unary
    if p.mode == "binary":
        lhs, rhs = fns

        def binary(b: Budget) -> Any:
            x, y = _value(lhs, b), _value(rhs, b)
            if isinstance(x, CelError):
                return charged(b, units, x)
            if isinstance(y, CelError):
                return charged(b, units, y)
            return charged(b, units, _invoke(impl, name, [x, y]))

        return binary
    last = len(fns) - 1

    def varargs(b: Budget) -> Any:
        values = []
        for i, f in enumerate(fns):
            try:
                values.append(f(b))
            except CelError as exc:
                if i == last:
                    return charged(b, units, exc)
                raise
        return charged(b, units, _invoke(impl, name, values))

    return varargs


_TYPED_EQUALITY = {("int", "int"): False, ("uint", "uint"): False, ("bool", "bool"): False,
                   ("double", "double"): False, ("string", "string"): True}


def compile_equals(p: Equals, compile_plan: Callable[[Any], Fn]) -> Fn:
    lhs, rhs = compile_plan(p.lhs), compile_plan(p.rhs)
    negate = p.negate
    text = _TYPED_EQUALITY.get(p.types)
    if text is not None:
        return fastops.equals(lhs, rhs, negate, text, CostLimitExceeded)
    fn, oid = ("_!=_", "not_equals") if negate else ("_==_", "equals")

    def equals(b: Budget) -> Any:
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

    def logic(b: Budget) -> Any:
        lv = _value(left, b)
        if lv is decisive:
            return lv
        rv = _value(right, b)
        if rv is decisive:
            return rv
        for v in (lv, rv):
            if isinstance(v, CelError):
                raise v
            if v is not True and v is not False:
                raise CelError(f"no such overload: {op}({kind(lv)}, {kind(rv)})")
        return not decisive

    return logic

