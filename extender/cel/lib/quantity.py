"""Kubernetes CEL ``quantity`` library (``resource.Quantity`` semantics, exact decimals).

``parse_quantity`` follows ``resource.ParseQuantity``: the same scanner (so ``'.'`` and
``'+'`` parse as zero, ``'1.G'`` is accepted, ``'200K'`` is a suffix error), suffix table,
round-up to nano precision for finer values, and the BinarySI cap at 2^63-1.  A quantity
keeps Go's representation (``Amount``: an int64 mantissa and scale on the fast path, an
inf.Dec otherwise) because ``isInteger``, ``asInteger`` and ``asApproximateFloat`` depend
on it; values compare exactly as ``Decimal``s (``quantity('200M') == quantity('0.2G')``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from extender.cel.values import INT64_MAX, INT64_MIN, EvalError, cel_function, kind, want

SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT = f"quantities must match the regular expression '{SPLIT_RE}'"
ERR_SUFFIX = "unable to parse quantity's suffix"
ERR_NUMERIC = "unable to parse numeric part of quantity"

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
            "E": 18}
_SUFFIX_CHARS = "eEinumkKMGTP"
_DIGITS = "0123456789"
_MAX_EXP = 10_000  # exponents beyond this are refused (Python would need huge integers)
#: The common form, plain digits and a whole-number suffix (``'512Mi'``, ``'2G'``,
#: ``'100'``): its value is an integer product, without the scanner or decimal contexts.
_WHOLE = re.compile(r"([0-9]{1,18})(k|M|G|T|P|E|)")


class QuantityError(ValueError):
    pass


def _scan(s: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: (positive, value, num, denom, suffix)."""
    positive, pos, end = True, 0, len(s)
    if pos < end and s[0] in "+-":
        positive = s[0] == "+"
        pos += 1
    while True:
        if pos >= end:
            return positive, "0", "0", "", ""
        if s[pos] != "0":
            break
        pos += 1
    i = pos
    while i < end and s[i] in _DIGITS:
        i += 1
    if i >= end:
        return positive, s, s[pos:] or "0", "", ""
    num, pos = s[pos:i] or "0", i
    denom = ""
    if s[pos] == ".":
        pos += 1
        i = pos
        while i < end and s[i] in _DIGITS:
            i += 1
        denom = s[pos:i]
        if i >= end:
            return positive, s, num, denom, ""
        pos = i
    value, suffix_start = s[:pos], pos
    i = pos
    while i < end and s[i] in _SUFFIX_CHARS:
        i += 1
    if i < end and s[i] in "+-":
        i += 1
    while i < end and s[i] in _DIGITS:
        i += 1
    if i < end:
        raise QuantityError(ERR_FORMAT)
    return positive, value, num, denom, s[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    if suffix in _BINARY:
        return 2, _BINARY[suffix], "BinarySI"
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], "DecimalSI"
    if len(suffix) > 1 and suffix[0] in "eE":
        exp = suffix[1:]
        body = exp[1:] if exp[0] in "+-" else exp
        if body and all(c in _DIGITS for c in body):
            return 10, int(exp), "DecimalExponent"
    raise QuantityError(ERR_SUFFIX)


#: ``maxInt64Factors``: decimal digits an int64Amount mantissa is allowed by ParseQuantity.
_MAX_INT64_FACTORS = 18
_NANO_SCALE = 9


class Amount(tuple):
    """A ``resource.Quantity``'s stored amount: ``(is_dec, unscaled, exp10)``, the value
    being ``unscaled * 10**exp10``.  ``is_dec`` False is Go's ``int64Amount{value,
    scale}`` (``exp10 = scale``), True an ``inf.Dec`` (``exp10 = -Dec.Scale()``).  The
    representation, not only the value, decides ``isInteger``/``asInteger`` (an inf.Dec
    or a negative scale never converts) and ``asApproximateFloat`` (``unscaled *
    math.Pow10(exp10)`` in float64)."""

    __slots__ = ()

    def __new__(cls, is_dec: bool, unscaled: int, exp10: int) -> Amount:
        return tuple.__new__(cls, (is_dec, unscaled, exp10))

    @property
    def value(self) -> Decimal:
        return Decimal(f"{self[1]}E{self[2]}")


def _fits(v: int) -> bool:
    return INT64_MIN <= v <= INT64_MAX


