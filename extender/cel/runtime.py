"""Evaluation: the checked expression tree compiled once into Python closures.

``compile_tree(root)`` turns the IR (``extender.cel.ast``, annotated by the checker) into
nested closures over native values (``extender.cel.values``), once per program; an
evaluation is then one call of the root closure with a fresh ``Budget`` — no tree walk,
no per-node dispatch, no wrapper objects.  Programs are shared read-only by all threads;
the per-evaluation state (cost used, comprehension variables, the taint) lives in the
``Budget``.

Semantics are cel-go's:

* cost — the same units at the same points as cel-go's runtime cost tracker (identifiers
  and selections 1, calls 1 or their size-scaled cost from ``extender.cel.cost``,
  list/map literals 10/30, comprehension iterations ``ITERATION_COST``), checked after
  every charge, so the limit interrupts at the same point (``CostLimitExceeded``, with
  the units used);
* errors are raised ``CelError``s; a call evaluates all its arguments before the first
  error propagates (as cel-go's interpreter does); ``&&``, ``||``, ``all`` and
  ``exists`` absorb an error when the other side decides the result;
* the request deadline (``extender.cel.deadline``) is checked every 32 comprehension
  iterations and after every costly library call (``DeadlineExceeded``).  The deadline
  is never a verdict: only the cost budget decides "cost" outcomes, so a verdict depends
  on (expression, taint) only.  Both are ``BaseException`` subclasses so no
  ``except Exception`` turns them into a CEL error.

Operators on statically typed strings, ints and doubles run as specialised closures
(the same result and cost as the library function); a library function replaced at
compile time (tests emulating another engine patch ``FUNCTIONS``) turns them off.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from extender.cel import deadline
from extender.cel.ast import Node
from extender.cel.cost import _RULES, TEXT_SCALED, call_cost
from extender.cel.lib import FUNCTIONS
from extender.cel.lib.lists import sort_values
from extender.cel.lib.optional import NONE, OptElem, Optional
from extender.cel.limits import (
    ITERATION_COST,
    LIST_CREATE_COST,
    MAP_CREATE_COST,
    STRING_TRAVERSAL_FACTOR,
    UNBOUNDED,
)
from extender.cel.values import (
    _MISSING,
    INT64_MAX,
    INT64_MIN,
    TYPE_NAMES,
    CelError,
    CelType,
    EvalError,
    kind,
    map_get,
)

Fn = Callable[["Budget"], Any]
TAINT_FIELDS = ("key", "value", "effect")
#: a library call charged at least this many units is followed by a deadline check
_DEADLINE_CALL_COST = 64
_STOCK = dict(FUNCTIONS)  # the library as shipped (specialisations must match it)


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


def _exceed(b: Budget, parts: tuple[int, ...]) -> None:
    """Charge ``parts`` one at a time (a fused charge went over the limit: report the
    units used where the unfused charges would have stopped)."""
    for units in parts:
        b.charge(units)


def _tick(b: Budget) -> None:
    b.ticks += 1
    if not b.ticks & 31 and b.deadline is not None:
        deadline.check(b.deadline)


def _truth(v: Any) -> bool | None:
    """True/False for a CEL bool, None for anything else."""
    if v is True or v is False:
        return v
    return bool(v) if kind(v) == "bool" else None


class Runner:
    """A compiled program: ``run`` evaluates it for one taint under a budget."""

    __slots__ = ("root", "slots")

    def __init__(self, root: Fn, slots: int) -> None:
        self.root, self.slots = root, slots

    def run(self, taint: tuple[str, str, str], budget: Budget) -> Any:
        budget.taint = taint
        budget.vars = [None] * self.slots
        return self.root(budget)


def compile_tree(root: Node) -> Runner:
    compiler = _Compiler()
    fn = compiler.node(root, {})
    return Runner(fn, compiler.slots)


def _const(value: Any) -> Fn:
    return lambda b: value


def _is_taint(n: Node, scope: dict) -> bool:
    return n.kind == "ident" and n.name == "taint" and (n.value == "root" or "taint" not in scope)


def _static(t: Any) -> str:
    return t[0] if isinstance(t, tuple) else t


class _Compiler:
    def __init__(self) -> None:
        self.slots = 0

    def node(self, n: Node, scope: dict[str, int]) -> Fn:
        return getattr(self, "_" + n.kind)(n, scope)

    # --- leaves ------------------------------------------------------------------------
    def _const(self, n: Node, scope: dict) -> Fn:
        return _const(n.value)

    def _ident(self, n: Node, scope: dict) -> Fn:
        if n.value != "root" and n.name in scope:
            slot = scope[n.name]

            def var(b: Budget) -> Any:
                b.used += 1
                if b.used > b.limit:
                    raise CostLimitExceeded(b.used)
                return b.vars[slot]

            return var
        if n.name == "taint":
            def taint(b: Budget) -> Any:
                b.charge(1)
                return dict(zip(TAINT_FIELDS, b.taint, strict=True))

            return taint
        if n.name in TYPE_NAMES:
            value = CelType(n.name)

            def type_ident(b: Budget) -> Any:
                b.charge(1)
                return value

            return type_ident
        name = n.name

        def undeclared(b: Budget) -> Any:  # the checker rejects these first
            b.charge(1)
            raise CelError(f"undeclared reference to '{name}'")

        return undeclared

    # --- selection ---------------------------------------------------------------------
    def _select(self, n: Node, scope: dict) -> Fn:
        field = n.name
        if _is_taint(n.target, scope) and field in TAINT_FIELDS:
            index = TAINT_FIELDS.index(field)

            def taint_field(b: Budget) -> Any:  # the identifier and the selection: 1 + 1
                used = b.used + 2
                if used > b.limit:
                    _exceed(b, (1, 1))
                b.used = used
                return b.taint[index]

            return taint_field
        target = self.node(n.target, scope)

        def select(b: Budget) -> Any:
            try:
                obj = target(b)
            except CelError:
                b.charge(1)
                raise
            b.used += 1
            if b.used > b.limit:
                raise CostLimitExceeded(b.used)
            k = kind(obj)
            if k != "map":
                raise CelError(f"type '{k}' does not support field selection")
            value = obj.get(field, _MISSING)
            if value is _MISSING:
                raise CelError(f"no such key: '{field}'")
            return value

        return select

    def _has(self, n: Node, scope: dict) -> Fn:
        """``has(x.f)``: an error in ``x`` propagates (cel-go); on a map, whether the key
        is present; on any other value, false (cel-go's presence test)."""
        field, target = n.name, self.node(n.target, scope)

        def has(b: Budget) -> Any:
            b.charge(1)
            try:
                obj = target(b)
            except CelError:
                b.charge(1)
                raise
            b.charge(1)
            return kind(obj) == "map" and field in obj

        return has

    # --- literals ----------------------------------------------------------------------
    def _list(self, n: Node, scope: dict) -> Fn:
        items = [self.node(a, scope) for a in n.args]
        optional = any(a.kind == "call" and a.name == "__opt_elem__" for a in n.args)

        def list_literal(b: Budget) -> Any:
            b.charge(LIST_CREATE_COST)
            values = _all_args(items, b)
            if optional:
                return [v.opt.value if isinstance(v, OptElem) else v for v in values
                        if not isinstance(v, OptElem) or v.opt.has_value]
            return values

        return list_literal

    def _map(self, n: Node, scope: dict) -> Fn:
        parts = [self.node(a, scope) for a in n.args]

        def map_literal(b: Budget) -> Any:
            b.charge(MAP_CREATE_COST)
            values = _all_args(parts, b)
            out: dict = {}
            for key, value in zip(values[0::2], values[1::2], strict=True):
                if isinstance(value, OptElem):  # {?k: v}: the entry only if v has a value
                    if not value.opt.has_value:
                        continue
                    value = value.opt.value
                if map_get(out, key) is not _MISSING:
                    raise CelError(f"Failed with repeated key: {_show(key)}")
                if key in out:  # Python: True == 1 == 1.0; CEL: different keys
                    raise CelError("a map literal cannot mix bool and number keys here")
                out[key] = value
            return out

        return map_literal

    # --- calls -------------------------------------------------------------------------
    def _call(self, n: Node, scope: dict) -> Fn:
        name = n.name
        nodes = ([n.target] if n.target is not None else []) + n.args
        if name in ("_&&_", "_||_"):
            return _logic(self.node(nodes[0], scope), self.node(nodes[1], scope),
                          decisive=name == "_||_")
        if name == "_?_:_":
            return _conditional(*(self.node(a, scope) for a in nodes))
        folded = _folded(name, nodes)
        if folded is not None:
            return folded
        args = [self.node(a, scope) for a in nodes]
        if name in ("or", "orValue") and n.target is not None and len(args) == 2:
            return _optional_or(name, args[0], args[1])
        fast = _specialised(name, [_static(a.type) for a in nodes], args)
        if fast is not None:
            return fast
        return _generic_call(name, args)

    # --- comprehensions ----------------------------------------------------------------
    def _comp(self, n: Node, scope: dict) -> Fn:
        target = self.node(n.target, scope)
        inner = dict(scope)
        slots = []
        for var in n.vars:
            inner[var] = self.slots
            slots.append(self.slots)
            self.slots += 1
        exprs = [self.node(a, inner) for a in n.args]
        if n.name in ("optMap", "optFlatMap"):
            return _opt_map(n.name, target, slots[0], exprs[0])
        two = len(slots) == 2
        impl = _MACROS[n.name]
        name = n.name

        def comprehension(b: Budget) -> Any:
            rng = target(b)
            k = kind(rng)
            if k == "list":
                pairs = list(enumerate(rng)) if two else rng
            elif k == "map":
                pairs = list(rng.items()) if two else list(rng)
            else:
                raise CelError(f"{name}() cannot iterate over {k}")
            return impl(b, slots, exprs, pairs, rng)

        return comprehension


def _show(v: Any) -> str:
    """A value in messages: CEL literal syntax for the simple kinds, never a repr."""
    k = kind(v)
    if k == "string":
        return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if k == "bool":
        return "true" if v else "false"
    if k == "uint":
        return f"{int(v)}u"
    if k in ("int", "double"):
        return str(v)
    return k


def _both(first: Fn, second: Fn, b: Budget) -> tuple[Any, Any]:
    """Two arguments, both evaluated even when the first fails (then its error)."""
    try:
        x = first(b)
    except CelError:
        try:
            second(b)
        except CelError:
            pass
        raise
    return x, second(b)


def _all_args(fns: list[Fn], b: Budget) -> list:
    """Evaluate every argument (cel-go evaluates all before looking for errors); raise the
    first error."""
    values = []
    error = None
    for f in fns:
        try:
            values.append(f(b))
        except CelError as exc:
            if error is None:
                error = exc
    if error is not None:
        raise error
    return values


def _invoke(name: str, fn: Callable | None, args: list, b: Budget, cost: int) -> Any:
    b.used += cost
    if b.used > b.limit:
        raise CostLimitExceeded(b.used)
    if fn is None:
        raise CelError(f"undeclared reference to '{name}'")
    try:
        result = fn(*args)
    except CelError:
        raise
    except Exception as exc:  # cel-python built-ins (timestamps) may raise
        raise CelError(f"{name}: {exc}") from None
    if cost >= _DEADLINE_CALL_COST and b.deadline is not None:
        deadline.check(b.deadline)  # a long library call cannot be interrupted
    return result


def _generic_call(name: str, args: list[Fn]) -> Fn:
    fn = FUNCTIONS.get(name)
    sized = name in _RULES
    if len(args) == 1 and not sized:
        (a0,) = args

        def call1(b: Budget) -> Any:
            return _invoke(name, fn, [a0(b)], b, 1)

        return call1
    if len(args) == 1 and name in TEXT_SCALED:
        (a0,) = args

        def text_call(b: Budget) -> Any:  # cost.TEXT_SCALED: max(1, ceil(0.1 * len))
            x = a0(b)
            t = type(x)
            cost = (max(1, min(UNBOUNDED, math.ceil(len(x) * STRING_TRAVERSAL_FACTOR)))
                    if t is str or t is bytes or kind(x) in ("string", "bytes") else 1)
            return _invoke(name, fn, [x], b, cost)

        return text_call
    if len(args) == 2:
        a0, a1 = args

        def call2(b: Budget) -> Any:
            x, y = _both(a0, a1, b)
            values = [x, y]
            return _invoke(name, fn, values, b, call_cost(name, values) if sized else 1)

        return call2

    def call(b: Budget) -> Any:
        values = _all_args(args, b)
        return _invoke(name, fn, values, b, call_cost(name, values) if sized else 1)

    return call


def _optional_or(name: str, target: Fn, arg: Fn) -> Fn:
    """``opt.or(o)`` / ``opt.orValue(v)``: cel-go short-circuits both (the argument is not
    evaluated when the receiver has a value)."""
    fn = FUNCTIONS.get(name)

    def optional_or(b: Budget) -> Any:
        try:
            opt = target(b)
        except CelError:
            try:
                arg(b)
            except CelError:
                pass
            raise
        if isinstance(opt, Optional) and opt.has_value:
            b.charge(call_cost(name, [opt, None]))
            return opt if name == "or" else opt.value
        values = [opt, arg(b)]
        return _invoke(name, fn, values, b, call_cost(name, values))

    return optional_or


def _logic(left: Fn, right: Fn, decisive: bool) -> Fn:
    """``||`` (decisive True) and ``&&`` (decisive False), cel-go's rules: short-circuit,
    and an error is absorbed when the other side decides the result."""
    op = "_||_" if decisive else "_&&_"

    def logic(b: Budget) -> Any:
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
        lt, rt = _truth(lv), _truth(rv)
        if lt is decisive:
            return lv
        if rt is decisive:
            return rv
        for v in (lv, rv):
            if isinstance(v, CelError):
                raise v
        if lt is not None and rt is not None:
            return not decisive
        raise CelError(f"no such overload: {op}({kind(lv)}, {kind(rv)})")

    return logic


def _conditional(cond: Fn, then: Fn, otherwise: Fn) -> Fn:
    def conditional(b: Budget) -> Any:
        c = cond(b)
        if c is True:
            return then(b)
        if c is False:
            return otherwise(b)
        t = _truth(c)
        if t is None:
            raise CelError(f"no such overload: _?_:_({kind(c)}, ...)")
        return then(b) if t else otherwise(b)

    return conditional


#: Functions whose result on constant arguments is an immutable value computed once at
#: compile time (the parsers of the Kubernetes libraries and the time conversions): the
#: call is still charged at every evaluation, only the work is done once.
_FOLDABLE = frozenset({"quantity", "semver", "ip", "cidr", "url", "timestamp", "duration",
                       "isQuantity", "isSemver", "isIP", "isCIDR", "isURL",
                       "format.dns1123Label", "format.dns1123Subdomain", "format.dns1035Label",
                       "format.qualifiedName", "format.dns1123LabelPrefix",
                       "format.dns1123SubdomainPrefix", "format.dns1035LabelPrefix",
                       "format.labelValue", "format.uri", "format.uuid", "format.byte",
                       "format.date", "format.datetime"})


def _folded(name: str, nodes: list[Node]) -> Fn | None:
    fn = FUNCTIONS.get(name)
    if name not in _FOLDABLE or fn is None or fn is not _STOCK.get(name) or any(
            a.kind != "const" for a in nodes):
        return None
    args = [a.value for a in nodes]
    try:
        value = fn(*args)
    except Exception:  # noqa: BLE001 - an error stays a runtime error, raised each time
        return None
    cost = call_cost(name, args)

    def constant_call(b: Budget) -> Any:
        b.used += cost
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return value

    return constant_call


def _int_arithmetic(name: str, a0: Fn, a1: Fn) -> Fn:
    """``+ - *`` on ints: cost 1, "integer overflow" outside int64 (as stdlib)."""
    op = {"_+_": lambda x, y: x + y, "_-_": lambda x, y: x - y,
          "_*_": lambda x, y: x * y}[name]

    def int_arithmetic(b: Budget) -> Any:
        x, y = _both(a0, a1, b)
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        r = op(x, y)
        if not INT64_MIN <= r <= INT64_MAX:
            raise CelError(f"{name}: integer overflow")
        return r

    return int_arithmetic


# --- specialised operators ---------------------------------------------------------------
#
# Each one computes what the stock library function and cost rule compute, for operands
# whose static types the checker fixed (so no kind dispatch is needed at runtime).

def _text_cost(n: int) -> int:
    """``1 + ceil(0.1 * n)`` as cost._RULES charges string comparisons."""
    return 1 + min(UNBOUNDED, math.ceil(n * STRING_TRAVERSAL_FACTOR))


def _string_compare(name: str, a0: Fn, a1: Fn) -> Fn | None:
    tests: dict[str, Callable[[str, str], bool]] = {
        "_==_": lambda x, y: x == y, "_!=_": lambda x, y: x != y,
    }
    test = tests.get(name)
    if test is None:
        return None
    equal = name == "_==_"

    def string_equality(b: Budget) -> Any:
        x, y = _both(a0, a1, b)
        n = len(x) if len(x) < len(y) else len(y)
        b.used += 1 + math.ceil(n * STRING_TRAVERSAL_FACTOR)
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return (x == y) is equal

    return string_equality


def _prefix_test(name: str, a0: Fn, a1: Fn) -> Fn:
    method = str.startswith if name == "startsWith" else str.endswith

    def prefix_test(b: Budget) -> Any:
        x, y = _both(a0, a1, b)
        cost = max(1, min(UNBOUNDED, math.ceil(len(y) * STRING_TRAVERSAL_FACTOR)))
        b.used += cost
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return method(x, y)

    return prefix_test


_NUMBER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "_==_": lambda x, y: x == y, "_!=_": lambda x, y: x != y, "_<_": lambda x, y: x < y,
    "_<=_": lambda x, y: x <= y, "_>_": lambda x, y: x > y, "_>=_": lambda x, y: x >= y,
}


