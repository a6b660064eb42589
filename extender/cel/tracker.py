"""The run-time charge of one call: the interpreter's cost observer (cel-go's
``CostTracker.costCall``, ``interpreter/runtimecost.go``) in cel-go's units
(``extender.cel.cost``).  Three tables, looked up in cel-go's order: the lists and sets
extensions' trackers by overload id (``TRACKERS``), Kubernetes' ``CallCost`` by function
name (``KUBERNETES_COSTS``), cel-go's defaults by overload id (``DEFAULT_COSTS``); a call
none of them prices costs 1.  ``cost_rule`` decides at plan time which call sites cost a
constant, so the evaluator looks nothing up per call for them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from extender.cel.cost import (
    LIST_CREATE,
    NOMINAL,
    REGEX_LENGTH,
    SORTABLE,
    STRING_TRAVERSAL,
    TEXT_COMPARISONS,
)
from extender.cel.lib.format import Format
from extender.cel.lib.optional import Optional
from extender.cel.values import CelError


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


# --- cel-go lists v3 and sets trackers, by overload id -----------------------------------

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


#: overload id -> tracker(args, result)
TRACKERS: dict[str, Callable[[list, Any], int]] = {
    "list_slice": lambda a, r: _track_list_call(1, _sizer(r)),
    "lists_range": lambda a, r: _track_list_call(1, _sizer(r)),
    "list_reverse": lambda a, r: _track_list_call(1, _sizer(r)),
    "list_flatten": _track_flatten, "list_flatten_int": _track_flatten,
    "list_distinct": lambda a, r: _self_compare(_lister(a[0])),
    "list_sets_contains_list": lambda a, r: 1 + int(float(_sizer(a[0]) * _sizer(a[1]))),
    "list_sets_intersects_list": lambda a, r: 1 + int(float(_sizer(a[0]) * _sizer(a[1]))),
    "list_sets_equivalent_list": lambda a, r: 1 + int(float(_sizer(a[0]) * _sizer(a[1])) * 2),
    **{f"list_{go}_sort": (lambda a, r: _self_compare(_lister(a[0]))) for go in SORTABLE},
    **{f"list_{go}_sortByAssociatedKeys": (lambda a, r: _self_compare(_lister(a[1])))
       for go in SORTABLE},
}

#: Trackers above that read only the arguments, for calls whose work is quadratic: the
#: evaluator charges these before running the call (``extender.cel.calls._invoker``).
ARGUMENT_COSTED = frozenset({"list_distinct", "list_sets_contains_list",
                             "list_sets_intersects_list", "list_sets_equivalent_list",
                             *(f"list_{go}_sort" for go in SORTABLE),
                             *(f"list_{go}_sortByAssociatedKeys" for go in SORTABLE)})


# --- Kubernetes library.CostEstimator.CallCost, by function name ----------------------------

_K8S_TYPES_EQUAL = frozenset({"Quantity", "IP", "CIDR", "Format", "URL", "Semver"})


def _traversal(fn: str, oid: str, args: list, result: Any) -> int | None:
    """``isSorted``, ``sum``, ``max``, ``min``, ``indexOf``, ``lastIndexOf``."""
    return traversal_cost(args[0]) if args else 0


def _string_scan(fn: str, oid: str, args: list, result: Any) -> int | None:
    """``url``, ``lowerAscii``, ``quantity``, ``semver`` ... : a scan of the text."""
    return ceil_factor(_sizer(args[0]), STRING_TRAVERSAL) if args else None


def _two_scans(fn: str, oid: str, args: list, result: Any) -> int | None:
    """``replace``, ``split``, ``ip.isCanonical``."""
    return ceil_factor(_sizer(args[0]) * 2, STRING_TRAVERSAL) if args else None


def _join(fn: str, oid: str, args: list, result: Any) -> int | None:
    return ceil_factor(_sizer(result) * 2, STRING_TRAVERSAL) if args else None


def _find(fn: str, oid: str, args: list, result: Any) -> int | None:
    if len(args) < 2:
        return None
    return (math.ceil((1.0 + float(_sizer(args[0]))) * STRING_TRAVERSAL)
            * ceil_factor(_sizer(args[1]), REGEX_LENGTH))


def _ip(fn: str, oid: str, args: list, result: Any) -> int | None:
    if not args:
        return None
    return 1 if oid == "cidr_ip" else ceil_factor(_sizer(args[0]), STRING_TRAVERSAL)


def _nominal(fn: str, oid: str, args: list, result: Any) -> int | None:
    return 1


def _contains(fn: str, oid: str, args: list, result: Any) -> int | None:
    """``containsIP``, ``containsCIDR``."""
    if len(args) < 2:
        return None
    cidr = _sizer(args[0])
    cost = ceil_factor(cidr + cidr, STRING_TRAVERSAL)
    if fn == "containsCIDR":
        cost += ceil_factor(cidr, STRING_TRAVERSAL) + 1
    if oid in ("cidr_contains_ip_string", "cidr_contains_cidr_string"):
        cost += ceil_factor(_sizer(args[1]), STRING_TRAVERSAL)
    return cost


def _validate(fn: str, oid: str, args: list, result: Any) -> int | None:
    if len(args) < 2 or not isinstance(args[0], Format):
        return None
    text = math.ceil((1.0 + float(_sizer(args[1]))) * STRING_TRAVERSAL)
    return text * ceil_factor(args[0].max_regex_size, REGEX_LENGTH)


def _equals(fn: str, oid: str, args: list, result: Any) -> int | None:
    """``==`` on one of Kubernetes' types."""
    if len(args) == 2 and getattr(args[0], "cel_type", None) in _K8S_TYPES_EQUAL:
        return 1
    return None


