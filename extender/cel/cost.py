"""Cost units exactly as cel-go v0.26 with Kubernetes' environment counts them: the units,
the saturating range arithmetic and the names both halves share.

Two halves, as cel-go keeps them apart:

* ``extender.cel.estimator`` -- the admission-time (min, max) estimate: cel-go's
  ``checker.Cost`` over the checked, macro-expanded tree (``checker/cost.go``), with the
  library calls' estimators in ``extender.cel.library_estimates`` (cel-go's lists and sets
  extensions, Kubernetes' ``library.CostEstimator.EstimateCallCost``) and the taint fields
  at their declared maximum sizes (key 317, value 63, effect 16 bytes).
* ``extender.cel.tracker`` -- the run-time charge of one call, the interpreter's cost
  observer (cel-go's ``CostTracker.costCall``): the extensions' trackers by overload id,
  then Kubernetes' ``CallCost`` by function name, then cel-go's defaults by overload id.

Arithmetic follows Go's: sizes and costs saturate at 2^64-1, factors are float64
multiplications rounded up (estimate) or truncated (the trackers that truncate).
"""

from __future__ import annotations

import math

from extender.cel.limits import TAINT_EFFECT_MAX, TAINT_KEY_MAX, TAINT_VALUE_MAX

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

#: Kubernetes' library functions costing 1 unit, estimated and at run time
NOMINAL = frozenset({
    "masked", "prefixLength", "family", "isUnspecified", "isLoopback", "isLinkLocalMulticast",
    "isLinkLocalUnicast", "isGlobalUnicast", "format.named", "sign", "asInteger", "isInteger",
    "asApproximateFloat", "isGreaterThan", "isLessThan", "compareTo", "add", "sub", "major",
    "minor", "patch", "getScheme", "getHostname", "getHost", "getPort", "getEscapedPath",
    "getQuery"})
#: cel-go's comparisons of strings and bytes, costing a traversal of the shorter operand
TEXT_COMPARISONS = frozenset({
    "less_string", "greater_string", "less_equals_string", "greater_equals_string",
    "less_bytes", "greater_bytes", "less_equals_bytes", "greater_equals_bytes", "equals",
    "not_equals"})
#: cel-go lists' sortable element types (their overload ids) -> the element's type here
SORTABLE = {"int": "int", "uint": "uint", "double": "double", "bool": "bool",
            "google.protobuf.Duration": "duration", "google.protobuf.Timestamp": "timestamp",
            "string": "string", "bytes": "bytes"}


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


def taint_size(path: list[str] | None) -> Range | None:
    """The size estimator Kubernetes is given for KEP-5500: the declared maximum sizes of
    ``taint.key``, ``taint.value``, ``taint.effect``."""
    if path and len(path) == 2 and path[0] == "taint" and path[1] in TAINT_SIZES:
        return 0, TAINT_SIZES[path[1]]
    return None