def _int_compare(name: str, a0: Fn, a1: Fn) -> Fn:
    test = _NUMBER_OPS[name]

    def int_compare(b: Budget) -> Any:
        x, y = _both(a0, a1, b)
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return test(x, y)

    return int_compare


def _specialised(name: str, static: list[Any], args: list[Fn]) -> Fn | None:
    if FUNCTIONS.get(name) is not _STOCK.get(name) or len(args) != 2:
        return None
    if static == ["string", "string"]:
        if name in ("_==_", "_!=_"):
            return _string_compare(name, *args)
        if name in ("startsWith", "endsWith"):
            return _prefix_test(name, *args)
    if static in (["int", "int"], ["uint", "uint"]) and name in _NUMBER_OPS:
        return _int_compare(name, *args)
    if static == ["int", "int"] and name in ("_+_", "_-_", "_*_"):
        return _int_arithmetic(name, *args)
    return None


# --- comprehensions ------------------------------------------------------------------------

def _bind(b: Budget, slots: list[int], pair: Any) -> None:
    b.used += ITERATION_COST
    if b.used > b.limit:
        raise CostLimitExceeded(b.used)
    b.ticks += 1
    if not b.ticks & 31 and b.deadline is not None:
        deadline.check(b.deadline)
    if len(slots) == 1:
        b.vars[slots[0]] = pair
    else:
        b.vars[slots[0]], b.vars[slots[1]] = pair


