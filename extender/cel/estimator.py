"""The admission-time cost estimate: cel-go's ``checker.Cost`` (``checker/cost.go``) over
the checked, macro-expanded tree, as a (min, max) range in cel-go's units
(``extender.cel.cost``).

The walk follows cel-go's: each node's cost, with the sizes and paths of what it
computes (a path such as ``taint.key`` or ``x.@items`` is what the size estimators
recognise); a comprehension costs its range, its initial value and its result plus, per
element of the range's size, its loop condition and step.  A call is priced by the
library's estimator when one applies (``extender.cel.library_estimates``), else by
cel-go's default for its overload (``DEFAULT_ESTIMATES``, a table by overload id), else
1; plus its arguments.  ``PresenceTestHasCost`` is false (``has()`` adds nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from extender.cel.ast import ACCU, LEGACY_ACCU, Node, is_bind
from extender.cel.cost import (
    LIST_CREATE,
    MAP_CREATE,
    MAXU,
    REGEX_LENGTH,
    STRING_TRAVERSAL,
    TEXT_COMPARISONS,
    UNKNOWN,
    Range,
    add,
    fixed,
    radd,
    rfactor,
    rmul,
    sum_ranges,
    taint_size,
    union,
)
from extender.cel.library_estimates import AstNode, Estimate, arg_size, library_estimate
from extender.cel.types import is_scalar, kind


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


def estimate(root: Node) -> Range:
    """The (min, max) cost estimate of the checked expression."""
    return _Coster().cost(root)


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
        s = taint_size(self.path(e))
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
                      arg_costs: list[Range]) -> Estimate:
        """cel-go ``functionCost``: (cost including the arguments', result size)."""
        arg_sum = sum_ranges(arg_costs)
        found = library_estimate(e.name, oid, target, args)
        if found is None:
            default = DEFAULT_ESTIMATES.get(oid)
            found = default(self, e, oid, target, args, arg_costs) if default else None
        if found is None:
            return radd((1, 1), arg_sum), None
        if oid in _OWN_TOTALS:
            return found
        return radd(found[0], arg_sum), found[1]


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


# --- cel-go's default estimates by overload id (after the library's) -----------------------

Target = AstNode | None


def _format(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
            arg_costs: list[Range]) -> Estimate | None:
    if target is None:
        return None
    return rfactor(arg_size(target), STRING_TRAVERSAL), None


def _convert_text(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
                  arg_costs: list[Range]) -> Estimate | None:
    """``string_to_bytes``, ``bytes_to_string``, ``strings_quote``: a scan, and the
    result's size."""
    if len(args) != 1:
        return None
    sz = arg_size(args[0])
    cost = rfactor(sz, STRING_TRAVERSAL)
    if oid == "string_to_bytes":
        return cost, (sz[0], sz[1] * 4 % 2**64)
    if oid == "bytes_to_string":
        return cost, (sz[0] // 4, sz[1])
    return cost, (add(sz[0], 2), (sz[1] * 2 + 2) % 2**64)


def _affix(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
           arg_costs: list[Range]) -> Estimate | None:
    """``startsWith`` / ``endsWith``: a scan of the argument."""
    if len(args) != 1:
        return None
    return rfactor(arg_size(args[0]), STRING_TRAVERSAL), None


def _in_list(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
             arg_costs: list[Range]) -> Estimate | None:
    if len(args) != 2:
        return None
    return rfactor(arg_size(args[1]), 1), None


def _matches(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
             arg_costs: list[Range]) -> Estimate | None:
    if target is None or len(args) != 1:
        return None
    text = rfactor(radd(arg_size(target), (1, 1)), STRING_TRAVERSAL)
    regex = rfactor(arg_size(args[0]), REGEX_LENGTH)
    return rmul(text, regex), None


def _contains(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
              arg_costs: list[Range]) -> Estimate | None:
    if target is None or len(args) != 1:
        return None
    a = rfactor(arg_size(target), STRING_TRAVERSAL)
    b = rfactor(arg_size(args[0]), STRING_TRAVERSAL)
    return rmul(a, b), None


def _logical(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
             arg_costs: list[Range]) -> Estimate | None:
    """``&&`` / ``||`` (the total: the right side may not run)."""
    lhs, rhs = arg_costs
    return (lhs[0], radd(lhs, rhs)[1]), None


def _conditional(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
                 arg_costs: list[Range]) -> Estimate | None:
    """The ternary (the total: one branch runs)."""
    size = union(arg_size(args[1]), arg_size(args[2]))
    c.set_entry(e, _entry_union(c.entry(e.args[1]), c.entry(e.args[2])))
    cond, yes, no = arg_costs
    return radd(cond, union(yes, no)), size


def _concatenate(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
                 arg_costs: list[Range]) -> Estimate | None:
    """``+`` of strings, bytes or lists: the sizes add up."""
    if len(args) != 2:
        return None
    size = radd(arg_size(args[0]), arg_size(args[1]))
    c.set_entry(e, _entry_union(c.entry(e.args[0]), c.entry(e.args[1])))
    if oid == "add_list":
        return (1, 1), size
    return rfactor(size, STRING_TRAVERSAL), size


def _compare_text(c: _Coster, e: Node, oid: str, target: Target, args: list[AstNode],
                  arg_costs: list[Range]) -> Estimate | None:
    lhs, rhs = arg_size(args[0]), arg_size(args[1])
    smallest = min(lhs[1], rhs[1])
    return rfactor((1 if smallest > 0 else 0, smallest), STRING_TRAVERSAL), None


DefaultEstimate = Callable[[_Coster, Node, str, Target, list[AstNode], list[Range]],
                           Estimate | None]

#: overload id -> cel-go's default estimate (the call alone; None: 1)
DEFAULT_ESTIMATES: dict[str, DefaultEstimate] = {
    "string_format": _format,
    **dict.fromkeys(("string_to_bytes", "bytes_to_string", "strings_quote"), _convert_text),
    "starts_with_string": _affix, "ends_with_string": _affix,
    "in_list": _in_list, "matches_string": _matches, "contains_string": _contains,
    "logical_or": _logical, "logical_and": _logical, "conditional": _conditional,
    **dict.fromkeys(("add_string", "add_bytes", "add_list"), _concatenate),
    **dict.fromkeys(TEXT_COMPARISONS, _compare_text),
}
#: overloads whose estimate is their total, the arguments' included
_OWN_TOTALS = frozenset({"logical_or", "logical_and", "conditional"})