def _dec_from(value: str) -> tuple[int, int]:
    """inf.Dec ``SetString`` of the scanner's value text: (unscaled, scale)."""
    m = re.fullmatch(r"([+-]?)([0-9]*)(?:\.([0-9]*))?", value)
    if m is None or not (m[2] or m[3]):
        raise QuantityError(ERR_NUMERIC)
    frac = m[3] or ""
    return int(m[1] + (m[2] + frac or "0")), len(frac)


def parse_amount(s: str) -> Amount:
    """``resource.ParseQuantity``, keeping its representation (int64Amount or inf.Dec)."""
    if s == "":
        raise QuantityError(ERR_FORMAT)
    if s == "0":
        return Amount(False, 0, 0)
    whole = _WHOLE.fullmatch(s)
    if whole is not None:  # plain digits, decimal suffix: always the int64 fast path
        return Amount(False, int(whole[1]), _DECIMAL[whole[2]])
    return _parse_general(s)


def _parse_general(s: str) -> Amount:
    """Any quantity, through the scanner: fractions, exponents, signs, sub-unit and
    binary suffixes (and the reference the whole-number fast path is tested against)."""
    if s == "0":
        return Amount(False, 0, 0)
    positive, value, num, denom, suffix = _scan(s)
    base, exponent, fmt = _interpret(suffix)
    if abs(exponent) > _MAX_EXP:
        raise QuantityError(f"quantity exponent {exponent} is outside the supported range")
    precision, scale, mantissa = -1, 0, 1
    if fmt != "BinarySI":
        scale = exponent
        precision = _MAX_INT64_FACTORS - len(num) - len(denom)
    elif exponent >= 0 and not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - (exponent * 3) // 10 - 1
    if precision >= 0:
        scale -= len(denom)
        if scale >= -_NANO_SCALE:
            result = int(num + denom) * mantissa
            if _fits(result):
                return Amount(False, result if positive else -result, scale)
    unscaled, dec_scale = _dec_from(value)
    if base == 10:
        dec_scale -= exponent
    else:
        unscaled <<= exponent
    negative, unscaled = unscaled < 0, abs(unscaled)
    if unscaled != 0:  # round up to nano precision: the scale becomes 9
        if dec_scale <= _NANO_SCALE:
            unscaled *= 10 ** (_NANO_SCALE - dec_scale)
        else:
            q, r = divmod(unscaled, 10 ** (dec_scale - _NANO_SCALE))
            unscaled = q + (r != 0)
        dec_scale = _NANO_SCALE
    if fmt == "BinarySI" and unscaled > INT64_MAX * 10**dec_scale:  # the cap
        unscaled, dec_scale = INT64_MAX, 0
    return Amount(True, -unscaled if negative else unscaled, -dec_scale)


def parse_quantity(s: str) -> Decimal:
    """``resource.ParseQuantity`` -> exact value; raises QuantityError (K8s messages)."""
    return parse_amount(s).value


def _as_int64(a: Amount) -> int | None:
    """``Quantity.AsInt64``: never for an inf.Dec or a negative scale."""
    is_dec, unscaled, exp10 = a
    if is_dec or exp10 < 0:
        return None
    v = unscaled * 10**exp10 if exp10 < 20 or unscaled == 0 else INT64_MAX + 1
    return v if _fits(v) else None


_POW10 = [float(f"1e{i}") for i in range(32)]
_POW10_POS32 = [float(f"1e{32 * i}") for i in range(10)]
_POW10_NEG32 = [float(f"1e-{32 * i}") for i in range(11)]