def _quantifier(decisive: bool) -> Callable:  # all: decisive False; exists: True
    def quantifier(b: Budget, slots, exprs, pairs, rng) -> Any:
        body = exprs[0]
        error = None
        first, second = slots[0], slots[-1]
        two, limit = len(slots) == 2, b.limit
        for x in pairs:
            b.used += ITERATION_COST
            if b.used > limit:
                raise CostLimitExceeded(b.used)
            b.ticks += 1
            if not b.ticks & 31 and b.deadline is not None:
                deadline.check(b.deadline)
            if two:
                b.vars[first], b.vars[second] = x
            else:
                b.vars[first] = x
            try:
                r = body(b)
            except CelError as exc:
                if error is None:
                    error = exc
                continue
            if r is decisive:
                return r
            if r is not (not decisive):
                t = _truth(r)
                if t is decisive:
                    return t
                if t is None and error is None:
                    error = CelError(f"predicate returned {kind(r)}, not bool")
        if error is not None:
            raise error
        return not decisive

    return quantifier


def _test(b: Budget, body: Fn, role: str) -> bool:
    """A macro's boolean body on the bound element: the bool, or an error."""
    r = body(b)
    t = _truth(r)
    if t is None:
        raise CelError(f"{role} returned {kind(r)}, not bool")
    return t


