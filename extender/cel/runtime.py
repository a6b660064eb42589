"""Evaluation: the program plan (``extender.cel.plan``) compiled into Python closures.

``compile_tree(root)`` plans the checked IR and turns the plan into nested closures over
native values (``extender.cel.values``), once per program; an evaluation is one call of
the root closure with a fresh ``Budget``.  Programs are shared read-only by all threads;
the per-evaluation state (cost used, comprehension variables, the taint) lives in the
``Budget``.

Cost is charged where cel-go's cost tracker charges, in the same order and the same
amounts (``extender.cel.cost.call_cost`` for calls), and checked after every charge, so
the limit interrupts at the same point with the same units used (``CostLimitExceeded``).
Errors are raised ``CelError``s; where cel-go passes an error on as a value (``&&``,
``||``, the ternary's condition, a comprehension's accumulator, ``@not_strictly_false``)
it is caught and carried.  The request deadline (``extender.request.deadline``) is checked
every 32 comprehension iterations and after every costly call; it is never a verdict.
Both are ``BaseException`` subclasses so no ``except Exception`` turns them into a CEL
error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.cel import fastops, folds
from extender.cel.ast import Node
from extender.cel.cost import ARGUMENT_COSTED, LIST_CREATE, MAP_CREATE, call_cost, cost_rule
from extender.cel.lib import FUNCTIONS
from extender.cel.lib.optional import NONE, Optional
from extender.cel.plan import (
    Attr,
    Call,
    Const,
    Equals,
    Fold,
    ListLit,
    Logic,
    MapLit,
    OptionalOr,
    Plan,
    Planner,
    Qual,
    SetIn,
)
from extender.cel.values import MISSING, CelError, equal, kind, map_delete, map_find, map_put
from extender.request import deadline

Fn = Callable[["Budget"], Any]
TAINT_FIELDS = ("key", "value", "effect")
#: a library call charged at least this many units is followed by a deadline check
_DEADLINE_CALL_COST = 64
_STOCK = dict(FUNCTIONS)  # the library as shipped (the typed fast paths must match it)
_MISSING = object()
UNINIT = object()  # an accumulator not evaluated yet (cel-go initialises it lazily)


class CostLimitExceeded(BaseException):  # noqa: N818 - mirrors cel-go's wording
    """The runtime cost budget was exhausted."""


class Budget:
    """One evaluation's state: the cost used against the limit, the request deadline
    (None outside a request), the taint and the comprehension variables."""

    __slots__ = ("used", "limit", "deadline", "ticks", "taint", "vars")

    def __init__(self, limit: int) -> None:
        self.used, self.limit, self.ticks = 0, limit, 0
        self.deadline = deadline.current()
        self.taint: tuple[str, str, str] = ("", "", "")
        self.vars: list = []

    def charge(self, units: int) -> None:
        self.used += units
        if self.used > self.limit:
            raise CostLimitExceeded(self.used)


def charge_each(b: Budget, parts: tuple[int, ...]) -> None:
    """Charge ``parts`` one at a time (a fused charge went over the limit: report the
    units used where the unfused charges stop)."""
    for units in parts:
        b.charge(units)


class Runner:
    """A compiled program: ``run`` evaluates it for one taint under a budget."""

    __slots__ = ("root", "slots")

    def __init__(self, root: Fn, slots: int) -> None:
        self.root, self.slots = root, slots

    def run(self, taint: tuple[str, str, str], budget: Budget) -> Any:
        budget.taint = taint
        budget.vars = [UNINIT] * self.slots
        return self.root(budget)


def compile_tree(root: Node) -> Runner:
    """Plan (may raise CompileError: cel-go's program errors) and compile."""
    planner = Planner()
    plan = planner.plan(root, {})
    return Runner(compile_plan(plan), planner.slots)


def build_map(flat: list) -> dict:
    """A map from key, value, key, value...: a repeated key keeps the last value (cel-go
    builds a Go map)."""
    out: dict = {}
    for i in range(0, len(flat), 2):
        map_put(out, flat[i], flat[i + 1])
    return out


def compile_plan(p: Plan) -> Fn:
    return _COMPILERS[type(p)](p)


# --- constants and attributes -------------------------------------------------------------

def _const(p: Const) -> Fn:
    value = p.value
    return lambda b: value


def _attr(p: Attr) -> Fn:
    """An attribute evaluated on its own: resolved, then 1 unit (0 for a ternary, and for
    ``has()``: Kubernetes' PresenceTestHasCost(false) refunds it)."""
    if p.test_only:
        return _presence(p)
    fast = _fast_attr(p)
    if fast is not None:
        return fast
    resolve = _resolve(p)
    if p.cond is not None:
        return resolve

    def attribute(b: Budget) -> Any:
        try:
            value = resolve(b)
        except CelError:
            b.charge(1)
            raise
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return value

    return attribute


def _presence(p: Attr) -> Fn:
    resolve = _resolve(p.relative)

    def presence(b: Budget) -> Any:
        value = resolve(b)
        if isinstance(value, Optional):
            return value.has_value
        return value

    return presence


def _fast_attr(p: Attr) -> Fn | None:
    """``taint.key`` & co. and plain variables, charged as the general path charges."""
    if p.var == "taint" and p.slot is None and len(p.quals) == 1:
        q = p.quals[0]
        if q.attr is None and not q.optional and not q.test_only and q.const in TAINT_FIELDS:
            index = TAINT_FIELDS.index(q.const)

            def taint_field(b: Budget) -> Any:  # the qualifier and the attribute: 1 + 1
                used = b.used + 2
                if used > b.limit:
                    charge_each(b, (1, 1))
                b.used = used
                return b.taint[index]

            return taint_field
    if p.slot is not None and not p.quals and p.lazy is None:
        slot = p.slot

        def variable(b: Budget) -> Any:
            b.used += 1
            if b.used > b.limit:
                raise CostLimitExceeded(b.used)
            return b.vars[slot]

        return variable
    return None


def _resolve(p: Attr) -> Fn:
    """The attribute's value without its own unit (a ternary branch, a qualifier)."""
    if p.cond is not None:
        return _conditional(p)
    if p.relative is not None:
        base = compile_plan(p.relative)
    elif p.slot is not None:
        base = _slot_reader(p)
    else:
        base = _global(p.var)
    if not p.quals:
        return base
    quals = [_qualifier(q) for q in p.quals]
    optional = [q.optional for q in p.quals]

    def qualified(b: Budget) -> Any:
        obj = base(b)
        is_opt = False
        if isinstance(obj, Optional):
            if not obj.has_value:
                return obj
            obj, is_opt = obj.value, True
        for qualify, opt in zip(quals, optional, strict=True):
            is_opt = is_opt or opt
            obj = qualify(b, obj, is_opt)
            if obj is _MISSING:
                return NONE
        return Optional(obj) if is_opt else obj

    return qualified


def _global(name: str | None) -> Fn:
    if name == "taint":
        return lambda b: dict(zip(TAINT_FIELDS, b.taint, strict=True))

    def undeclared(b: Budget) -> Any:  # the checker rejects these first
        raise CelError(f"no such attribute(s): {name}")

    return undeclared


def _slot_reader(p: Attr) -> Fn:
    slot = p.slot
    if p.lazy is None:
        return lambda b: b.vars[slot]
    init = compile_plan(p.lazy)

    def accumulator(b: Budget) -> Any:
        value = b.vars[slot]
        if value is UNINIT:
            try:
                value = init(b)
            except CelError as exc:
                value = exc
            b.vars[slot] = value
        if isinstance(value, CelError):
            raise value
        return value

    return accumulator


def _conditional(p: Attr) -> Fn:
    cond = compile_plan(p.cond)
    then, otherwise = _resolve(p.then), _resolve(p.otherwise)

    def conditional(b: Budget) -> Any:
        c = cond(b)
        if c is True:
            return then(b)
        if c is False:
            return otherwise(b)
        raise CelError(f"no such overload: _?_:_({kind(c)}, ...)")

    return conditional


def _qualifier(q: Qual) -> Callable[[Budget, Any, bool], Any]:
    """One qualification, charged 1 unit as cel-go observes it: always when applied
    plainly (before a failure is raised), only when present when applied as an optional
    or presence test; an attribute or computed key first costs what resolving it costs."""
    test_only = q.test_only
    if q.attr is None:
        key = q.const

        def constant(b: Budget, obj: Any, if_present: bool) -> Any:
            return _apply(b, obj, key, if_present, test_only)

        return constant
    resolve = _resolve(q.attr)

    def computed(b: Budget, obj: Any, if_present: bool) -> Any:
        try:
            key = resolve(b)
        except CelError:
            if not if_present:
                b.charge(1)
            raise
        if kind(key) not in ("string", "int", "uint", "bool", "double"):
            if not if_present:
                b.charge(1)
            raise CelError(f"invalid qualifier type: {kind(key)}")
        return _apply(b, obj, key, if_present, test_only)

    return computed


def _apply(b: Budget, obj: Any, key: Any, if_present: bool, test_only: bool) -> Any:
    present, value, error = _select(obj, key, presence=if_present or test_only)
    if if_present:
        if error is not None:
            raise error
        if present:
            b.charge(1)
            return None if test_only else value
        return _MISSING
    b.charge(1)
    if error is not None:
        raise error
    return present if test_only else value


def _select(obj: Any, key: Any, presence: bool) -> tuple[bool, Any, CelError | None]:
    """cel-go ``refQualify``: (present, value, error)."""
    k = kind(obj)
    if k == "map":
        value = map_find(obj, key)
        if value is not MISSING:
            return True, value, None
        return False, None, None if presence else CelError(f"no such key: {_show(key)}")
    if k == "list":
        kk = kind(key)
        if kk in ("int", "uint"):
            i = int(key)
        elif kk == "double":
            f = float(key)
            if not f.is_integer():
                return False, None, CelError(f"unsupported index value {_show(key)} in "
                                             "list index")
            i = int(f)
        else:
            return False, None, CelError(f"unsupported index type '{kk}' in list index")
        if 0 <= i < len(obj):
            return True, obj[i], None
        return False, None, None if presence else CelError(
            f"index out of bounds: {_show(key)}")
    if presence:
        return False, None, None
    return False, None, CelError(f"no such key: {_show(key)}")



def _show(v: Any) -> str:
    k = kind(v)
    if k == "bool":
        return "true" if v else "false"
    if k in ("int", "uint", "double", "string"):
        return str(v)
    return k


# --- calls ---------------------------------------------------------------------------------

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
    return _charged(b, units, result)


def _charged(b: Budget, units: int, result: Any) -> Any:
    b.used += units
    if b.used > b.limit:
        raise CostLimitExceeded(b.used)
    if units >= _DEADLINE_CALL_COST and b.deadline is not None:
        deadline.check(b.deadline)  # a long library call cannot be interrupted
    if isinstance(result, CelError):
        raise result
    return result


def _value(fn: Fn, b: Budget) -> Any:
    try:
        return fn(b)
    except CelError as exc:
        return exc


def _call(p: Call) -> Fn:
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
            return _charged(b, units, v if v is True or v is False else True)

        return not_strictly_false
    if p.mode == "zero":
        return lambda b: _charged(b, units, _invoke(impl, name, []))
    if p.mode == "unary":
        (arg,) = fns

        def unary(b: Budget) -> Any:
            try:
                v = arg(b)
            except CelError as exc:
                return _charged(b, units, exc)
            return _charged(b, units, _invoke(impl, name, [v]))

        return unary
    if p.mode == "binary":
        lhs, rhs = fns

        def binary(b: Budget) -> Any:
            x, y = _value(lhs, b), _value(rhs, b)
            if isinstance(x, CelError):
                return _charged(b, units, x)
            if isinstance(y, CelError):
                return _charged(b, units, y)
            return _charged(b, units, _invoke(impl, name, [x, y]))

        return binary
    last = len(fns) - 1

    def varargs(b: Budget) -> Any:
        values = []
        for i, f in enumerate(fns):
            try:
                values.append(f(b))
            except CelError as exc:
                if i == last:
                    return _charged(b, units, exc)
                raise
        return _charged(b, units, _invoke(impl, name, values))

    return varargs


_TYPED_EQUALITY = {("int", "int"): False, ("uint", "uint"): False, ("bool", "bool"): False,
                   ("double", "double"): False, ("string", "string"): True}


def _equals(p: Equals) -> Fn:
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


def _logic(p: Logic) -> Fn:
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


def _list(p: ListLit) -> Fn:
    elems = [compile_plan(e) for e in p.elems]
    optional = p.optional

    def list_literal(b: Budget) -> Any:
        out: list = []
        result: Any = out
        for i, f in enumerate(elems):
            try:
                v = f(b)
            except CelError as exc:
                result = exc
                break
            if i in optional:
                if not isinstance(v, Optional):
                    result = CelError("cannot initialize optional list element from "
                                      f"non-optional value {kind(v)}")
                    break
                if not v.has_value:
                    continue
                v = v.value
            out.append(v)
        return _charged(b, LIST_CREATE, result)

    return list_literal


def _map(p: MapLit) -> Fn:
    entries = [compile_plan(e) for e in p.entries]
    optional = p.optional

    def map_literal(b: Budget) -> Any:
        out: dict = {}
        result: Any = out
        try:
            for i in range(0, len(entries), 2):
                key = entries[i](b)
                value = entries[i + 1](b)
                if i // 2 in optional:
                    if not isinstance(value, Optional):
                        raise CelError(f"cannot initialize optional entry '{_show(key)}' from "
                                       f"non-optional value {kind(value)}")
                    if not value.has_value:
                        map_delete(out, key)
                        continue
                    value = value.value
                map_put(out, key, value)
        except CelError as exc:
            result = exc
        return _charged(b, MAP_CREATE, result)

    return map_literal


def _set_in(p: SetIn) -> Fn:
    arg, keys = compile_plan(p.arg), p.keys

    def set_membership(b: Budget) -> Any:
        v = arg(b)
        k = kind(v)
        if k in ("int", "uint", "string", "bool"):
            return (k, bool(v) if k == "bool" else v if k == "string" else int(v)) in keys
        if k == "double":
            return ("double", float(v)) in keys
        if k == "bytes":
            raise CelError("internal error: runtime error: hash of unhashable type types.Bytes")
        return False

    return set_membership


def _optional_or(p: OptionalOr) -> Fn:
    lhs, rhs = compile_plan(p.lhs), compile_plan(p.rhs)
    value = p.value

    def optional_or(b: Budget) -> Any:
        opt = lhs(b)
        if not isinstance(opt, Optional):
            return opt
        if opt.has_value:
            return opt.value if value else opt
        return rhs(b)

    return optional_or


_COMPILERS: dict[type, Callable[[Any], Fn]] = {
    Const: _const, Attr: _attr, Call: _call, Equals: _equals, Logic: _logic,
    ListLit: _list, MapLit: _map, SetIn: _set_in, OptionalOr: _optional_or,
    Fold: lambda p: folds.compile_fold(p, compile_plan),
}