def go_pow10(n: int) -> float:
    """Go ``math.Pow10``: the product (or quotient) of two table entries, as Go's."""
    if 0 <= n <= 308:
        return _POW10_POS32[n // 32] * _POW10[n % 32]
    if -323 <= n <= 0:
        return _POW10_NEG32[-n // 32] / _POW10[-n % 32]
    return math.inf if n > 0 else 0.0


def approximate_float(a: Amount) -> float:
    """``Quantity.AsApproximateFloat64``: ``float64(unscaled) * math.Pow10(exp10)``."""
    _is_dec, unscaled, exp10 = a
    try:
        base = float(unscaled)
    except OverflowError:  # big.Float.Float64 saturates
        base = math.inf if unscaled > 0 else -math.inf
    return base if exp10 == 0 else base * go_pow10(exp10)


def _int64_add(a: Amount, b: Amount) -> Amount | None:
    """``int64Amount.Add``: None when either is an inf.Dec or the sum overflows."""
    if a[0] or b[0]:
        return None
    _, x, xs = a
    _, y, ys = b
    if y == 0:
        return a
    if x == 0:
        return b
    if xs > ys:
        x, xs = x * 10 ** (xs - ys), ys
    elif ys > xs:
        y = y * 10 ** (ys - xs)
    if not (_fits(x) and _fits(y) and _fits(x + y)):
        return None
    return Amount(False, x + y, xs)


def _dec_add(a: Amount, b: Amount, sign: int = 1) -> Amount:
    """inf.Dec ``Add``/``Sub``: exact, at the larger scale of the two."""
    exp10 = min(a[2], b[2])
    return Amount(True, a[1] * 10 ** (a[2] - exp10) + sign * b[1] * 10 ** (b[2] - exp10),
                  exp10)


def _add(a: Amount, b: Amount) -> Amount:
    """``Quantity.Add``: in int64 when both are int64 amounts and nothing overflows."""
    return _int64_add(a, b) or _dec_add(a, b)


def _sub(a: Amount, b: Amount) -> Amount:
    """``Quantity.Sub``: ``int64Amount.Sub`` adds ``-value`` in int64, where
    ``-(-2**63)`` wraps to itself; when that fails, inf.Dec subtracts the real value."""
    negated = b if not b[0] and b[1] == INT64_MIN else Amount(b[0], -b[1], b[2])
    return _int64_add(a, negated) or _dec_add(a, b, -1)


class Quantity:
    """Opaque CEL value of type ``kubernetes.Quantity``.

    Kubernetes' ``Quantity.Equal`` compares values, but only with a ``Quantity`` *value*
    on its right: ``add()`` and ``sub()`` return a pointer (``&Quantity{}``), so
    ``quantity('2') == quantity('1').add(1)`` is a "no such overload" error there, while
    ``quantity('1').add(1) == quantity('2')`` is true.  ``by_reference`` marks the results
    of ``add``/``sub``; any other type on the right is the same error."""

    cel_type = "Quantity"
    strict_equality = True
    __slots__ = ("amount", "value", "by_reference")

    def __init__(self, amount: Amount, by_reference: bool = False) -> None:
        self.amount, self.value, self.by_reference = amount, amount.value, by_reference

    def cel_equals(self, other: Any) -> bool:
        if not isinstance(other, Quantity) or other.by_reference:
            raise TypeError("Quantity.Equal: no such overload")
        return self.value == other.value

    def __repr__(self) -> str:
        return f"quantity({self.value})"


def _q(v: Any) -> Decimal:
    if not isinstance(v, Quantity):
        raise TypeError(kind(v))
    return v.value


def _qa(v: Any) -> Amount:
    if not isinstance(v, Quantity):
        raise TypeError(kind(v))
    return v.amount


@cel_function("quantity")
def quantity(s: Any) -> Any:
    want(s, "string")
    try:
        return Quantity(parse_amount(str(s)))
    except QuantityError as exc:
        raise EvalError(str(exc)) from None


@cel_function("isQuantity")
def is_quantity(s: Any) -> Any:
    want(s, "string")
    try:
        parse_amount(str(s))
    except QuantityError:
        return False
    return True


@cel_function("isInteger")
def is_integer(q: Any) -> Any:
    return bool(_as_int64(_qa(q)) is not None)


@cel_function("asInteger")
def as_integer(q: Any) -> Any:
    i = _as_int64(_qa(q))
    if i is None:
        raise EvalError("cannot convert value to integer")
    return int(i)


@cel_function("asApproximateFloat")
def as_approximate_float(q: Any) -> Any:
    return float(approximate_float(_qa(q)))


@cel_function("sign")
def sign(q: Any) -> Any:
    d = _q(q)
    return int((d > 0) - (d < 0))


def _operand(v: Any) -> Amount:
    """The right operand of add/sub: a quantity, or an int as ``resource.NewQuantity``
    makes it (an int64Amount of scale 0)."""
    if kind(v) == "int":
        return Amount(False, int(v), 0)
    return _qa(v)


@cel_function("add")
def add(q: Any, other: Any) -> Any:
    return Quantity(_add(_qa(q), _operand(other)), by_reference=True)


@cel_function("sub")
def sub(q: Any, other: Any) -> Any:
    return Quantity(_sub(_qa(q), _operand(other)), by_reference=True)


def quantity_compare(a: Any, b: Any) -> int:
    x, y = _q(a), _q(b)
    return (x > y) - (x < y)


FUNCTIONS = {"quantity": quantity, "isQuantity": is_quantity, "isInteger": is_integer,
             "asInteger": as_integer, "asApproximateFloat": as_approximate_float,
             "sign": sign, "add": add, "sub": sub}