def _exists_one(b: Budget, slots, exprs, pairs, rng) -> Any:
    count = 0
    for pair in pairs:
        _bind(b, slots, pair)
        count += _test(b, exprs[0], "predicate")
    return count == 1


def _selected(b: Budget, slots, exprs, pairs):
    """Yield (pair, value of the last expression) for elements passing the optional
    filter."""
    for pair in pairs:
        if len(exprs) == 2:
            _bind(b, slots, pair)
            if not _test(b, exprs[0], "filter"):
                continue
        _bind(b, slots, pair)
        yield pair, exprs[-1](b)


def _map(b: Budget, slots, exprs, pairs, rng) -> Any:
    return [value for _pair, value in _selected(b, slots, exprs, pairs)]


def _filter(b: Budget, slots, exprs, pairs, rng) -> Any:
    out = []
    for pair in pairs:
        _bind(b, slots, pair)
        if _test(b, exprs[0], "filter"):
            out.append(pair[0] if len(slots) == 2 else pair)
    return out


def _transform_map(b: Budget, slots, exprs, pairs, rng) -> Any:
    out: dict = {}
    for pair, value in _selected(b, slots, exprs, pairs):
        out[pair[0] if len(slots) == 2 else pair] = value
    return out


def _transform_map_entry(b: Budget, slots, exprs, pairs, rng) -> Any:
    out: dict = {}
    for _pair, entry in _selected(b, slots, exprs, pairs):
        if kind(entry) != "map":
            raise CelError(f"transformMapEntry() expression returned {kind(entry)}, not map")
        for k, v in entry.items():
            if map_get(out, k) is not _MISSING or k in out:
                raise CelError(f"insert failed: key {_show(k)} already exists")
            out[k] = v
    return out


