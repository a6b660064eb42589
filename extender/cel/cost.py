"""Cost units exactly as cel-go v0.26 with Kubernetes' environment counts them.

* ``estimate(root)`` -- the admission-time (min, max) estimate: cel-go's ``checker.Cost``
  over the checked, macro-expanded tree, with the overload estimators of cel-go's lists
  and sets extensions, Kubernetes' ``library.CostEstimator`` and the taint fields at their
  declared maximum sizes (key 317, value 63, effect 16 bytes).  ``PresenceTestHasCost``
  is false (``has()`` adds nothing).
* ``call_cost(function, overload, args, result)`` -- the run-time charge of one call
  (cel-go's ``CostTracker.costCall``): the extensions' trackers by overload id, then
  Kubernetes' ``CallCost`` by function name, then cel-go's defaults by overload id.

Arithmetic follows Go's: sizes and costs saturate at 2^64-1, factors are float64
multiplications rounded up (estimate) or truncated (the trackers that truncate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from extender.cel.ast import ACCU, LEGACY_ACCU, Node, is_bind
from extender.cel.lib.format import Format
from extender.cel.lib.optional import Optional
from extender.cel.limits import TAINT_EFFECT_MAX, TAINT_KEY_MAX, TAINT_VALUE_MAX
from extender.cel.types import is_scalar, kind
from extender.cel.values import CelError

MAXU = 2**64 - 1
_TWO64 = float(2**64)
STRING_TRAVERSAL = 0.1
REGEX_LENGTH = 0.25
LIST_CREATE = 10
MAP_CREATE = 30
#: Kubernetes ``MaxNameFormatRegexSize`` / ``MaxFormatSize``
NAME_FORMAT_REGEX_SIZE = 128
MAX_FORMAT_SIZE = 64
TAINT_SIZES = {"key": TAINT_KEY_MAX, "value": TAINT_VALUE_MAX, "effect": TAINT_EFFECT_MAX}

Range = tuple[int, int]  # (min, max), both uint64
UNKNOWN: Range = (0, MAXU)


def add(a: int, b: int) -> int:
    return min(a + b, MAXU)


def mul(a: int, b: int) -> int:
    return min(a * b, MAXU)


def by_factor(x: int, factor: float) -> int:
    """Go ``multiplyByCostFactor``: ceil(x * factor), saturating."""
    xf = float(x)
    if xf > 0 and factor > 0 and xf > _TWO64 / factor:
        return MAXU
    c = math.ceil(xf * factor)
    return MAXU if c >= _TWO64 else c


def radd(a: Range, b: Range) -> Range:
    return add(a[0], b[0]), add(a[1], b[1])


def rmul(a: Range, b: Range) -> Range:
    return mul(a[0], b[0]), mul(a[1], b[1])


def rfactor(a: Range, factor: float) -> Range:
    return by_factor(a[0], factor), by_factor(a[1], factor)


def union(a: Range, b: Range) -> Range:
    return min(a[0], b[0]), max(a[1], b[1])


def fixed(n: int) -> Range:
    return n, n


def sum_ranges(parts: list[Range]) -> Range:
    total: Range = (0, 0)
    for p in parts:
        total = radd(total, p)
    return total


@dataclass(frozen=True, slots=True)
class Entry:
    """Size estimates of a list's / map's entries (cel-go ``entrySizeEstimate``)."""

    container: str  # "list" | "map"
    key: Range
    val: Range


def _entry_union(a: Entry | None, b: Entry | None) -> Entry | None:
    if a is None or b is None:
        return None
    return Entry(a.container, union(a.key, b.key), union(a.val, b.val))


@dataclass(slots=True)
class _Local:
    path: list[str] | None
    size: Range | None
    entry: Entry | None


@dataclass(slots=True)
class AstNode:
    """cel-go ``checker.AstNode``: what a function estimator sees of an argument."""

    path: list[str] | None
    type: Any
    expr: Node | None
    size: Range | None  # ComputedSize


# --- the estimate --------------------------------------------------------------------

def estimate(root: Node) -> Range:
    """The (min, max) cost estimate of the checked expression."""
    return _Coster().cost(root)


def _taint_size(path: list[str] | None) -> Range | None:
    """The size estimator Kubernetes is given for KEP-5500: the declared maximum sizes of
    ``taint.key``, ``taint.value``, ``taint.effect``."""
    if path and len(path) == 2 and path[0] == "taint" and path[1] in TAINT_SIZES:
        return 0, TAINT_SIZES[path[1]]
    return None


class _Coster:
    def __init__(self) -> None:
        self.paths: dict[Node, list[str]] = {}
        self.locals: dict[str, list[_Local]] = {}
        self.sizes: dict[Node, Range] = {}
        self.entries: dict[Node, Entry] = {}

    def cost(self, e: Node) -> Range:
        return getattr(self, "_" + e.kind)(e)

    # --- scopes, paths, sizes ------------------------------------------------------------
    def local(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, local: _Local) -> None:
        self.locals.setdefault(name, []).append(local)

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def path(self, e: Node) -> list[str] | None:
        if e.kind == "ident":
            v = self.local(e.name)
            if v is not None:
                return list(v.path) if v.path is not None else None
        p = self.paths.get(e)
        return list(p) if p is not None else None

    def node(self, e: Node) -> AstNode:
        path = self.path(e)
        if path and path[0] in (ACCU, LEGACY_ACCU):
            path = None
        return AstNode(path, e.type, e, self.size(e))

    def size(self, e: Node) -> Range | None:
        """cel-go ``computeSize``."""
        if e in self.sizes:
            return self.sizes[e]
        s = _expr_size(e)
        if s is not None:
            return s
        s = _taint_size(self.path(e))
        if s is not None:
            self.sizes[e] = s
            return s
        if is_scalar(e.type):
            return 1, 1
        if e.kind == "ident":
            v = self.local(e.name)
            if v is not None and v.size is not None:
                return v.size
        return None

    def size_or_unknown(self, e: Node) -> Range:
        s = self.size(e)
        return s if s is not None else UNKNOWN

    def entry(self, e: Node) -> Entry | None:
        if e in self.entries:
            return self.entries[e]
        if e.kind == "ident":
            v = self.local(e.name)
            if v is not None and v.entry is not None:
                return v.entry
        return None

    def set_size(self, e: Node, s: Range | None) -> None:
        if s is not None:
            self.sizes[e] = s

    def set_entry(self, e: Node, s: Entry | None) -> None:
        if s is not None:
            self.entries[e] = s

    # --- nodes -------------------------------------------------------------------------
    def _const(self, e: Node) -> Range:
        return 0, 0

    def _ident(self, e: Node) -> Range:
        v = self.local(e.name)
        self.paths[e] = list(v.path) if v is not None and v.path is not None else (
            None if v is not None else [e.name])
        return 1, 1

    def _has(self, e: Node) -> Range:
        return self.cost(e.target)  # PresenceTestHasCost(false)

    def _select(self, e: Node) -> Range:
        total = self.cost(e.target)
        if kind(e.target.type) in ("map", "struct", "param"):
            total = radd(total, (1, 1))
        base = self.path(e.target)
        self.paths[e] = (base or []) + [e.name]
        return total

    def _list(self, e: Node) -> Range:
        total: Range = (0, 0)
        item = (MAXU, 0) if e.args else (0, 0)
        for a in e.args:
            total = radd(total, self.cost(a))
            item = union(item, self.size_or_unknown(a))
        self.set_entry(e, Entry("list", (1, 1), item))
        return radd(total, fixed(LIST_CREATE))

    def _map(self, e: Node) -> Range:
        total: Range = (0, 0)
        keys = vals = (MAXU, 0) if e.args else (0, 0)
        for i in range(0, len(e.args), 2):
            k, v = e.args[i], e.args[i + 1]
            total = radd(total, self.cost(k))
            total = radd(total, self.cost(v))
            keys = union(keys, self.size_or_unknown(k))
            vals = union(vals, self.size_or_unknown(v))
        self.set_entry(e, Entry("map", keys, vals))
        return radd(total, fixed(MAP_CREATE))

    def _comp(self, e: Node) -> Range:
        return self._bind(e) if is_bind(e) else self._loop(e)

    def _bind(self, e: Node) -> Range:
        rng, init, _cond, _step, result = e.args
        total = radd(self.cost(rng), self.cost(init))
        accu = e.vars[2]
        self.push(accu, _Local(self.path(init), self.size(init), self.entry(init)))
        total = radd(total, self.cost(result))
        self.pop(accu)
        self.set_size(e, self.size(result))
        self.set_entry(e, self.entry(result))
        return total

    def _loop(self, e: Node) -> Range:
        rng, init, cond, step, result = e.args
        iter_var, iter_var2, accu = e.vars
        total = radd(self.cost(rng), self.cost(init))
        self.push(accu, _Local(self.path(init), self.size(init), self.entry(init)))
        entry = self.entry(rng)
        container = entry.container if entry is not None else kind(rng.type)
        base = self.path(rng) or []
        if iter_var2:
            self.push(iter_var, _Local(base + ["@indices" if container == "list" else "@keys"],
                                       entry.key if entry else None, None))
            self.push(iter_var2, _Local(base + ["@items" if container == "list" else "@values"],
                                        entry.val if entry else None, None))
        elif container == "list":
            self.push(iter_var, _Local(base + ["@items"], entry.val if entry else None, None))
        else:
            self.push(iter_var, _Local(base + ["@keys"], entry.key if entry else None, None))
        loop = self.cost(cond)
        step_cost = self.cost(step)
        self.pop(iter_var)
        if iter_var2:
            self.pop(iter_var2)
        total = radd(total, self.cost(result))
        self.pop(accu)
        count = self.size_or_unknown(rng)
        total = radd(total, rmul(count, radd(step_cost, loop)))
        if init.kind == "const":
            self.set_size(e, self.size(init))
        elif init.kind in ("list", "map"):
            self.set_size(e, count)
            self.set_entry(e, self.entry(step))
        return total

    def _call(self, e: Node) -> Range:
        if e.name == "dyn" and e.target is None and len(e.args) == 1:
            arg = e.args[0]
            c = self.cost(arg)
            self.set_size(e, self.size(arg))
            self.set_entry(e, self.entry(arg))
            return radd((1, 1), c)
        arg_costs = []
        arg_nodes = []
        for a in e.args:
            arg_costs.append(self.cost(a))
            arg_nodes.append(self.node(a))
        if not e.overloads:
            return 0, 0
        total: Range = (0, 0)
        target = None
        if e.target is not None:
            total = self.cost(e.target)
            target = self.node(e.target)
        fn_cost: Range = (MAXU, 0)
        result_size: Range | None = None
        for oid in e.overloads:
            cost, size = self.function_cost(e, oid, target, arg_nodes, arg_costs)
            fn_cost = union(fn_cost, cost)
            if size is not None:
                result_size = size if result_size is None else union(result_size, size)
            if oid in ("index_list", "index_map") and e.args:
                entry = self.entry(e.args[0])
                result_size = entry.val if entry is not None else None
                self.paths[e] = (self.path(e.args[0]) or []) + [
                    "@items" if oid == "index_list" else "@values"]
            if result_size is None:
                result_size = self.size(e)
        self.set_size(e, result_size)
        return radd(total, fn_cost)

    def function_cost(self, e: Node, oid: str, target: AstNode | None, args: list[AstNode],
                      arg_costs: list[Range]) -> tuple[Range, Range | None]:
        """cel-go ``functionCost``: (cost including the arguments', result size)."""
        arg_sum = sum_ranges(arg_costs)
        est = _EXTENSION_ESTIMATORS.get(oid)
        if est is not None:
            found = est(target, args)
            if found is not None:
                return radd(found[0], arg_sum), found[1]
        found = _kubernetes_estimate(e.name, oid, target, args)
        if found is not None:
            return radd(found[0], arg_sum), found[1]
        if oid == "string_format" and target is not None:
            return radd(rfactor(_size(target), STRING_TRAVERSAL), arg_sum), None
        if oid in ("string_to_bytes", "bytes_to_string", "strings_quote") and len(args) == 1:
            sz = _size(args[0])
            cost = radd(rfactor(sz, STRING_TRAVERSAL), arg_sum)
            if oid == "string_to_bytes":
                return cost, (sz[0], sz[1] * 4 % 2**64)
            if oid == "bytes_to_string":
                return cost, (sz[0] // 4, sz[1])
            return cost, (add(sz[0], 2), (sz[1] * 2 + 2) % 2**64)
        if oid in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return radd(rfactor(_size(args[0]), STRING_TRAVERSAL), arg_sum), None
        if oid == "in_list" and len(args) == 2:
            return radd(rfactor(_size(args[1]), 1), arg_sum), None
        if oid == "matches_string" and target is not None and len(args) == 1:
            text = rfactor(radd(_size(target), (1, 1)), STRING_TRAVERSAL)
            regex = rfactor(_size(args[0]), REGEX_LENGTH)
            return radd(rmul(text, regex), arg_sum), None
        if oid == "contains_string" and target is not None and len(args) == 1:
            a = rfactor(_size(target), STRING_TRAVERSAL)
            b = rfactor(_size(args[0]), STRING_TRAVERSAL)
            return radd(rmul(a, b), arg_sum), None
        if oid in ("logical_or", "logical_and"):
            lhs, rhs = arg_costs
            return (lhs[0], radd(lhs, rhs)[1]), None
        if oid == "conditional":
            size = union(_size(args[1]), _size(args[2]))
            self.set_entry(e, _entry_union(self.entry(e.args[1]), self.entry(e.args[2])))
            cond, yes, no = arg_costs
            return radd(cond, union(yes, no)), size
        if oid in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            size = radd(_size(args[0]), _size(args[1]))
            joined = _entry_union(self.entry(e.args[0]), self.entry(e.args[1]))
            self.set_entry(e, joined)
            if oid == "add_list":
                return radd((1, 1), arg_sum), size
            return radd(rfactor(size, STRING_TRAVERSAL), arg_sum), size
        if oid in _TEXT_COMPARISONS:
            lhs, rhs = _size(args[0]), _size(args[1])
            smallest = min(lhs[1], rhs[1])
            return radd(rfactor((1 if smallest > 0 else 0, smallest), STRING_TRAVERSAL),
                        arg_sum), None
        return radd((1, 1), arg_sum), None


_TEXT_COMPARISONS = frozenset({
    "less_string", "greater_string", "less_equals_string", "greater_equals_string",
    "less_bytes", "greater_bytes", "less_equals_bytes", "greater_equals_bytes", "equals",
    "not_equals"})


def _expr_size(e: Node) -> Range | None:
    """cel-go ``computeExprSize``: literal sizes."""
    if e.kind == "const":
        if isinstance(e.value, str | bytes):
            return len(e.value), len(e.value)
        return 1, 1
    if e.kind == "list":
        return len(e.args), len(e.args)
    if e.kind == "map":
        return len(e.args) // 2, len(e.args) // 2
    return None


def _size(n: AstNode) -> Range:
    """The size of an estimator argument: computed, else declared, else unknown."""
    if n.size is not None:
        return n.size
    declared = _taint_size(n.path)
    return declared if declared is not None else UNKNOWN


def _int_literal(n: AstNode, default: int) -> int:
    """cel-go lists ``nodeAsIntValue``: a literal int argument (negative as 0)."""
    e = n.expr
    if e is None or e.kind != "const" or e.name != "int":
        return default
    return max(0, e.value)


# --- cel-go lists v3 and sets estimators ----------------------------------------------------

def _list_call(factor: float, size: Range, allocates: bool = True) -> tuple[Range, Range]:
    cost = radd(rfactor(size, factor), (1, 1))
    if allocates:
        cost = radd(cost, fixed(LIST_CREATE))
    return cost, size


def _est_slice(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or len(args) != 2:
        return None
    sz = _size(target)
    start, end = _int_literal(args[0], 0), _int_literal(args[1], sz[1])
    return _list_call(1, fixed((end - start) % 2**64))


def _est_range(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is not None or len(args) != 1:
        return None
    return _list_call(1, fixed(_int_literal(args[0], MAXU)))


def _est_reverse(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or args:
        return None
    return _list_call(1, _size(target))


def _est_flatten(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or len(args) > 1:
        return None
    depth = _int_literal(args[0], MAXU) if args else 1
    return _list_call(float(depth), _size(target))


def _est_distinct(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or args:
        return None
    sz = _size(target)
    return _list_call(2.0, rmul(sz, sz))


def _est_sort(element: str, by_keys: bool) -> Any:
    factor = 2.0 + STRING_TRAVERSAL if element in ("string", "bytes") else 2.0

    def estimator(target: AstNode | None, args: list[AstNode]) -> Any:
        if target is None or len(args) != (1 if by_keys else 0):
            return None
        sz = _size(args[0] if by_keys else target)
        return _list_call(factor, rmul(sz, sz))

    return estimator


def _est_sets(factor: float) -> Any:
    def estimator(target: AstNode | None, args: list[AstNode]) -> Any:
        if len(args) != 2:
            return None
        return radd(rfactor(rmul(_size(args[0]), _size(args[1])), factor), (1, 1)), None

    return estimator


_SORTABLE = {"int": "int", "uint": "uint", "double": "double", "bool": "bool",
             "google.protobuf.Duration": "duration", "google.protobuf.Timestamp": "timestamp",
             "string": "string", "bytes": "bytes"}
_EXTENSION_ESTIMATORS: dict[str, Any] = {
    "list_slice": _est_slice, "list_flatten": _est_flatten, "list_flatten_int": _est_flatten,
    "lists_range": _est_range, "list_reverse": _est_reverse, "list_distinct": _est_distinct,
    "list_sets_contains_list": _est_sets(1), "list_sets_intersects_list": _est_sets(1),
    "list_sets_equivalent_list": _est_sets(2),
    **{f"list_{go}_sort": _est_sort(ours, False) for go, ours in _SORTABLE.items()},
    **{f"list_{go}_sortByAssociatedKeys": _est_sort(ours, True)
       for go, ours in _SORTABLE.items()},
}


# --- Kubernetes library.CostEstimator.EstimateCallCost ----------------------------------------

_NOMINAL = frozenset({
    "masked", "prefixLength", "family", "isUnspecified", "isLoopback", "isLinkLocalMulticast",
    "isLinkLocalUnicast", "isGlobalUnicast", "format.named", "sign", "asInteger", "isInteger",
    "asApproximateFloat", "isGreaterThan", "isLessThan", "compareTo", "add", "sub", "major",
    "minor", "patch", "getScheme", "getHostname", "getHost", "getPort", "getEscapedPath",
    "getQuery"})


def _element_node(target: AstNode) -> AstNode | None:
    t = target.type
    if isinstance(t, tuple) and t[0] in ("list", "map", "optional_type") and len(t) > 1:
        path = target.path + ["@items"] if target.path is not None else None
        return AstNode(path, t[1], None, None)
    return None


def _kubernetes_estimate(fn: str, oid: str, target: AstNode | None,
                         args: list[AstNode]) -> tuple[Range, Range | None] | None:
    if fn in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf") and target is not None:
        elem = _element_node(target)
        if elem is not None:
            cost: Range = (1, 1)
            if kind(elem.type) in ("string", "bytes"):
                cost = radd(cost, rfactor(_size(elem), STRING_TRAVERSAL))
            return rmul(_size(target), cost), None
        return rfactor(_size(target), STRING_TRAVERSAL), None
    if fn == "url" and len(args) == 1:
        sz = _size(args[0])
        return rfactor(sz, STRING_TRAVERSAL), sz
    if fn in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
        sz = _size(target)
        return rfactor(sz, STRING_TRAVERSAL), sz
    if fn == "replace" and target is not None and len(args) >= 2:
        return _replace_estimate(_size(target), _size(args[0]), _size(args[1]))
    if fn == "split" and target is not None:
        sz = _size(target)
        top = sz[1]
        if len(args) > 1 and args[1].expr is not None and args[1].expr.kind == "const" and (
                args[1].expr.name == "int"):
            top = args[1].expr.value % 2**64
        return rfactor(sz, 2 * STRING_TRAVERSAL), (0, top)
    if fn == "join" and target is not None:
        list_size = _size(target)
        elem = _element_node(target)
        sz: Range = rmul(list_size, _size(elem)) if elem is not None else (0, 0)
        if args:
            seps = (max(list_size[0] - 1, 0), max(list_size[1] - 1, 0))
            sz = radd(sz, rmul(_size(args[0]), seps))
        return rfactor(sz, STRING_TRAVERSAL), sz
    if fn in ("find", "findAll") and target is not None and args:
        sz = _size(target)
        text = rfactor(radd(sz, (1, 1)), STRING_TRAVERSAL)
        regex = rfactor(_size(args[0]), REGEX_LENGTH)
        return rmul(text, regex), (0, sz[1])
    if fn in ("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver") and args:
        return rfactor(_size(args[0]), STRING_TRAVERSAL), None
    if fn == "ip":
        if oid == "cidr_ip":
            return (1, 1), None
        if args:
            return rfactor(_size(args[0]), STRING_TRAVERSAL), None
    if fn == "ip.isCanonical" and args:
        return rfactor(_size(args[0]), 2 * STRING_TRAVERSAL), None
    if fn in _NOMINAL:
        return (1, 1), None
    if fn in ("containsIP", "containsCIDR") and args:
        ip_size = (4, 16)
        cost = rfactor(radd(ip_size, ip_size), STRING_TRAVERSAL)
        if fn == "containsCIDR":
            cost = radd(radd(cost, rfactor(ip_size, STRING_TRAVERSAL)), (1, 1))
        if oid in ("cidr_contains_ip_string", "cidr_contains_cidr_string"):
            cost = radd(cost, rfactor(_size(args[0]), STRING_TRAVERSAL))
        return cost, None
    if fn == "validate" and args:
        per_byte = rfactor(_size(args[0]), STRING_TRAVERSAL)
        return rfactor(per_byte, NAME_FORMAT_REGEX_SIZE * REGEX_LENGTH), None
    if fn == "_==_" and len(args) == 2 and args[0].type == args[1].type:
        t = args[0].type
        if t in ("IP", "CIDR", "Quantity", "Semver"):
            return (1, 1), None
        if t == "Format":
            return rfactor((1, MAX_FORMAT_SIZE), STRING_TRAVERSAL), None
        if t == "URL":
            size: Range = (1, 1)
            if args[1].size is not None:  # sic: Kubernetes reads the right side twice
                size = args[1].size
            return rfactor((1, size[1]), STRING_TRAVERSAL), None
    return None


def _replace_estimate(sz: Range, old: Range, new: Range) -> tuple[Range, Range]:
    """Kubernetes' bound of ``s.replace(old, new)``'s length."""
    count_max = retained_max = count_min = retained_min = 0
    if old[0] == 0:
        count_max = sz[1] + 1 if sz[1] < MAXU else sz[1]
        retained_max = sz[1]
    elif new[1] <= old[0]:
        retained_max = sz[1]
    else:
        count_max = math.ceil(float(sz[1]) / float(old[0]))
    if old[1] == 0:
        count_min = sz[0] + 1 if sz[0] < MAXU else sz[0]
        retained_min = sz[0]
    elif old[1] <= new[0]:
        retained_min = sz[0]
    else:
        count_min = math.ceil(float(sz[0]) / float(old[1]))
    size = radd(rmul((min(count_min, MAXU), min(count_max, MAXU)), new),
                (retained_min, retained_max))
    return rfactor(sz, 2 * STRING_TRAVERSAL), size


# --- run-time charges ------------------------------------------------------------------

def actual_size(v: Any) -> int:
    """cel-go ``actualSize``: a Sizer's size (strings in code points, bytes, lists, maps,
    Kubernetes' IP and CIDR in address bytes), an optional's value's; 1 for anything
    else."""
    if isinstance(v, Optional) and v.has_value:
        return actual_size(v.value)
    return _sizer(v)


def _sizer(v: Any) -> int:
    """Kubernetes' / the extensions' ``actualSize``: a Sizer's size, else 1."""
    if isinstance(v, str | bytes | list | dict):
        return len(v)
    size = getattr(v, "cel_size", None)
    return size() if size is not None else 1


class GoPanic(Exception):  # noqa: N818 - what it models
    """A cost tracker's type assertion failed (cel-go panics; the evaluation fails as a
    whole, whatever would have absorbed an error)."""


def _lister(v: Any) -> list:
    if not isinstance(v, list):
        raise GoPanic(f"internal error: interface conversion: {kind_name(v)} is not "
                      "traits.Lister: missing method Add")
    return v


def kind_name(v: Any) -> str:
    return "*types.Err" if isinstance(v, CelError) else type(v).__name__


def ceil_factor(n: int, factor: float) -> int:
    return math.ceil(float(n) * factor)


def traversal_cost(v: Any) -> int:
    """Kubernetes ``traversalCost`` (bytes, truncated)."""
    if isinstance(v, str):
        return int(float(len(v.encode("utf-8", "surrogatepass"))) * STRING_TRAVERSAL)
    if isinstance(v, bytes):
        return int(float(len(v)) * STRING_TRAVERSAL)
    if isinstance(v, list):
        return sum(traversal_cost(x) for x in v)
    if isinstance(v, dict):
        return sum(traversal_cost(k) + traversal_cost(x) for k, x in v.items())
    return 1


def _track_list_call(factor: float, size: int) -> int:
    return int(float(size) * factor) + 1 + LIST_CREATE


def _self_compare(items: Any) -> int:
    sz = _sizer(items)
    if sz == 0:
        return _track_list_call(2.0, 0)
    factor = 2.0
    first = items[0] if isinstance(items, list) else None
    if isinstance(first, str | bytes):
        factor += STRING_TRAVERSAL
    return _track_list_call(factor, sz * sz)


def _track_flatten(args: list, result: Any) -> int:
    if len(args) == 2 and type(args[1]) is not int:
        raise GoPanic(f"internal error: interface conversion: ref.Val is {kind_name(args[1])}, "
                      "not types.Int")
    depth = 1.0 if len(args) < 2 else float(args[1])
    value = float(_sizer(args[0])) * depth
    if value < 0:  # Go converts a negative float64 to uint64 by wrapping (amd64)
        return (int(value) + 1 + LIST_CREATE) % 2**64
    return int(value) + 1 + LIST_CREATE


TRACKERS: dict[str, Any] = {
    "list_slice": lambda a, r: _track_list_call(1, _sizer(r)),
    "lists_range": lambda a, r: _track_list_call(1, _sizer(r)),
    "list_reverse": lambda a, r: _track_list_call(1, _sizer(r)),
    "list_flatten": _track_flatten, "list_flatten_int": _track_flatten,
    "list_distinct": lambda a, r: _self_compare(_lister(a[0])),
    "list_sets_contains_list": lambda a, r: 1 + int(float(_sizer(a[0]) * _sizer(a[1]))),
    "list_sets_intersects_list": lambda a, r: 1 + int(float(_sizer(a[0]) * _sizer(a[1]))),
    "list_sets_equivalent_list": lambda a, r: 1 + int(float(_sizer(a[0]) * _sizer(a[1])) * 2),
    **{f"list_{go}_sort": (lambda a, r: _self_compare(_lister(a[0]))) for go in _SORTABLE},
    **{f"list_{go}_sortByAssociatedKeys": (lambda a, r: _self_compare(_lister(a[1])))
       for go in _SORTABLE},
}

#: Trackers above that read only the arguments, for calls whose work is quadratic: the
#: evaluator charges these before running the call (``extender.cel.calls._invoker``).
ARGUMENT_COSTED = frozenset({"list_distinct", "list_sets_contains_list",
                             "list_sets_intersects_list", "list_sets_equivalent_list",
                             *(f"list_{go}_sort" for go in _SORTABLE),
                             *(f"list_{go}_sortByAssociatedKeys" for go in _SORTABLE)})

_K8S_STRING_SCAN = frozenset({"url", "lowerAscii", "upperAscii", "substring", "trim", "cidr",
                              "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver"})
_K8S_TYPES_EQUAL = frozenset({"Quantity", "IP", "CIDR", "Format", "URL", "Semver"})
_DEFAULT_SCAN = frozenset({"starts_with_string", "ends_with_string", "string_to_bytes",
                           "bytes_to_string", "strings_quote", "string_format"})


def kubernetes_call_cost(fn: str, oid: str, args: list, result: Any) -> int | None:
    """Kubernetes ``library.CostEstimator.CallCost`` (None: no rule)."""
    if fn in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf"):
        return traversal_cost(args[0]) if args else 0
    if fn in _K8S_STRING_SCAN:
        return ceil_factor(_sizer(args[0]), STRING_TRAVERSAL) if args else None
    if fn in ("replace", "split"):
        return ceil_factor(_sizer(args[0]) * 2, STRING_TRAVERSAL) if args else None
    if fn == "join":
        return ceil_factor(_sizer(result) * 2, STRING_TRAVERSAL) if args else None
    if fn in ("find", "findAll"):
        if len(args) >= 2:
            return (math.ceil((1.0 + float(_sizer(args[0]))) * STRING_TRAVERSAL)
                    * ceil_factor(_sizer(args[1]), REGEX_LENGTH))
        return None
    if fn == "ip":
        if not args:
            return None
        return 1 if oid == "cidr_ip" else ceil_factor(_sizer(args[0]), STRING_TRAVERSAL)
    if fn == "ip.isCanonical":
        return ceil_factor(_sizer(args[0]) * 2, STRING_TRAVERSAL) if args else None
    if fn in _NOMINAL:
        return 1
    if fn in ("containsIP", "containsCIDR") and len(args) >= 2:
        cidr = _sizer(args[0])
        cost = ceil_factor(cidr + cidr, STRING_TRAVERSAL)
        if fn == "containsCIDR":
            cost += ceil_factor(cidr, STRING_TRAVERSAL) + 1
        if oid in ("cidr_contains_ip_string", "cidr_contains_cidr_string"):
            cost += ceil_factor(_sizer(args[1]), STRING_TRAVERSAL)
        return cost
    if fn == "validate" and len(args) >= 2 and isinstance(args[0], Format):
        text = math.ceil((1.0 + float(_sizer(args[1]))) * STRING_TRAVERSAL)
        return text * ceil_factor(args[0].max_regex_size, REGEX_LENGTH)
    if fn == "_==_" and len(args) == 2:
        if getattr(args[0], "cel_type", None) in _K8S_TYPES_EQUAL:
            return 1
    return None


def call_cost(fn: str, oid: str, args: list, result: Any) -> int:
    """The run-time charge of one call (cel-go ``CostTracker.costCall``)."""
    tracker = TRACKERS.get(oid)
    if tracker is not None:
        return tracker(args, result)
    found = kubernetes_call_cost(fn, oid, args, result)
    if found is not None:
        return found
    return default_call_cost(oid, args)


def default_call_cost(oid: str, args: list) -> int:
    if oid in _DEFAULT_SCAN:
        return ceil_factor(actual_size(args[0]), STRING_TRAVERSAL)
    if oid == "in_list":
        return actual_size(args[1])
    if oid in _TEXT_COMPARISONS:
        a, b = actual_size(args[0]), actual_size(args[1])
        return ceil_factor(a if a < b else b, STRING_TRAVERSAL)
    if oid in ("add_string", "add_bytes"):
        return ceil_factor(actual_size(args[0]) + actual_size(args[1]), STRING_TRAVERSAL)
    if oid == "matches_string":
        return (math.ceil((1.0 + float(actual_size(args[0]))) * STRING_TRAVERSAL)
                * ceil_factor(actual_size(args[1]), REGEX_LENGTH))
    if oid == "contains_string":
        return (ceil_factor(actual_size(args[0]), STRING_TRAVERSAL)
                * ceil_factor(actual_size(args[1]), STRING_TRAVERSAL))
    return 1


_K8S_NAMES = frozenset({"isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "replace",
                        "split", "join", "find", "findAll", "ip", "ip.isCanonical",
                        "containsIP", "containsCIDR", "validate", "_==_"}) | _K8S_STRING_SCAN
_DEFAULT_SIZED = (_DEFAULT_SCAN | _TEXT_COMPARISONS
                  | {"in_list", "add_string", "add_bytes", "matches_string", "contains_string"})


def cost_rule(fn: str, oid: str) -> int | None:
    """The constant charge of a call site when its cost does not depend on the values
    (None: call ``call_cost``), decided once when the program is planned."""
    if oid in TRACKERS:
        return None
    if fn in _NOMINAL:
        return 1
    if fn in _K8S_NAMES:
        return None
    return None if oid in _DEFAULT_SIZED else 1