KubernetesCost = Callable[[str, str, list, Any], int | None]

#: function name -> cost(function, overload id, args, result); None: no rule
KUBERNETES_COSTS: dict[str, KubernetesCost] = {
    **dict.fromkeys(("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf"), _traversal),
    **dict.fromkeys(("url", "lowerAscii", "upperAscii", "substring", "trim", "cidr", "isIP",
                     "isCIDR", "quantity", "isQuantity", "semver", "isSemver"), _string_scan),
    "replace": _two_scans, "split": _two_scans, "join": _join,
    "find": _find, "findAll": _find,
    "ip": _ip, "ip.isCanonical": _two_scans,
    **dict.fromkeys(NOMINAL, _nominal),
    "containsIP": _contains, "containsCIDR": _contains,
    "validate": _validate,
    "_==_": _equals,
}


def kubernetes_call_cost(fn: str, oid: str, args: list, result: Any) -> int | None:
    """Kubernetes ``library.CostEstimator.CallCost`` (None: no rule)."""
    rule = KUBERNETES_COSTS.get(fn)
    return rule(fn, oid, args, result) if rule is not None else None


# --- cel-go's defaults, by overload id --------------------------------------------------------

def _scan_first(args: list) -> int:
    return ceil_factor(actual_size(args[0]), STRING_TRAVERSAL)


def _shorter(args: list) -> int:
    a, b = actual_size(args[0]), actual_size(args[1])
    return ceil_factor(a if a < b else b, STRING_TRAVERSAL)


def _both(args: list) -> int:
    return ceil_factor(actual_size(args[0]) + actual_size(args[1]), STRING_TRAVERSAL)


def _matches(args: list) -> int:
    return (math.ceil((1.0 + float(actual_size(args[0]))) * STRING_TRAVERSAL)
            * ceil_factor(actual_size(args[1]), REGEX_LENGTH))


def _contains_string(args: list) -> int:
    return (ceil_factor(actual_size(args[0]), STRING_TRAVERSAL)
            * ceil_factor(actual_size(args[1]), STRING_TRAVERSAL))


#: overload id -> cost(args)
DEFAULT_COSTS: dict[str, Callable[[list], int]] = {
    **dict.fromkeys(("starts_with_string", "ends_with_string", "string_to_bytes",
                     "bytes_to_string", "strings_quote", "string_format"), _scan_first),
    "in_list": lambda args: actual_size(args[1]),
    **dict.fromkeys(TEXT_COMPARISONS, _shorter),
    "add_string": _both, "add_bytes": _both,
    "matches_string": _matches,
    "contains_string": _contains_string,
}


def default_call_cost(oid: str, args: list) -> int:
    rule = DEFAULT_COSTS.get(oid)
    return rule(args) if rule is not None else 1


def call_cost(fn: str, oid: str, args: list, result: Any) -> int:
    """The run-time charge of one call (cel-go ``CostTracker.costCall``)."""
    tracker = TRACKERS.get(oid)
    if tracker is not None:
        return tracker(args, result)
    found = kubernetes_call_cost(fn, oid, args, result)
    if found is not None:
        return found
    return default_call_cost(oid, args)


def cost_rule(fn: str, oid: str) -> int | None:
    """The constant charge of a call site when its cost does not depend on the values
    (None: call ``call_cost``), decided once when the program is planned."""
    if oid in TRACKERS:
        return None
    if fn in NOMINAL:
        return 1
    if fn in KUBERNETES_COSTS:
        return None
    return None if oid in DEFAULT_COSTS else 1
