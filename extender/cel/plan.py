"""The program plan: what cel-go's planner (interpreter/planner.go) makes of a checked tree.

Run-time cost in cel-go is charged by an observer at each planned step, so the cost of an
evaluation depends on the plan's shape, not only on the expression: an identifier and the
field selections after it form one *attribute* (1 unit per qualifier, 1 for the attribute);
a ternary is an attribute whose branches are resolved without that unit; constants cost
nothing, and with Kubernetes' ``OptOptimize`` list and map literals of constants, type
conversions of constants (an error there fails the program, i.e. admission) and ``in`` a
constant list (a set lookup, no call) are folded; ``matches``/``find``/``findAll`` with a
constant pattern compile it (an invalid one fails the program) and become variadic calls;
``or``/``orValue`` short-circuit and cost nothing.  This module builds that plan; the
evaluator (``extender.cel.runtime``) compiles it into closures charging at the same points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extender.caching import ByteLRU
from extender.cel import overloads as decl_table
from extender.cel.ast import Node
from extender.cel.check import TYPE_IDENTS
from extender.cel.decls import BINDINGS
from extender.cel.environment import CompileError
from extender.cel.lib import FUNCTIONS
from extender.cel.lib.regex import compile_pattern
from extender.cel.values import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    CelError,
    CelType,
    EvalError,
    build_map,
    kind,
    qualifier_type,
)

#: cel-go ``IsTypeConversionFunction``: folded when the argument is a constant
CONVERSIONS = frozenset({"bool", "bytes", "double", "duration", "dyn", "int", "string",
                         "timestamp", "type", "uint"})
#: regex functions whose constant pattern (argument 1, receiver first) is compiled
REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})
#: parsers of the Kubernetes libraries: pure functions of their string arguments,
#: returning immutable values; their results are remembered per argument (``_memoised``)
PARSERS = frozenset({"quantity", "isQuantity", "semver", "isSemver", "ip", "isIP", "cidr",
                     "isCIDR", "url", "isURL", "ip.isCanonical", "format.named"})
NON_STRICT = frozenset({"@not_strictly_false"})


class Plan:
    """A planned step; ``Const`` and ``Attr`` are what parents inspect."""


@dataclass(eq=False)
class Const(Plan):
    value: Any


@dataclass(eq=False)
class Qual:
    """A qualifier of an attribute: a constant field / key / index, or an attribute (or a
    computed value) giving the key; ``test_only`` for ``has()``."""

    const: Any = None
    attr: Attr | None = None
    optional: bool = False
    test_only: bool = False


@dataclass(eq=False)
class Attr(Plan):
    """An attribute: a variable (``var``), the value of a plan (``relative``) or a ternary
    (``cond``, ``then``, ``otherwise``), then qualifiers.  ``test_only``: the ``has()``
    wrapper (its unit is refunded, PresenceTestHasCost(false))."""

    var: str | None = None
    slot: int | None = None
    lazy: Plan | None = None  # an accumulator's lazily evaluated initial value
    relative: Plan | None = None
    cond: Plan | None = None
    then: Attr | None = None
    otherwise: Attr | None = None
    quals: list[Qual] = field(default_factory=list)
    test_only: bool = False

    def add(self, qual: Qual) -> Attr:
        if self.cond is not None:  # a ternary qualifies both branches
            self.then.add(qual)
            self.otherwise.add(qual)
        else:
            self.quals.append(qual)
        return self


@dataclass(eq=False)
class Call(Plan):
    function: str
    overload: str  # "" when several overloads fit
    mode: str  # zero | unary | binary | varargs
    args: list[Plan]
    impl: Any
    non_strict: bool = False
    types: tuple = ()  # the arguments' static types (receiver first)


@dataclass(eq=False)
class Equals(Plan):
    lhs: Plan
    rhs: Plan
    negate: bool
    types: tuple = ()


@dataclass(eq=False)
class Logic(Plan):
    lhs: Plan
    rhs: Plan
    is_or: bool


@dataclass(eq=False)
class ListLit(Plan):
    elems: list[Plan]
    optional: frozenset


@dataclass(eq=False)
class MapLit(Plan):
    entries: list[Plan]  # key, value, key, value ...
    optional: frozenset


@dataclass(eq=False)
class Fold(Plan):
    macro: str
    range: Plan
    init: Plan
    cond: Plan
    step: Plan
    result: Plan
    iter_slots: tuple[int, ...]
    accu_slot: int
    node: Node  # the comprehension (fast paths read its shape)


@dataclass(eq=False)
class SetIn(Plan):
    arg: Plan
    keys: frozenset


@dataclass(eq=False)
class OptionalOr(Plan):
    lhs: Plan
    rhs: Plan
    value: bool  # orValue


class Planner:
    def __init__(self) -> None:
        self.slots = 0

    def plan(self, n: Node, scope: dict[str, tuple[int, Plan | None]]) -> Plan:
        return getattr(self, "_" + n.kind)(n, scope)

    # --- leaves ------------------------------------------------------------------------
    def _const(self, n: Node, scope: dict) -> Plan:
        return Const(n.value)

    def _ident(self, n: Node, scope: dict) -> Plan:
        if n.value != "root" and n.name in scope:
            slot, lazy = scope[n.name]
            return Attr(var=n.name, slot=slot, lazy=lazy)
        if n.name in TYPE_IDENTS:
            return Const(CelType(TYPE_IDENTS[n.name]))
        return Attr(var=n.name)

    def _select(self, n: Node, scope: dict) -> Plan:
        return self._attr_of(self.plan(n.target, scope)).add(Qual(const=n.name))

    def _has(self, n: Node, scope: dict) -> Plan:
        attr = self._attr_of(self.plan(n.target, scope))
        attr.add(Qual(const=n.name, test_only=True))
        return Attr(relative=attr, test_only=True)

    @staticmethod
    def _attr_of(p: Plan) -> Attr:
        """The attribute cel-go qualifies or branches on: an attribute itself (``has()``:
        the attribute it tests), anything else as the value of its evaluation."""
        if isinstance(p, Attr):
            return p.relative if p.test_only else p
        return Attr(relative=p)

    # --- literals ----------------------------------------------------------------------
    def _list(self, n: Node, scope: dict) -> Plan:
        elems = [self.plan(a, scope) for a in n.args]
        if all(isinstance(e, Const) for e in elems):
            return Const([e.value for e in elems])
        return ListLit(elems, n.value)

    def _map(self, n: Node, scope: dict) -> Plan:
        entries = [self.plan(a, scope) for a in n.args]
        if all(isinstance(e, Const) for e in entries):
            try:
                return Const(build_map([e.value for e in entries]))
            except CelError:  # keys this engine cannot hold apart: an evaluation error
                pass
        return MapLit(entries, n.value)

    # --- calls -------------------------------------------------------------------------
    def _call(self, n: Node, scope: dict) -> Plan:
        name = n.name
        args = [self.plan(a, scope) for a in n.children()]
        if name in ("_&&_", "_||_"):
            return Logic(args[0], args[1], is_or=name == "_||_")
        if name == "_?_:_":
            return Attr(cond=args[0], then=self._attr_of(args[1]),
                        otherwise=self._attr_of(args[2]))
        static = tuple(a.type for a in n.children())
        if name in ("_==_", "_!=_"):
            return Equals(args[0], args[1], negate=name == "_!=_", types=static)
        if name in ("_[_]", "_[?_]", "_?._"):
            return self._index(args[0], args[1], optional=name != "_[_]")
        oid = n.overloads[0] if len(n.overloads) == 1 else ""
        if name in ("or", "orValue") and len(args) == 2:
            return OptionalOr(args[0], args[1], value=name == "orValue")
        if name == "@in" and oid == "in_list" and isinstance(args[1], Const):
            return _set_membership(args[0], args[1].value)
        letters = decl_table.binding(name, oid or None, BINDINGS)
        mode = decl_table.call_mode(letters, len(args))
        impl = FUNCTIONS.get(name)
        if name in PARSERS and impl is not None:
            impl = _memoised(name, impl)
        call = Call(name, oid, mode, args, impl, non_strict=name in NON_STRICT, types=static)
        if name in CONVERSIONS and len(args) == 1 and isinstance(args[0], Const):
            return _fold_conversion(call)
        if (name in REGEX_FUNCTIONS and len(args) > 1 and isinstance(args[1], Const)
                and isinstance(args[1].value, str)):
            try:
                compile_pattern(args[1].value)
            except EvalError as exc:
                raise CompileError(str(exc)) from None
            call.mode = "varargs"
        return call

    def _index(self, operand: Plan, index: Plan, optional: bool) -> Plan:
        attr = self._attr_of(operand)
        if isinstance(index, Const):
            if not _valid_qualifier(index.value):
                raise CompileError(f"invalid qualifier type: {qualifier_type(index.value)}")
            return attr.add(Qual(const=index.value, optional=optional))
        return attr.add(Qual(attr=self._attr_of(index), optional=optional))

    # --- comprehensions ----------------------------------------------------------------
    def _comp(self, n: Node, scope: dict) -> Plan:
        rng_node, init_node, cond_node, step_node, result_node = n.args
        iter_var, iter_var2, accu_var = n.vars
        init = self.plan(init_node, scope)
        rng = self.plan(rng_node, scope)
        accu_slot = self._slot()
        inner = {**scope, accu_var: (accu_slot, init)}
        iter_slots = [self._slot()]
        loop = {**inner, iter_var: (iter_slots[0], None)}
        if iter_var2:
            iter_slots.append(self._slot())
            loop[iter_var2] = (iter_slots[1], None)
        cond = self.plan(cond_node, loop)
        step = self.plan(step_node, loop)
        result = self.plan(result_node, inner)
        return Fold(n.name, rng, init, cond, step, result, tuple(iter_slots), accu_slot, n)

    def _slot(self) -> int:
        self.slots += 1
        return self.slots - 1


# First in, first out (`recency=False`): a hit is one dict read, as a plain dict's; the
# LRU flavour's lock and bookkeeping slow the parse-bound evaluations down, and the
# url() class is the floor the CEL admission rule assumes (extender/validation/limits.py;
# figures in docs/design/caching.md).
_PARSED = ByteLRU.counted("cel-parsers", 8192, recency=False)


def _memoised(name: str, impl: Any) -> Any:
    """``impl`` remembering its result (or error message) per string arguments: a
    library parse costs tens of microseconds here, a lookup well under one, and the same
    strings come back for every taint and every evaluation.  Bounded, oldest out."""

    def parse(*args: Any) -> Any:
        if not all(type(a) is str or type(a) is bool for a in args):
            return impl(*args)
        key = (name, *args)
        hit = _PARSED.get(key)
        if hit is None:
            try:
                hit = (True, impl(*args))
            except CelError as exc:
                hit = (False, str(exc))
            _PARSED.put(key, hit)
        if hit[0]:
            return hit[1]
        raise CelError(hit[1])

    parse.__wrapped__ = impl  # type: ignore[attr-defined]
    return parse


def _valid_qualifier(value: Any) -> bool:
    """cel-go ``newQualifier`` accepts strings, ints, uints, bools and doubles."""
    return kind(value) in ("string", "int", "uint", "bool", "double")


def _fold_conversion(call: Call) -> Plan:
    """A type conversion of a constant is evaluated when the program is built; its error
    fails the program (cel-go ``maybeOptimizeConstUnary``)."""
    try:
        if call.impl is None:
            raise CelError(f"no such overload: {call.function}")
        return Const(call.impl(call.args[0].value))
    except CelError as exc:
        raise CompileError(f"program: {exc}") from None


def _set_membership(arg: Plan, items: list) -> Plan:
    """``x in <constant list>`` (cel-go ``maybeOptimizeSetMembership``): an empty list is
    the constant false; a list of bools, ints, uints, doubles and strings a set lookup
    (numbers also under their lossless conversions); anything else stays a call."""
    if not items:
        return Const(False)
    keys = set()
    for v in items:
        k = kind(v)
        if k not in ("bool", "double", "int", "string", "uint"):
            return _in_list_call(arg, items)
        keys.update(set_keys(v))
    return SetIn(arg, frozenset(keys))


def _in_list_call(arg: Plan, items: list) -> Plan:
    return Call("@in", "in_list", "binary", [arg, Const(items)], FUNCTIONS.get("@in"))


def set_keys(v: Any) -> list[tuple]:
    """The keys cel-go's set-membership map holds for one constant element."""
    k = kind(v)
    if k == "double":
        f = float(v)
        out = [("double", f)] if f == f else []
        if f == f and f.is_integer():
            i = int(f)
            if INT64_MIN <= i <= INT64_MAX and float(i) == f and i != INT64_MAX + 1:
                out.append(("int", i))
            if 0 <= i <= UINT64_MAX and f < 2.0**64:
                out.append(("uint", i))
        return out
    if k == "int":
        out = [("int", int(v)), ("double", float(int(v)))]
        if int(v) >= 0:
            out.append(("uint", int(v)))
        return out
    if k == "uint":
        out = [("uint", int(v)), ("double", float(int(v)))]
        if int(v) <= INT64_MAX:
            out.append(("int", int(v)))
        return out
    if k == "bool":
        return [("bool", bool(v))]
    return [("string", str(v))]
