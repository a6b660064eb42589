"""The CEL standard library (spec cel.md §2.9): operators, indexing, conversions, string
functions, timestamps and durations, with cel-go's semantics.

cel-go is strict where a lenient implementation would not be (``int(' 1')``,
``'abc'[0]``, ``[1,2][-1]`` are errors; ``string(true)`` is ``'true'``) and has
heterogeneous equality and cross-type numeric ordering; these implementations follow it.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from extender.cel.lib import timevals
from extender.cel.values import (
    INT64_MAX,
    INT64_MIN,
    MISSING,
    NUMERIC,
    UINT64_MAX,
    CelType,
    EvalError,
    Uint,
    cel_compare,
    cel_equal,
    cel_function,
    check_int,
    check_uint,
    kind,
    map_get,
    want,
)

B = bool


def _same(a: Any, b: Any, *kinds: str) -> str:
    ka, kb = kind(a), kind(b)
    if ka != kb or ka not in kinds:
        raise TypeError(f"{ka}, {kb}")
    return ka


@cel_function("_+_")
def add(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb == "int":
        return check_int(int(a) + int(b))
    if ka == kb == "uint":
        return check_uint(int(a) + int(b))
    if ka == kb == "double":
        return float(float(a) + float(b))
    if ka == kb == "string":
        return str(str.__add__(a, b))
    if ka == kb == "bytes":
        return bytes(bytes.__add__(a, b))
    if ka == kb == "list":
        return list(list(a) + list(b))
    if {ka, kb} <= {"timestamp", "duration"} and (ka, kb) != ("timestamp", "timestamp"):
        return timevals.add(a, b)
    raise TypeError(f"{ka} + {kb}")


@cel_function("_-_")
def sub(a: Any, b: Any) -> Any:
    k = kind(a)
    if (k, kind(b)) in (("timestamp", "timestamp"), ("timestamp", "duration"),
                        ("duration", "duration")):
        return timevals.sub(a, b)
    k = _same(a, b, "int", "uint", "double")
    if k == "int":
        return check_int(int(a) - int(b))
    if k == "uint":
        return check_uint(int(a) - int(b))
    return float(float(a) - float(b))


@cel_function("_*_")
def mul(a: Any, b: Any) -> Any:
    k = _same(a, b, "int", "uint", "double")
    if k == "int":
        return check_int(int(a) * int(b))
    if k == "uint":
        return check_uint(int(a) * int(b))
    return float(float(a) * float(b))


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@cel_function("_/_")
def div(a: Any, b: Any) -> Any:
    k = _same(a, b, "int", "uint", "double")
    if k == "double":
        fa, fb = float(a), float(b)
        if fb == 0.0:
            if fa == 0.0 or math.isnan(fa):
                return float(math.nan)
            return float(math.copysign(math.inf, fa) * math.copysign(1.0, fb))
        return float(fa / fb)
    if int(b) == 0:
        raise EvalError("division by zero")
    q = _trunc_div(int(a), int(b))
    return check_int(q) if k == "int" else check_uint(q)


@cel_function("_%_")
def mod(a: Any, b: Any) -> Any:
    k = _same(a, b, "int", "uint")
    if int(b) == 0:
        raise EvalError("modulus by zero")
    if k == "int" and int(a) == INT64_MIN and int(b) == -1:  # cel-go modInt64Checked
        raise EvalError("integer overflow")
    r = int(a) - _trunc_div(int(a), int(b)) * int(b)
    return int(r) if k == "int" else Uint(r)


@cel_function("-_")
def neg(a: Any) -> Any:
    k = kind(a)
    if k == "int":
        return check_int(-int(a))
    if k == "double":
        return float(-float(a))
    if k == "duration":
        return timevals.neg(a)
    raise TypeError(k)


@cel_function("!_")
def logical_not(a: Any) -> Any:
    want(a, "bool")
    return B(not a)


@cel_function("_==_")
def eq(a: Any, b: Any) -> Any:
    return B(cel_equal(a, b))


@cel_function("_!=_")
def ne(a: Any, b: Any) -> Any:
    return B(not cel_equal(a, b))


@cel_function("_<_")
def lt(a: Any, b: Any) -> Any:
    return B(cel_compare(a, b) < 0)


@cel_function("_<=_")
def le(a: Any, b: Any) -> Any:
    return B(cel_compare(a, b) <= 0)


@cel_function("_>_")
def gt(a: Any, b: Any) -> Any:
    return B(cel_compare(a, b) > 0)


@cel_function("_>=_")
def ge(a: Any, b: Any) -> Any:
    return B(cel_compare(a, b) >= 0)


@cel_function("@in")
def in_(item: Any, container: Any) -> Any:
    k = kind(container)
    if k == "list":
        return B(any(cel_equal(item, x) for x in container))
    if k == "map":
        return B(map_get(container, item) is not MISSING)
    raise TypeError(k)


def _list_index(container: list, index: Any) -> int:
    k = kind(index)
    if k == "double":
        f = float(index)
        if not f.is_integer():
            raise EvalError(f"unsupported index value {f}")
        i = int(f)
    elif k in ("int", "uint"):
        i = int(index)
    else:
        raise TypeError(k)
    if i < 0 or i >= len(container):
        raise EvalError(f"index out of range: {i}")
    return i


@cel_function("_[_]")
def index(container: Any, key: Any) -> Any:
    k = kind(container)
    if k == "list":
        return container[_list_index(container, key)]
    if k == "map":
        value = map_get(container, key)
        if value is MISSING:
            raise EvalError(f"no such key: {key!s}")
        return value
    raise TypeError(k)


@cel_function("size")
def size(v: Any) -> Any:
    k = kind(v)
    if k in ("string", "bytes", "list", "map"):
        return int(len(v))
    raise TypeError(k)


@cel_function("contains")
def contains(s: Any, sub_: Any) -> Any:
    _same(s, sub_, "string")
    return B(str.__contains__(s, sub_))


@cel_function("startsWith")
def starts_with(s: Any, prefix: Any) -> Any:
    _same(s, prefix, "string")
    return B(str.startswith(s, prefix))


@cel_function("endsWith")
def ends_with(s: Any, suffix: Any) -> Any:
    _same(s, suffix, "string")
    return B(str.endswith(s, suffix))


# --- conversions (cel-go semantics) -------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_UINT_RE = re.compile(r"[0-9]+")


@cel_function("int")
def to_int(v: Any) -> Any:
    k = kind(v)
    if k in ("int", "uint"):
        return check_int(int(v))
    if k == "double":
        f = float(v)
        if math.isnan(f) or f <= INT64_MIN or f >= INT64_MAX:
            raise EvalError("integer overflow")
        return int(int(f))
    if k == "string":
        if not _INT_RE.fullmatch(v):
            raise EvalError(f"cannot parse {str(v)!r} as int")
        return check_int(int(v))
    if k == "timestamp":
        return int(v.sec)
    if k == "duration":  # cel-go: the duration in nanoseconds
        return int(v.ns)
    raise TypeError(k)


@cel_function("uint")
def to_uint(v: Any) -> Any:
    k = kind(v)
    if k in ("int", "uint"):
        return check_uint(int(v))
    if k == "double":
        f = float(v)
        if math.isnan(f) or f < 0 or f >= UINT64_MAX:
            raise EvalError("unsigned integer overflow")
        return Uint(int(f))
    if k == "string":
        if not _UINT_RE.fullmatch(v):
            raise EvalError(f"cannot parse {str(v)!r} as uint")
        return check_uint(int(v))
    raise TypeError(k)


@cel_function("double")
def to_double(v: Any) -> Any:
    k = kind(v)
    if k in NUMERIC:
        return float(v)
    if k == "string":
        return go_parse_float(str(v))
    raise TypeError(k)


_GO_DECIMAL = re.compile(r"[+-]?(?=\.?[0-9])[0-9_]*(?:\.[0-9_]*)?(?:[eE][+-]?[0-9_]+)?")
_GO_HEX = re.compile(r"[+-]?0[xX](?=[._]*[0-9a-fA-F])[0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?"
                     r"[pP][+-]?[0-9_]+")
_GO_SPECIAL = re.compile(r"([+-]?)(inf|infinity)|nan", re.IGNORECASE)


def _go_underscores_ok(s: str) -> bool:
    """Go strconv ``underscoreOK``: an underscore only between digits (a base prefix
    counts as a digit)."""
    saw = "^"
    i = 0
    if s[:1] in "+-":
        s = s[1:]
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i, saw, hexa = 2, "0", s[1].lower() == "x"
    for c in s[i:]:
        if c.isdigit() and c.isascii() or hexa and c.lower() in "abcdef":
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def go_parse_float(text: str) -> float:
    """Go ``strconv.ParseFloat(s, 64)``, which cel-go's ``double(string)`` uses: decimal
    and hexadecimal (``0x1.8p1``, a ``p`` exponent required) literals, ``_`` between
    digits, ``inf``/``infinity``/``nan`` in any case (only the infinities signed); out of
    range is an error, underflow gives zero."""
    special = _GO_SPECIAL.fullmatch(text)
    if special:
        if special.group(2) is None:
            return math.nan
        return -math.inf if special.group(1) == "-" else math.inf
    hexa = _GO_HEX.fullmatch(text)
    if not (hexa or _GO_DECIMAL.fullmatch(text)) or (
            "_" in text and not _go_underscores_ok(text)):
        raise EvalError(f"cannot parse {text!r} as double")
    digits = text.replace("_", "")
    try:
        value = float.fromhex(digits) if hexa else float(digits)
    except OverflowError:
        value = math.inf
    if math.isinf(value):
        raise EvalError(f"value out of range: {text!r}")
    return value


def go_format_double(f: float) -> str:
    """Go ``strconv.FormatFloat(f, 'g', -1, 64)`` (what cel-go's string(double) yields)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign, digits, exp = Decimal(repr(f)).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + int(exp)  # position of the decimal point within ds
    x = point - 1  # decimal exponent
    neg = "-" if sign else ""
    if x < -4 or x >= 6:  # shortest 'g' uses %e when exp < -4 || exp >= 6
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{ds}"
    if point >= len(ds):
        return f"{neg}{ds}{'0' * (point - len(ds))}"
    return f"{neg}{ds[:point]}.{ds[point:]}"


@cel_function("string")
def to_string(v: Any) -> Any:
    k = kind(v)
    if k == "string":
        return v
    if k == "bool":
        return str("true" if v else "false")
    if k in ("int", "uint"):
        return str(str(int(v)))
    if k == "double":
        return str(go_format_double(float(v)))
    if k == "bytes":
        try:
            return str(bytes(v).decode("utf-8"))
        except UnicodeDecodeError:
            raise EvalError("invalid UTF-8 in bytes") from None
    if k == "timestamp":
        return timevals.rfc3339_nano(v)
    if k == "duration":
        return timevals.go_duration_string(v)
    conv = getattr(v, "cel_string", None)
    if conv is not None:
        return str(conv())
    raise TypeError(k)


_BOOL_STRINGS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
                 "0": False, "f": False, "F": False, "FALSE": False, "false": False,
                 "False": False}