def _sort_by(b: Budget, slots, exprs, pairs, rng) -> Any:
    keys = []
    for pair in pairs:
        _bind(b, slots, pair)
        keys.append(exprs[0](b))
    b.charge(call_cost("sort", [rng]))
    items = [p[0] if len(slots) == 2 else p for p in pairs]
    try:
        return sort_values(items, keys)
    except EvalError as exc:
        raise CelError(f"sortBy: {exc}") from None


def _opt_map(name: str, target: Fn, slot: int, body: Fn) -> Fn:
    """cel-go ``opt.optMap(x, e)`` = ``opt.hasValue() ? optional.of(e[x := opt.value()])
    : optional.none()``; ``optFlatMap`` does not wrap (``e`` must be an optional)."""

    def opt_map(b: Budget) -> Any:
        opt = target(b)
        if not isinstance(opt, Optional):
            raise CelError(f"no such overload: {name}({kind(opt)})")
        if not opt.has_value:
            return NONE
        _bind(b, [slot], opt.value)
        result = body(b)
        if name == "optMap":
            return Optional(result)
        if not isinstance(result, Optional):
            raise CelError(f"optFlatMap() expression returned {kind(result)}, not optional_type")
        return result

    return opt_map


_MACROS: dict[str, Callable] = {
    "all": _quantifier(False), "exists": _quantifier(True), "exists_one": _exists_one,
    "existsOne": _exists_one, "map": _map, "filter": _filter, "transformList": _map,
    "transformMap": _transform_map, "transformMapEntry": _transform_map_entry,
    "sortBy": _sort_by,
}

