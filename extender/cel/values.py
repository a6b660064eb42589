"""Runtime value helpers shared by the libraries: kinds, CEL equality/ordering, errors.

cel-python values are Python subclasses (``IntType(int)``, ``StringType(str)``, ...), and
``BoolType`` is an ``int`` subclass, so every type test here is on the exact CEL kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import wraps
from typing import Any

from celpy import celtypes as T
from celpy.evaluation import CELEvalError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1


class CelType:
    """A CEL type value: what ``type(x)`` returns and what the identifiers ``int``,
    ``string``, ``list``... evaluate to (cel-python resolves those names to its
    conversion functions, so ``type(x) == string`` was false)."""

    __slots__ = ("name",)
    cel_type = "type"

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("type", self.name))

    def __repr__(self) -> str:
        return self.name


#: identifiers that denote type values (cel-go's checker declares them as types)
TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map",
                        "null_type", "type"})


class EvalError(Exception):
    """Raised by library code; turned into a CEL error value (message kept verbatim)."""


def kind(v: Any) -> str:
    """The CEL type name of a runtime value (``"int"``, ``"list"``, ``"Semver"`` ...)."""
    if v is None:
        return "null_type"
    if isinstance(v, T.BoolType):
        return "bool"
    if isinstance(v, T.UintType):
        return "uint"
    if isinstance(v, T.IntType):
        return "int"
    if isinstance(v, T.DoubleType):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    if isinstance(v, T.TimestampType):
        return "timestamp"
    if isinstance(v, T.DurationType):
        return "duration"
    if isinstance(v, type):
        return "type"
    name = getattr(v, "cel_type", None)
    return name if name else type(v).__name__


NUMERIC = frozenset({"int", "uint", "double"})


def size_of(v: Any) -> int:
    """cel-go ``actualSize``: length of sized values, 1 otherwise."""
    if isinstance(v, str | bytes | list | dict):
        return len(v)
    return 1


def cel_equal(a: Any, b: Any) -> bool:
    """CEL runtime (heterogeneous) equality: numbers compare by value across int/uint/double,
    other kinds must match, lists/maps compare element-wise; different kinds are unequal."""
    ka, kb = kind(a), kind(b)
    if ka in NUMERIC and kb in NUMERIC:
        if ka == kb:
            return a == b if ka != "double" else float(a) == float(b)
        if (ka == "double" and math.isnan(a)) or (kb == "double" and math.isnan(b)):
            return False  # NaN equals nothing (only ordering a NaN is an error)
        return _num_cmp(a, b) == 0
    if ka != kb:
        return False
    if ka == "list":
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if ka == "map":
        if len(a) != len(b):
            return False
        for k, v in a.items():
            found = _map_lookup(b, k)
            if found is _MISSING or not cel_equal(v, found):
                return False
        return True
    if ka == "bool":
        return bool(a) == bool(b)
    if ka == "type":
        return a is b or a == b
    eq = getattr(a, "cel_equals", None)
    if eq is not None:
        return bool(eq(b))
    return bool(a == b)


_MISSING = object()


def _map_lookup(m: dict, key: Any) -> Any:
    """Look a key up with CEL key semantics (numeric keys equal across int/uint/double)."""
    k = kind(key)
    for candidate, value in m.items():
        kc = kind(candidate)
        if (kc == k or (kc in NUMERIC and k in NUMERIC)) and cel_equal(candidate, key):
            return value
    return _MISSING


def map_get(m: dict, key: Any) -> Any:
    try:
        if kind(key) == "string":
            value = m.get(key, _MISSING)
            if value is not _MISSING:
                return value
    except TypeError:  # celpy keys raise on cross-type comparisons
        pass
    return _map_lookup(m, key)


def _num_cmp(a: Any, b: Any) -> int:
    """Exact comparison of int/uint/double values (no float rounding of big ints)."""
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            raise EvalError("NaN values cannot be ordered")
        if isinstance(a, float) and isinstance(b, float):
            return (fa > fb) - (fa < fb)
        # compare an integer with a double exactly
        if isinstance(a, float):
            return -_int_vs_float(int(b), fa)
        return _int_vs_float(int(a), fb)
    ia, ib = int(a), int(b)
    return (ia > ib) - (ia < ib)


def _int_vs_float(i: int, f: float) -> int:
    if math.isinf(f):
        return -1 if f > 0 else 1
    from fractions import Fraction

    fi = Fraction(f)
    return (i > fi) - (i < fi)


ORDERED = frozenset({"int", "uint", "double", "string", "bytes", "bool", "timestamp",
                     "duration"})


def cel_compare(a: Any, b: Any) -> int:
    """Ordering for ``< <= > >=``: same kind, or any two numeric kinds (K8s
    CrossTypeNumericComparisons); opaque kinds are not ordered by operators."""
    ka, kb = kind(a), kind(b)
    if ka in NUMERIC and kb in NUMERIC:
        return _num_cmp(a, b)
    if ka != kb or ka not in ORDERED:
        raise EvalError(f"no such overload: {ka} < {kb}")
    if ka == "bool":
        a, b = bool(a), bool(b)
    elif ka == "string":
        a, b = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    return (a > b) - (a < b)


def check_int(v: int) -> T.IntType:
    if v < INT64_MIN or v > INT64_MAX:
        raise EvalError("integer overflow")
    return T.IntType(v)


def check_uint(v: int) -> T.UintType:
    if v < 0 or v > UINT64_MAX:
        raise EvalError("unsigned integer overflow")
    return T.UintType(v)


def to_cel(v: Any) -> Any:
    """Plain Python value -> cel-python value (lists of str -> ListType of StringType...)."""
    if isinstance(v, bool):
        return T.BoolType(v)
    if isinstance(v, int) and not isinstance(v, T.IntType | T.UintType | T.BoolType):
        return T.IntType(v)
    if isinstance(v, str) and not isinstance(v, T.StringType):
        return T.StringType(v)
    if isinstance(v, list) and not isinstance(v, T.ListType):
        return T.ListType([to_cel(x) for x in v])
    if isinstance(v, dict) and not isinstance(v, T.MapType):
        return T.MapType({to_cel(k): to_cel(x) for k, x in v.items()})
    return v


def cel_function(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a library implementation: propagate error arguments, and turn EvalError,
    TypeError & co. into CEL error values (never raise into the evaluator)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def wrapper(*args: Any) -> Any:
            for a in args:
                if isinstance(a, CELEvalError):
                    return a
            try:
                return fn(*args)
            except EvalError as exc:
                return CELEvalError(f"{name}: {exc}", EvalError, ())
            except (TypeError, AttributeError, KeyError, IndexError) as exc:
                sig = ", ".join(kind(a) for a in args)
                return CELEvalError(
                    f"no such overload: {name}({sig})", type(exc), (str(exc)[:100],)
                )
            except (ValueError, OverflowError, ArithmeticError) as exc:
                return CELEvalError(f"{name}: {exc}", type(exc), ())

        wrapper.cel_name = name  # type: ignore[attr-defined]
        return wrapper

    return deco


def want(v: Any, *kinds: str) -> None:
    if kind(v) not in kinds:
        raise TypeError(f"expected {'/'.join(kinds)}, got {kind(v)}")


#: Go ``unicode.IsSpace`` = Unicode White_Space (what Go's strings.TrimSpace removes).
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
