"""The cost model: cel-go/Kubernetes unit costs, used twice.

* ``estimate(root)`` — the admission-time worst case over the checked IR, with the taint
  fields at their declared maximum sizes (key 317, value 63, effect 16).
* ``call_cost(name, args)`` — the runtime charge for one call with actual values.

Both use the same per-function rules (``_RULES``), applied to maximum sizes at compile time
and to actual sizes at runtime, so the estimate is an upper bound of the runtime charge.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from extender.cel.ast import Node
from extender.cel.decls import DYN
from extender.cel.lib.format import FORMATS, MAX_REGEX_SIZE, Format
from extender.cel.limits import (
    ITERATION_COST,
    LIST_CREATE_COST,
    MAP_CREATE_COST,
    RANGE_ELEMENT_COST,
    REGEX_LENGTH_FACTOR,
    STRING_TRAVERSAL_FACTOR,
    TAINT_EFFECT_MAX,
    TAINT_KEY_MAX,
    TAINT_VALUE_MAX,
    UNBOUNDED,
)
from extender.cel.values import kind, size_of

TAINT_FIELDS = {"key": TAINT_KEY_MAX, "value": TAINT_VALUE_MAX, "effect": TAINT_EFFECT_MAX}
_SIZED = frozenset({"string", "bytes", "list", "map"})


def _f(n: float, factor: float) -> int:
    return min(UNBOUNDED, math.ceil(n * factor))


def _text(k: str) -> bool:
    return k in ("string", "bytes")


def _replace_result(s: list[int]) -> int:
    """Upper bound of ``s0.replace(old, new)``'s length."""
    return min(UNBOUNDED, s[0] + (s[0] // max(1, s[1]) + 1) * s[2])


# rule(kinds, sizes, values) -> cost of the call itself (arguments are charged separately)
Rule = Callable[[list[str], list[int], list[Any]], int]
_RULES: dict[str, Rule] = {
    "_==_": lambda k, s, v: 1 + (_f(min(s), STRING_TRAVERSAL_FACTOR) if k[0] in _SIZED else 0),
    "_!=_": lambda k, s, v: 1 + (_f(min(s), STRING_TRAVERSAL_FACTOR) if k[0] in _SIZED else 0),
    "_+_": lambda k, s, v: max(1, _f(s[0] + s[1], STRING_TRAVERSAL_FACTOR))
    if k[0] in _SIZED else 1,
    "@in": lambda k, s, v: max(1, s[1]) if k[1] == "list" else 1,
    "contains": lambda k, s, v: max(1, _f(s[0], STRING_TRAVERSAL_FACTOR)
                                    * _f(s[1], STRING_TRAVERSAL_FACTOR)),
    "startsWith": lambda k, s, v: max(1, _f(s[1], STRING_TRAVERSAL_FACTOR)),
    "endsWith": lambda k, s, v: max(1, _f(s[1], STRING_TRAVERSAL_FACTOR)),
    "replace": lambda k, s, v: max(1, _f(s[0] + _replace_result(s), STRING_TRAVERSAL_FACTOR)),
    "split": lambda k, s, v: max(1, _f(s[0], 2 * STRING_TRAVERSAL_FACTOR)),
    "join": lambda k, s, v: max(1, _f(sum(size_of(x) for x in v[0]) + len(v[0]) *
                                      (s[1] if len(s) > 1 else 0), 2 * STRING_TRAVERSAL_FACTOR))
    if v[0] is not None else UNBOUNDED,
    "strings.quote": lambda k, s, v: 1 + _f(s[0], STRING_TRAVERSAL_FACTOR),
    "sets.contains": lambda k, s, v: max(1, s[0] * s[1]),
    "sets.equivalent": lambda k, s, v: max(1, 2 * s[0] * s[1]),
    "sets.intersects": lambda k, s, v: max(1, s[0] * s[1]),
    "distinct": lambda k, s, v: max(1, s[0] * s[0]),
    "sort": lambda k, s, v: max(1, s[0] * max(1, math.ceil(math.log2(s[0] + 1)))),
    "lists.range": lambda k, s, v: (max(1, RANGE_ELEMENT_COST * int(v[0]))
                                    if v[0] is not None else UNBOUNDED),
}
for _name in ("matches", "find", "findAll"):
    _RULES[_name] = lambda k, s, v: max(1, _f(s[0] + 1, STRING_TRAVERSAL_FACTOR)
                                        * _f(s[1], REGEX_LENGTH_FACTOR))
for _name in ("_<_", "_<=_", "_>_", "_>=_"):
    _RULES[_name] = lambda k, s, v: 1 + (_f(min(s), STRING_TRAVERSAL_FACTOR)
                                         if _text(k[0]) else 0)
#: calls charged 0.1 per byte of their first argument when it is text, else 1
TEXT_SCALED = frozenset({"lowerAscii", "upperAscii", "trim", "substring", "semver", "isSemver",
                         "quantity", "isQuantity", "int", "uint", "double", "bool", "bytes",
                         "string", "duration", "timestamp", "ip", "isIP", "cidr", "isCIDR",
                         "url"})
for _name in TEXT_SCALED:
    _RULES[_name] = lambda k, s, v: max(1, _f(s[0], STRING_TRAVERSAL_FACTOR)) if _text(k[0]) \
        else 1
_RULES["ip.isCanonical"] = lambda k, s, v: max(1, _f(s[0], 2 * STRING_TRAVERSAL_FACTOR))


def _net_compare(k: list[str], s: list[int], v: list[Any], extra: int) -> int:
    """K8s ``containsIP``/``containsCIDR``: compare the address bytes (4 or 16; the
    estimate assumes 16, the runtime uses Go's actualSize of an opaque value, 1), plus
    ``extra`` for the CIDR masking, plus parsing a string argument."""
    estimating = v[0] is None  # the receiver is never a constant, only known at runtime
    size = 16 if estimating else 1
    cost = _f(2 * size, STRING_TRAVERSAL_FACTOR)
    if extra:
        cost += _f(size, STRING_TRAVERSAL_FACTOR) + extra
    if _text(k[1]):
        cost += _f(s[1], STRING_TRAVERSAL_FACTOR)
    return cost


def _validate(k: list[str], s: list[int], v: list[Any]) -> int:
    """K8s ``<Format>.validate(s)``: like ``find`` with the format's ``MaxRegexSize`` as the
    pattern length.  Runtime is Kubernetes' CallCost; the estimate uses the receiver's
    format when it is a constant ``format.x()`` call, else the largest format, and never
    less than Kubernetes' ``MaxNameFormatRegexSize`` (128) — so it bounds the runtime charge
    (Kubernetes' own estimate always uses 128, below ``uri``'s runtime 1080)."""
    fmt = v[0]
    if isinstance(fmt, Format):
        regex = fmt.max_regex_size if not isinstance(v[1], _Estimating) else max(
            _NAME_FORMAT_REGEX_SIZE, fmt.max_regex_size)
    else:
        regex = max(_NAME_FORMAT_REGEX_SIZE, MAX_REGEX_SIZE)
    return max(1, _f(s[1] + 1, STRING_TRAVERSAL_FACTOR) * _f(regex, REGEX_LENGTH_FACTOR))


class _Estimating:
    """Marker for a non-constant argument value while estimating."""


_NAME_FORMAT_REGEX_SIZE = 128
_RULES["validate"] = _validate
_RULES["containsIP"] = lambda k, s, v: _net_compare(k, s, v, 0)
_RULES["containsCIDR"] = lambda k, s, v: _net_compare(k, s, v, 1)
for _name in ("indexOf", "lastIndexOf"):
    _RULES[_name] = lambda k, s, v: max(1, s[0]) if k[0] == "list" else max(
        1, _f(s[0], STRING_TRAVERSAL_FACTOR))
for _name in ("reverse", "flatten", "slice", "isSorted", "sum", "min", "max"):
    _RULES[_name] = lambda k, s, v: max(1, s[0])


def call_cost(name: str, args: list[Any]) -> int:
    """Runtime charge for calling ``name`` with actual argument values."""
    rule = _RULES.get(name)
    if rule is None:
        return 1
    return rule([kind(a) for a in args], [size_of(a) for a in args], args)


# --- static estimate -----------------------------------------------------------------

class Size:
    """Upper bound of a value's length/count, with element (and key) bounds."""

    __slots__ = ("n", "elem", "key")

    def __init__(self, n: int, elem: Size | None = None, key: Size | None = None) -> None:
        self.n, self.elem, self.key = min(n, UNBOUNDED), elem, key


_UNKNOWN = Size(UNBOUNDED)
_ONE = Size(1)


def _max(sizes: list[Size]) -> Size:
    if not sizes:
        return Size(0)
    return Size(max(s.n for s in sizes), _merge([s.elem for s in sizes]),
                _merge([s.key for s in sizes]))


def _merge(parts: list[Size | None]) -> Size | None:
    known = [p for p in parts if p is not None]
    return _max(known) if known else None


def _elem(s: Size) -> Size:
    return s.elem if s.elem is not None else _UNKNOWN


def _type_kind(t: Any) -> str:
    if isinstance(t, tuple):
        return t[0]
    return t if t != DYN else "dyn"


def estimate(root: Node) -> int:
    """Worst-case cost of the (checked) expression."""
    return _Estimator().visit(root, {})[0]


class _Estimator:
    def visit(self, n: Node, scope: dict[str, Size]) -> tuple[int, Size]:
        cost, size = getattr(self, "_" + n.kind)(n, scope)
        return min(cost, UNBOUNDED), size

    def _const(self, n: Node, scope: dict) -> tuple[int, Size]:
        return 0, Size(len(n.value)) if isinstance(n.value, str | bytes) else _ONE

    def _ident(self, n: Node, scope: dict) -> tuple[int, Size]:
        if n.value != "root" and n.name in scope:
            return 1, scope[n.name]
        if n.name == "taint":
            return 1, Size(3, Size(max(TAINT_FIELDS.values())), Size(6))
        return 1, _ONE

    def _is_taint(self, n: Node, scope: dict) -> bool:
        return n.kind == "ident" and n.name == "taint" and (n.value == "root" or
                                                            "taint" not in scope)

    def _select(self, n: Node, scope: dict) -> tuple[int, Size]:
        cost, size = self.visit(n.target, scope)
        if self._is_taint(n.target, scope) and n.name in TAINT_FIELDS:
            return cost + 1, Size(TAINT_FIELDS[n.name])
        return cost + 1, _elem(size)

    def _has(self, n: Node, scope: dict) -> tuple[int, Size]:
        return self.visit(n.target, scope)[0] + 1, _ONE

    def _list(self, n: Node, scope: dict) -> tuple[int, Size]:
        parts = [self.visit(a, scope) for a in n.args]
        return LIST_CREATE_COST + sum(c for c, _ in parts), Size(len(parts),
                                                                 _max([s for _, s in parts]))

    def _map(self, n: Node, scope: dict) -> tuple[int, Size]:
        parts = [self.visit(a, scope) for a in n.args]
        keys, values = parts[0::2], parts[1::2]
        return MAP_CREATE_COST + sum(c for c, _ in parts), Size(
            len(keys), _max([s for _, s in values]), _max([s for _, s in keys]))

    def _call(self, n: Node, scope: dict) -> tuple[int, Size]:
        nodes = ([n.target] if n.target is not None else []) + n.args
        parts = [self.visit(a, scope) for a in nodes]
        arg_cost = sum(c for c, _ in parts)
        sizes = [s for _, s in parts]
        if n.name in ("_&&_", "_||_"):
            return arg_cost, _ONE
        if n.name == "_?_:_":
            return parts[0][0] + max(parts[1][0], parts[2][0]), _max(sizes[1:])
        if n.name == "_[_]":
            if self._is_taint(nodes[0], scope) and nodes[1].kind == "const" and (
                nodes[1].value in TAINT_FIELDS
            ):
                return arg_cost + 1, Size(TAINT_FIELDS[nodes[1].value])
            return arg_cost + 1, _elem(sizes[0])
        if n.name == "__opt_field__" and self._is_taint(nodes[0], scope) and (
            nodes[1].value in TAINT_FIELDS
        ):  # taint.?key: the field's declared size
            return arg_cost + 1, Size(TAINT_FIELDS[nodes[1].value])
        if n.name in ("__opt_field__", "__opt_index__"):
            return arg_cost + 1, _elem(sizes[0])
        if n.name == "__opt_elem__":
            return arg_cost + 1, sizes[0]
        kinds = [_type_kind(a.type) for a in nodes]
        values = [a.value if a.kind == "const" else None for a in nodes]
        if n.name == "validate" and len(nodes) == 2:
            recv = nodes[0]
            fmt = recv.name[len("format."):] if recv.kind == "call" else ""
            values = [FORMATS.get(fmt), _Estimating()]
        if n.name == "join" and n.target is not None and sizes:
            list_size = sizes[0]
            total = list_size.n * _elem(list_size).n
            sep = sizes[1].n if len(sizes) > 1 else 0
            own = max(1, _f(total + list_size.n * sep, 2 * STRING_TRAVERSAL_FACTOR))
            return arg_cost + own, Size(total + list_size.n * sep)
        rule = _RULES.get(n.name)
        own = _dyn_max(n.name, rule, kinds, [s.n for s in sizes], values) if rule else 1
        return arg_cost + own, _result_size(n.name, kinds, sizes, values, n.type)

    def _comp(self, n: Node, scope: dict) -> tuple[int, Size]:
        range_cost, rng = self.visit(n.target, scope)
        if n.name in ("optMap", "optFlatMap"):  # at most one evaluation, on the value
            body_cost, body = self.visit(n.args[0], {**scope, n.vars[0]: rng})
            return range_cost + ITERATION_COST + body_cost, body
        kind_ = _type_kind(n.target.type)
        inner = dict(scope)
        if kind_ == "map":
            first, second = (rng.key or _UNKNOWN), _elem(rng)
        elif len(n.vars) == 2:
            first, second = Size(1), _elem(rng)
        else:
            first, second = _elem(rng), None
        inner[n.vars[0]] = first
        if len(n.vars) == 2:
            inner[n.vars[1]] = second or _UNKNOWN
        parts = [self.visit(a, inner) for a in n.args]
        step = ITERATION_COST + sum(c for c, _ in parts)
        count = rng.n
        total = range_cost + min(UNBOUNDED, count * step)
        if n.name == "sortBy":
            total += max(1, count * max(1, math.ceil(math.log2(count + 1))))
        result_elem = parts[-1][1] if n.name in ("map", "transformList",
                                                 "transformMap") else first
        if n.name in ("all", "exists", "exists_one", "existsOne"):
            return total, _ONE
        if n.name == "sortBy":
            return total, rng
        if n.name == "transformMapEntry":
            return total, Size(count * max(1, parts[-1][1].n), parts[-1][1].elem,
                               parts[-1][1].key)
        return total, Size(count, result_elem, first if n.name == "transformMap" else None)


#: operators whose overloads take two operands of one kind (or two numbers)
_HOMOGENEOUS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_"})


def _dyn_max(name: str, rule: Rule, kinds: list[str], sizes: list[int],
             values: list[Any]) -> int:
    """A call's estimated cost; an argument typed ``dyn`` may be any overload's type, so
    the dearest overload the call can resolve to is taken (cel-go's estimator takes the
    maximum over them): the other operand's kind for the homogeneous operators, else a
    sized kind (string or list) rather than none."""
    if name in _HOMOGENEOUS and len(kinds) == 2 and kinds.count("dyn") == 1:
        known = kinds[1] if kinds[0] == "dyn" else kinds[0]
        return rule([known, known], sizes, values)
    dyn = [i for i, k in enumerate(kinds) if k == "dyn"]
    if not dyn:
        return rule(kinds, sizes, values)
    best = 0
    for choice in itertools.product(("string", "list"), repeat=len(dyn)):
        trial = list(kinds)
        for i, k in zip(dyn, choice, strict=True):
            trial[i] = k
        try:
            best = max(best, rule(trial, sizes, values))
        except (TypeError, AttributeError, ValueError):  # a kind this rule cannot take
            continue
    return best or 1


#: at most three messages (qualifiedName: prefix length + regex, name regex), each under
#: 400 characters.
_VALIDATE_RESULT = Size(3, Size(400))


def _result_size(name: str, kinds: list[str], sizes: list[Size], values: list[Any],
                 result_type: Any) -> Size:
    s = [x.n for x in sizes]
    if name in ("lowerAscii", "upperAscii", "trim", "substring", "find", "reverse", "sort",
                "distinct", "slice", "string") and sizes and (kinds[0] in _SIZED
                                                               or kinds[0] == "dyn"):
        # Kubernetes sizes these results by the receiver's size estimate whatever its
        # static type: dyn(x).lowerAscii() is as long as x, not unbounded
        return sizes[0]
    if name == "string":
        return Size(32)
    if name == "charAt":
        return _ONE
    if name == "dyn":  # a conversion to dyn keeps its argument's size (cel-go)
        return sizes[0]
    if name == "strings.quote":
        return Size(2 * s[0] + 2)
    if name == "bytes":
        return Size(4 * s[0])
    if name == "replace":
        return Size(_replace_result(s))
    if name in ("split", "findAll"):
        return Size(s[0] + 1, sizes[0])
    if name == "_+_" and (kinds[0] in _SIZED or kinds[:2] == ["dyn", "dyn"]
                          or (kinds[0] == "dyn" and kinds[1] in _SIZED)):
        return Size(s[0] + s[1], _merge([sizes[0].elem, sizes[1].elem]))
    if name == "flatten":
        inner = _elem(sizes[0])
        return Size(s[0] * max(1, inner.n), _UNKNOWN)
    if name == "lists.range":
        return Size(int(values[0]) if values[0] is not None else UNBOUNDED, _ONE)
    if name in ("min", "max", "first", "last"):
        return _elem(sizes[0])
    if name in ("optional.of", "optional.ofNonZeroValue", "value"):
        return sizes[0]  # an optional's size bound is its value's
    if name in ("or", "orValue"):
        return _max(sizes[:2])
    if name in ("optional.unwrap", "unwrapOpt"):
        return Size(s[0], _elem(sizes[0]))
    if name == "optional.none":
        return Size(0)
    if name == "validate":
        return _VALIDATE_RESULT
    if _type_kind(result_type) in _SIZED or result_type == DYN:
        return _UNKNOWN
    return _ONE
