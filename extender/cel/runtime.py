"""Evaluation: the program plan (``extender.cel.plan``) compiled into Python closures.

``compile_tree(root)`` plans the checked IR and turns the plan into nested closures over
native values (``extender.cel.values``), once per program; an evaluation is one call of
the root closure with a fresh ``Activation``.  Programs are shared read-only by all threads;
the per-evaluation state (cost used, comprehension variables, the taint) lives in the
``Activation``.

Cost is charged where cel-go's cost tracker charges, in the same order and the same
amounts (``extender.cel.tracker.call_cost`` for calls), and checked after every charge, so
the limit interrupts at the same point with the same units used (``CostLimitExceeded``,
``extender.cel.activation``).  Errors are raised ``CelError``s; where cel-go passes an error
on as a value (``&&``, ``||``, the ternary's condition, a comprehension's accumulator,
``@not_strictly_false``) it is caught and carried.  The request deadline
(``extender.request.deadline``) is checked every 32 comprehension iterations and after
every costly call; it is never a verdict.  This module compiles constants, attributes and
literals; calls and operators are ``extender.cel.calls``, comprehensions
``extender.cel.folds``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.cel import calls, fastops, folds
from extender.cel.activation import UNINIT, Activation, CostLimitExceeded, charge_each, charged
from extender.cel.ast import Node
from extender.cel.cost import LIST_CREATE, MAP_CREATE
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
from extender.cel.values import (
    MISSING,
    CelError,
    kind,
    map_delete,
    map_find,
    map_put,
    qualifier_type,
)

Fn = Callable[[Activation], Any]
TAINT_FIELDS = fastops.TAINT_FIELDS
_MISSING = object()


class Runner:
    """A compiled program: ``run`` evaluates it for one taint in a fresh `Activation`."""

    __slots__ = ("root", "slots")

    def __init__(self, root: Fn, slots: int) -> None:
        self.root, self.slots = root, slots

    def run(self, taint: tuple[str, str, str], activation: Activation) -> Any:
        activation.taint = taint
        activation.vars = [UNINIT] * self.slots
        return self.root(activation)


def compile_tree(root: Node) -> Runner:
    """Plan (may raise CompileError: cel-go's program errors) and compile."""
    planner = Planner()
    plan = planner.plan(root, {})
    return Runner(compile_plan(plan), planner.slots)


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

    def attribute(b: Activation) -> Any:
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

    def presence(b: Activation) -> Any:
        value = resolve(b)
        if isinstance(value, Optional):
            return value.has_value
        return value

    return presence


def _fast_attr(p: Attr) -> Fn | None:
    """``taint.key`` & co. and plain variables (``fastops.leaf``), charged as the general
    path charges."""
    operand = fastops.leaf(p)
    if operand is None or operand.kind == "const":
        return None
    if operand.kind == "taint":
        index = operand.arg

        def taint_field(b: Activation) -> Any:  # the qualifier and the attribute: 1 + 1
            used = b.used + 2
            if used > b.limit:
                charge_each(b, (1, 1))
            b.used = used
            return b.taint[index]

        return taint_field
    slot = operand.arg

    def variable(b: Activation) -> Any:
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return b.vars[slot]

    return variable


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

    def qualified(b: Activation) -> Any:
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

    def undeclared(b: Activation) -> Any:  # the checker rejects these first
        raise CelError(f"no such attribute(s): {name}")

    return undeclared


def _slot_reader(p: Attr) -> Fn:
    slot = p.slot
    if p.lazy is None:
        return lambda b: b.vars[slot]
    init = compile_plan(p.lazy)

    def accumulator(b: Activation) -> Any:
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

    def conditional(b: Activation) -> Any:
        c = cond(b)
        if c is True:
            return then(b)
        if c is False:
            return otherwise(b)
        raise CelError(f"no such overload: _?_:_({kind(c)}, ...)")

    return conditional


def _qualifier(q: Qual) -> Callable[[Activation, Any, bool], Any]:
    """One qualification, charged 1 unit as cel-go observes it: always when applied
    plainly (before a failure is raised), only when present when applied as an optional
    or presence test; an attribute or computed key first costs what resolving it costs."""
    test_only = q.test_only
    if q.attr is None:
        key = q.const

        def constant(b: Activation, obj: Any, if_present: bool) -> Any:
            return _apply(b, obj, key, if_present, test_only)

        return constant
    resolve = _resolve(q.attr)

    def computed(b: Activation, obj: Any, if_present: bool) -> Any:
        try:
            key = resolve(b)
        except CelError:
            if not if_present:
                b.charge(1)
            raise
        if kind(key) not in ("string", "int", "uint", "bool", "double"):
            if not if_present:
                b.charge(1)
            raise CelError(f"invalid qualifier type: {qualifier_type(key)}")
        return _apply(b, obj, key, if_present, test_only)

    return computed


def _apply(b: Activation, obj: Any, key: Any, if_present: bool, test_only: bool) -> Any:
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


# --- literals ---------------------------------------------------------------------------


def _list(p: ListLit) -> Fn:
    elems = [compile_plan(e) for e in p.elems]
    optional = p.optional

    def list_literal(b: Activation) -> Any:
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
        return charged(b, LIST_CREATE, result)

    return list_literal


def _map(p: MapLit) -> Fn:
    entries = [compile_plan(e) for e in p.entries]
    optional = p.optional

    def map_literal(b: Activation) -> Any:
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
        return charged(b, MAP_CREATE, result)

    return map_literal


def _set_in(p: SetIn) -> Fn:
    arg, keys = compile_plan(p.arg), p.keys

    def set_membership(b: Activation) -> Any:
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

    def optional_or(b: Activation) -> Any:
        opt = lhs(b)
        if not isinstance(opt, Optional):
            return opt
        if opt.has_value:
            return opt.value if value else opt
        return rhs(b)

    return optional_or


_COMPILERS: dict[type, Callable[[Any], Fn]] = {
    Const: _const, Attr: _attr, ListLit: _list, MapLit: _map, SetIn: _set_in,
    OptionalOr: _optional_or,
    Call: lambda p: calls.compile_call(p, compile_plan),
    Equals: lambda p: calls.compile_equals(p, compile_plan),
    Logic: lambda p: calls.compile_logic(p, compile_plan),
    Fold: lambda p: folds.compile_fold(p, compile_plan),
}
