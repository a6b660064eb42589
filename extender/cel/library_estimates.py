"""The estimates of library calls (cel-go ``EstimateCallCost``): cel-go's lists and sets
extensions by overload id, then Kubernetes' ``library.CostEstimator`` by function name,
each a table of estimators.  An estimator sees its arguments as cel-go's ``AstNode``s and
answers (cost, result size), or None when its rule does not apply (the checker then
prices the call with cel-go's defaults, ``extender.cel.estimator``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.cel.ast import Node
from extender.cel.cost import (
    LIST_CREATE,
    MAX_FORMAT_SIZE,
    MAXU,
    NAME_FORMAT_REGEX_SIZE,
    NOMINAL,
    REGEX_LENGTH,
    SORTABLE,
    STRING_TRAVERSAL,
    UNKNOWN,
    Range,
    fixed,
    radd,
    rfactor,
    rmul,
    taint_size,
)
from extender.cel.types import kind

Estimate = tuple[Range, Range | None]  # (cost, result size)


@dataclass(slots=True)
class AstNode:
    """cel-go ``checker.AstNode``: what a function estimator sees of an argument."""

    path: list[str] | None
    type: Any
    expr: Node | None
    size: Range | None  # ComputedSize


def arg_size(n: AstNode) -> Range:
    """The size of an estimator argument: computed, else declared, else unknown."""
    if n.size is not None:
        return n.size
    declared = taint_size(n.path)
    return declared if declared is not None else UNKNOWN


def library_estimate(fn: str, oid: str, target: AstNode | None,
                     args: list[AstNode]) -> Estimate | None:
    """The extensions' estimator of the overload, else Kubernetes' of the function."""
    extension = EXTENSION_ESTIMATORS.get(oid)
    if extension is not None:
        found = extension(target, args)
        if found is not None:
            return found
    kubernetes = KUBERNETES_ESTIMATORS.get(fn)
    return kubernetes(fn, oid, target, args) if kubernetes is not None else None


def _int_literal(n: AstNode, default: int) -> int:
    """cel-go lists ``nodeAsIntValue``: a literal int argument (negative as 0)."""
    e = n.expr
    if e is None or e.kind != "const" or e.name != "int":
        return default
    return max(0, e.value)


# --- cel-go lists v3 and sets estimators ----------------------------------------------------

def _list_call(factor: float, size: Range, allocates: bool = True) -> Estimate:
    cost = radd(rfactor(size, factor), (1, 1))
    if allocates:
        cost = radd(cost, fixed(LIST_CREATE))
    return cost, size


def _est_slice(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or len(args) != 2:
        return None
    sz = arg_size(target)
    start, end = _int_literal(args[0], 0), _int_literal(args[1], sz[1])
    return _list_call(1, fixed((end - start) % 2**64))


def _est_range(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is not None or len(args) != 1:
        return None
    return _list_call(1, fixed(_int_literal(args[0], MAXU)))


def _est_reverse(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or args:
        return None
    return _list_call(1, arg_size(target))


def _est_flatten(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or len(args) > 1:
        return None
    depth = _int_literal(args[0], MAXU) if args else 1
    return _list_call(float(depth), arg_size(target))


def _est_distinct(target: AstNode | None, args: list[AstNode]) -> Any:
    if target is None or args:
        return None
    sz = arg_size(target)
    return _list_call(2.0, rmul(sz, sz))


def _est_sort(element: str, by_keys: bool) -> Any:
    factor = 2.0 + STRING_TRAVERSAL if element in ("string", "bytes") else 2.0

    def estimator(target: AstNode | None, args: list[AstNode]) -> Any:
        if target is None or len(args) != (1 if by_keys else 0):
            return None
        sz = arg_size(args[0] if by_keys else target)
        return _list_call(factor, rmul(sz, sz))

    return estimator


def _est_sets(factor: float) -> Any:
    def estimator(target: AstNode | None, args: list[AstNode]) -> Any:
        if len(args) != 2:
            return None
        return radd(rfactor(rmul(arg_size(args[0]), arg_size(args[1])), factor), (1, 1)), None

    return estimator


#: overload id -> estimator(target, args)
EXTENSION_ESTIMATORS: dict[str, Callable[[AstNode | None, list[AstNode]], Any]] = {
    "list_slice": _est_slice, "list_flatten": _est_flatten, "list_flatten_int": _est_flatten,
    "lists_range": _est_range, "list_reverse": _est_reverse, "list_distinct": _est_distinct,
    "list_sets_contains_list": _est_sets(1), "list_sets_intersects_list": _est_sets(1),
    "list_sets_equivalent_list": _est_sets(2),
    **{f"list_{go}_sort": _est_sort(ours, False) for go, ours in SORTABLE.items()},
    **{f"list_{go}_sortByAssociatedKeys": _est_sort(ours, True)
       for go, ours in SORTABLE.items()},
}


# --- Kubernetes library.CostEstimator.EstimateCallCost ----------------------------------------

Target = AstNode | None


def _element_node(target: AstNode) -> AstNode | None:
    t = target.type
    if isinstance(t, tuple) and t[0] in ("list", "map", "optional_type") and len(t) > 1:
        path = target.path + ["@items"] if target.path is not None else None
        return AstNode(path, t[1], None, None)
    return None


def _traversal(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    """``isSorted``, ``sum``, ``max``, ``min``, ``indexOf``, ``lastIndexOf``."""
    if target is None:
        return None
    elem = _element_node(target)
    if elem is not None:
        cost: Range = (1, 1)
        if kind(elem.type) in ("string", "bytes"):
            cost = radd(cost, rfactor(arg_size(elem), STRING_TRAVERSAL))
        return rmul(arg_size(target), cost), None
    return rfactor(arg_size(target), STRING_TRAVERSAL), None


def _url(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    if len(args) != 1:
        return None
    sz = arg_size(args[0])
    return rfactor(sz, STRING_TRAVERSAL), sz


def _string_scan(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    """``lowerAscii``, ``upperAscii``, ``substring``, ``trim``: a result as long."""
    if target is None:
        return None
    sz = arg_size(target)
    return rfactor(sz, STRING_TRAVERSAL), sz


def _replace(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    if target is None or len(args) < 2:
        return None
    return _replace_estimate(arg_size(target), arg_size(args[0]), arg_size(args[1]))


def _split(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    if target is None:
        return None
    sz = arg_size(target)
    top = sz[1]
    if len(args) > 1 and args[1].expr is not None and args[1].expr.kind == "const" and (
            args[1].expr.name == "int"):
        top = args[1].expr.value % 2**64
    return rfactor(sz, 2 * STRING_TRAVERSAL), (0, top)


def _join(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    if target is None:
        return None
    list_size = arg_size(target)
    elem = _element_node(target)
    sz: Range = rmul(list_size, arg_size(elem)) if elem is not None else (0, 0)
    if args:
        seps = (max(list_size[0] - 1, 0), max(list_size[1] - 1, 0))
        sz = radd(sz, rmul(arg_size(args[0]), seps))
    return rfactor(sz, STRING_TRAVERSAL), sz


def _find(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    if target is None or not args:
        return None
    sz = arg_size(target)
    text = rfactor(radd(sz, (1, 1)), STRING_TRAVERSAL)
    regex = rfactor(arg_size(args[0]), REGEX_LENGTH)
    return rmul(text, regex), (0, sz[1])


def _parse(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    """``cidr``, ``isIP``, ``isCIDR``, ``quantity``, ``isQuantity``, ``semver``,
    ``isSemver``: a scan of the text."""
    if not args:
        return None
    return rfactor(arg_size(args[0]), STRING_TRAVERSAL), None


def _ip(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    if oid == "cidr_ip":
        return (1, 1), None
    if args:
        return rfactor(arg_size(args[0]), STRING_TRAVERSAL), None
    return None


def _ip_is_canonical(fn: str, oid: str, target: Target,
                     args: list[AstNode]) -> Estimate | None:
    if not args:
        return None
    return rfactor(arg_size(args[0]), 2 * STRING_TRAVERSAL), None


def _nominal(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    return (1, 1), None


def _contains(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    """``containsIP``, ``containsCIDR``: addresses of 4 to 16 bytes."""
    if not args:
        return None
    ip_size = (4, 16)
    cost = rfactor(radd(ip_size, ip_size), STRING_TRAVERSAL)
    if fn == "containsCIDR":
        cost = radd(radd(cost, rfactor(ip_size, STRING_TRAVERSAL)), (1, 1))
    if oid in ("cidr_contains_ip_string", "cidr_contains_cidr_string"):
        cost = radd(cost, rfactor(arg_size(args[0]), STRING_TRAVERSAL))
    return cost, None


def _validate(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    if not args:
        return None
    per_byte = rfactor(arg_size(args[0]), STRING_TRAVERSAL)
    return rfactor(per_byte, NAME_FORMAT_REGEX_SIZE * REGEX_LENGTH), None


def _equals(fn: str, oid: str, target: Target, args: list[AstNode]) -> Estimate | None:
    """``==`` on two values of one of Kubernetes' types."""
    if len(args) != 2 or args[0].type != args[1].type:
        return None
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


def _replace_estimate(sz: Range, old: Range, new: Range) -> Estimate:
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


KubernetesEstimator = Callable[[str, str, Target, list[AstNode]], Estimate | None]

#: function name -> estimator(function, overload id, target, args)
KUBERNETES_ESTIMATORS: dict[str, KubernetesEstimator] = {
    **dict.fromkeys(("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf"), _traversal),
    "url": _url,
    **dict.fromkeys(("lowerAscii", "upperAscii", "substring", "trim"), _string_scan),
    "replace": _replace, "split": _split, "join": _join,
    "find": _find, "findAll": _find,
    **dict.fromkeys(("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver",
                     "isSemver"), _parse),
    "ip": _ip, "ip.isCanonical": _ip_is_canonical,
    **dict.fromkeys(NOMINAL, _nominal),
    "containsIP": _contains, "containsCIDR": _contains,
    "validate": _validate,
    "_==_": _equals,
}