@cel_function("bool")
def to_bool(v: Any) -> Any:
    k = kind(v)
    if k == "bool":
        return v
    if k == "string":
        if str(v) not in _BOOL_STRINGS:
            raise EvalError(f"cannot parse {str(v)!r} as bool")
        return B(_BOOL_STRINGS[str(v)])
    raise TypeError(k)


@cel_function("bytes")
def to_bytes(v: Any) -> Any:
    k = kind(v)
    if k == "bytes":
        return v
    if k == "string":
        return bytes(str(v).encode("utf-8", "surrogatepass"))
    raise TypeError(k)


@cel_function("duration")
def to_duration(v: Any) -> Any:
    k = kind(v)
    if k == "duration":
        return v
    if k == "string":
        return timevals.parse_duration(str(v))
    if k == "int":  # declared, but cel-go's duration type has no conversion from int
        raise EvalError("type conversion error from 'int' to 'google.protobuf.Duration'")
    raise TypeError(k)


@cel_function("timestamp")
def to_timestamp(v: Any) -> Any:
    k = kind(v)
    if k == "timestamp":
        return v
    if k == "string":
        return timevals.parse_rfc3339(str(v))
    if k == "int":
        return timevals.from_unix(int(v))
    raise TypeError(k)


@cel_function("dyn")
def dyn(v: Any) -> Any:
    return v


@cel_function("type")
def type_of(v: Any) -> CelType:
    """A type value that compares equal to the type identifiers (``string``, ``int``...)."""
    return CelType(kind(v))


FUNCTIONS = {
    "_+_": add, "_-_": sub, "_*_": mul, "_/_": div, "_%_": mod, "-_": neg, "!_": logical_not,
    "_==_": eq, "_!=_": ne, "_<_": lt, "_<=_": le, "_>_": gt, "_>=_": ge,
    "_in_": in_, "@in": in_, "_[_]": index, "size": size, "contains": contains,
    "startsWith": starts_with, "endsWith": ends_with, "int": to_int, "uint": to_uint,
    "double": to_double, "string": to_string, "bool": to_bool, "bytes": to_bytes,
    "duration": to_duration, "timestamp": to_timestamp, "dyn": dyn, "type": type_of,
    **{name: cel_function(name)(impl) for name, impl in timevals.ACCESSORS.items()},
}
