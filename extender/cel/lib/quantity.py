"""Kubernetes CEL ``quantity`` library (``resource.Quantity`` semantics, exact decimals).

``parse_quantity`` follows ``resource.ParseQuantity``: the same scanner (so ``'.'`` and
``'+'`` parse as zero, ``'1.G'`` is accepted, ``'200K'`` is a suffix error), suffix table,
round-up to nano precision for finer values, and the BinarySI cap at 2^63-1.  Values are
Python ``Decimal``s, compared exactly (``quantity('200M') == quantity('0.2G')``).
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal
from typing import Any

from extender.cel.values import INT64_MAX, INT64_MIN, EvalError, cel_function, kind, want

SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT = f"quantities must match the regular expression '{SPLIT_RE}'"
ERR_SUFFIX = "unable to parse quantity's suffix"

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
            "E": 18}
_SUFFIX_CHARS = "eEinumkKMGTP"
_DIGITS = "0123456789"
_NANO = Decimal("1e-9")
_MAX = Decimal(INT64_MAX)
_MAX_EXP = 10_000  # exponents beyond this are refused (Python would need huge integers)
#: The common form, plain digits and a whole-number suffix (``'512Mi'``, ``'2G'``,
#: ``'100'``): its value is an integer product, without the scanner or decimal contexts.
_WHOLE = re.compile(r"([0-9]{1,18})(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|)")
_WHOLE_FACTOR = {**{s: 2**e for s, e in _BINARY.items()},
                 **{s: 10**e for s, e in _DECIMAL.items() if e >= 0}}


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


def _ctx(*values: Decimal) -> decimal.Context:
    digits = max((len(v.as_tuple().digits) + abs(v.as_tuple().exponent)) for v in values)
    return decimal.Context(prec=max(40, digits + 20), Emax=10**9, Emin=-(10**9),
                           rounding=decimal.ROUND_UP)


def parse_quantity(s: str) -> Decimal:
    """``resource.ParseQuantity`` -> exact value; raises QuantityError (K8s messages)."""
    if s == "":
        raise QuantityError(ERR_FORMAT)
    whole = _WHOLE.fullmatch(s)
    if whole is not None:
        digits, suffix = whole.groups()
        value = int(digits) * _WHOLE_FACTOR[suffix]
        return Decimal(INT64_MAX if value > INT64_MAX and suffix in _BINARY else value)
    return _parse_general(s)


def _parse_general(s: str) -> Decimal:
    """Any quantity, through the scanner: fractions, exponents, signs, sub-unit
    suffixes (and the reference the whole-number fast path is tested against)."""
    if s == "0":
        return Decimal(0)
    positive, _value, num, denom, suffix = _scan(s)
    base, exponent, fmt = _interpret(suffix)
    if abs(exponent) > _MAX_EXP:
        raise QuantityError(f"quantity exponent {exponent} is outside the supported range")
    digits = (num + denom).lstrip("0") or "0"
    amount = Decimal(f"{digits}e-{len(denom)}") if digits != "0" else Decimal(0)
    if base == 10:
        amount = amount.scaleb(exponent, _ctx(amount))
    else:
        amount = _ctx(amount).multiply(amount, Decimal(2**exponent))
    if amount != 0 and amount.as_tuple().exponent < -9:
        amount = amount.quantize(_NANO, context=_ctx(amount))
    if fmt == "BinarySI" and amount > _MAX:
        amount = _MAX
    return amount if positive else -amount


class Quantity:
    """Opaque CEL value of type ``kubernetes.Quantity``.

    Kubernetes' ``Quantity.Equal`` compares values, but only with a ``Quantity`` *value*
    on its right: ``add()`` and ``sub()`` return a pointer (``&Quantity{}``), so
    ``quantity('2') == quantity('1').add(1)`` is a "no such overload" error there, while
    ``quantity('1').add(1) == quantity('2')`` is true.  ``by_reference`` marks the results
    of ``add``/``sub``; any other type on the right is the same error."""

    cel_type = "Quantity"
    strict_equality = True
    __slots__ = ("value", "by_reference")

    def __init__(self, value: Decimal, by_reference: bool = False) -> None:
        self.value, self.by_reference = value, by_reference

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


@cel_function("quantity")
def quantity(s: Any) -> Any:
    want(s, "string")
    try:
        return Quantity(parse_quantity(str(s)))
    except QuantityError as exc:
        raise EvalError(str(exc)) from None


@cel_function("isQuantity")
def is_quantity(s: Any) -> Any:
    want(s, "string")
    try:
        parse_quantity(str(s))
    except QuantityError:
        return False
    return True


def _as_int64(d: Decimal) -> int | None:
    if d != d.to_integral_value() or d.adjusted() > 19:
        return None
    i = int(d)
    return i if INT64_MIN <= i <= INT64_MAX else None


@cel_function("isInteger")
def is_integer(q: Any) -> Any:
    return bool(_as_int64(_q(q)) is not None)


@cel_function("asInteger")
def as_integer(q: Any) -> Any:
    i = _as_int64(_q(q))
    if i is None:
        raise EvalError("cannot convert value to integer")
    return int(i)


@cel_function("asApproximateFloat")
def as_approximate_float(q: Any) -> Any:
    return float(float(_q(q)))


@cel_function("sign")
def sign(q: Any) -> Any:
    d = _q(q)
    return int((d > 0) - (d < 0))


def _operand(v: Any) -> Decimal:
    if kind(v) == "int":
        return Decimal(int(v))
    return _q(v)


@cel_function("add")
def add(q: Any, other: Any) -> Any:
    a, b = _q(q), _operand(other)
    return Quantity(_ctx(a, b).add(a, b), by_reference=True)


@cel_function("sub")
def sub(q: Any, other: Any) -> Any:
    a, b = _q(q), _operand(other)
    if b == INT64_MIN and a == a.to_integral_value() and 0 <= a <= INT64_MAX:
        # resource.Quantity subtracts in int64 by adding the negated amount, and
        # -(-2^63) wraps to -2^63 in Go: 0 <= q < 2^63 gives q + (-2^63), no overflow seen
        return Quantity(a + b, by_reference=True)
    return Quantity(_ctx(a, b).subtract(a, b), by_reference=True)


def quantity_compare(a: Any, b: Any) -> int:
    x, y = _q(a), _q(b)
    return (x > y) - (x < y)


FUNCTIONS = {"quantity": quantity, "isQuantity": is_quantity, "isInteger": is_integer,
             "asInteger": as_integer, "asApproximateFloat": as_approximate_float,
             "sign": sign, "add": add, "sub": sub}
