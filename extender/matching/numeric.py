"""Integer parsing with Go/Kubernetes semantics for the ``Gt``/``Lt`` operators.

Python's ``int()`` accepts whitespace, ``_`` separators and non-ASCII digits, so it must never
see unvalidated input.  This module re-implements, from their documented behaviour:

* apimachinery ``content.IsDecimalInteger`` (canonical decimal form),
* Go ``strconv.ParseInt(s, 10, 64)`` / ``strconv.ParseUint(s, 10, 64)`` including their exact
  error texts and the order in which range and syntax errors are detected,
* the toleration rule of ``compareNumericValues`` (spec §0.1, §3.2, §3.3): a value is usable
  only if it is canonical decimal *and* fits int64; ``Gt`` tolerates iff taint > toleration,
  ``Lt`` iff taint < toleration.
"""

from __future__ import annotations

import re
import unicodedata

from extender.caching import memoized

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "UINT64_MAX",
    "GoNumError",
    "compare_numeric",
    "go_parse_int64",
    "go_parse_uint64",
    "go_quote",
    "is_decimal_integer",
    "parse_canonical_int64",
    "why_not_numeric",
]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

EMPTY_ERROR = "must be non-empty"
DECIMAL_INTEGER_ERROR = "must be a valid decimal integer in canonical form"

ERR_SYNTAX = "invalid syntax"
ERR_RANGE = "value out of range"

# Explicit [0-9] classes only ever match ASCII digits (unlike \d on str patterns).
_CANONICAL_RE = re.compile(r"0|-?[1-9][0-9]*")
_ASCII_DIGITS_PREFIX_RE = re.compile(r"[0-9]*")

# Go's strconv.Quote escapes for the C0 controls that have a short form.
_SHORT_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
}


def _go_is_print(ch: str) -> bool:
    """Go ``unicode.IsPrint``: letters, marks, numbers, punctuation, symbols and ASCII space."""
    if " " <= ch <= "~":
        return True
    if ch < " " or ch == "\x7f":
        return False
    return unicodedata.category(ch)[0] in "LMNPS"


def go_quote(s: str) -> str:
    """Render ``s`` like Go ``strconv.Quote`` (what ``%q`` prints), so error texts match Go's."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif _go_is_print(ch):
            out.append(ch)
        else:
            cp = ord(ch)
            short = _SHORT_ESCAPES.get(cp)
            if short is not None:
                out.append(short)
            elif cp < 0x20 or cp == 0x7F:
                out.append(f"\\x{cp:02x}")
            elif 0xD800 <= cp <= 0xDFFF:
                out.append("\\ufffd")  # not a valid rune: Go substitutes U+FFFD
            elif cp < 0x10000:
                out.append(f"\\u{cp:04x}")
            else:
                out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def is_decimal_integer(s: str) -> list[str]:
    """Port of ``content.IsDecimalInteger``: ``0`` or optional ``-`` then ``[1-9][0-9]*``.

    Returns the list of error texts (empty when valid), like the Go validator.
    """
    if not s:
        return [EMPTY_ERROR]
    if _CANONICAL_RE.fullmatch(s) is None:
        return [DECIMAL_INTEGER_ERROR]
    return []


class GoNumError(ValueError):
    """Mirror of Go ``*strconv.NumError``; ``str()`` is Go's exact ``Error()`` text.

    ``value`` is what Go returns alongside the error (the clamped bound for range errors,
    0 for syntax errors).
    """

    def __init__(self, func: str, num: str, err: str, value: int = 0) -> None:
        self.func = func
        self.num = num
        self.err = err
        self.value = value
        super().__init__(f"strconv.{func}: parsing {go_quote(num)}: {err}")

    @property
    def is_range_error(self) -> bool:
        """True for ``value out of range`` (Go ``errors.Is(err, strconv.ErrRange)``)."""
        return self.err == ERR_RANGE


def _exceeds_uint64(digits: str) -> bool:
    """Whether an ASCII digit string denotes a value above 2**64-1 (no int() on huge input)."""
    significant = digits.lstrip("0")
    if len(significant) > 20:
        return True
    return len(significant) == 20 and int(significant) > UINT64_MAX


def _parse_uint10(body: str, func: str, num: str) -> int:
    """Go ``ParseUint(body, 10, 64)`` core; errors name ``func`` and quote ``num``.

    Go scans left to right and reports overflow as soon as the accumulated value overflows,
    so ``"99999999999999999999x"`` is a *range* error while ``"1x"`` is a syntax error.
    """
    if not body:
        raise GoNumError(func, num, ERR_SYNTAX)
    m = _ASCII_DIGITS_PREFIX_RE.match(body)
    end = m.end() if m is not None else 0
    digits = body[:end]
    if _exceeds_uint64(digits):
        raise GoNumError(func, num, ERR_RANGE, UINT64_MAX)
    if end != len(body):
        raise GoNumError(func, num, ERR_SYNTAX)
    return int(digits)


def go_parse_uint64(s: str) -> int:
    """Exact port of Go ``strconv.ParseUint(s, 10, 64)``: ASCII digits only, no sign."""
    return _parse_uint10(s, "ParseUint", s)


def go_parse_int64(s: str) -> int:
    """Exact port of Go ``strconv.ParseInt(s, 10, 64)``.

    Optional ``+``/``-``, then one or more ASCII digits (leading zeros fine); no whitespace,
    no ``_``, no base prefixes.  Raises :class:`GoNumError` with Go's message.
    """
    if not s:
        raise GoNumError("ParseInt", s, ERR_SYNTAX)
    neg = False
    body = s
    if s[0] == "+":
        body = s[1:]
    elif s[0] == "-":
        neg = True
        body = s[1:]
    try:
        un = _parse_uint10(body, "ParseInt", s)
    except GoNumError as exc:
        if not exc.is_range_error:
            raise
        un = UINT64_MAX
    if not neg and un > INT64_MAX:
        raise GoNumError("ParseInt", s, ERR_RANGE, INT64_MAX)
    if neg and un > -INT64_MIN:
        raise GoNumError("ParseInt", s, ERR_RANGE, INT64_MIN)
    return -un if neg else un


@memoized()
def parse_canonical_int64(s: str) -> int | None:
    """Toleration ``Gt``/``Lt`` value rule: canonical decimal and within int64, else None.

    Equivalent to ``is_decimal_integer(s) == []`` followed by a successful ``go_parse_int64``
    (the canonical regex already excludes everything ParseInt would reject except range).
    """
    if len(s) > 20 or _CANONICAL_RE.fullmatch(s) is None:
        return None
    v = int(s)  # safe: validated ASCII canonical digits, at most 20 chars
    if v < INT64_MIN or v > INT64_MAX:
        return None
    return v


def compare_numeric(operator: str, toleration_value: str, taint_value: str) -> bool:
    """Port of upstream ``compareNumericValues``.

    ``Gt`` tolerates iff taint > toleration, ``Lt`` iff taint < toleration (strict).  An
    unusable value on either side, or any other operator, is a non-match.
    """
    if operator == "Gt":
        tol = parse_canonical_int64(toleration_value)
        if tol is None:
            return False
        tnt = parse_canonical_int64(taint_value)
        return tnt is not None and tnt > tol
    if operator == "Lt":
        tol = parse_canonical_int64(toleration_value)
        if tol is None:
            return False
        tnt = parse_canonical_int64(taint_value)
        return tnt is not None and tnt < tol
    return False


def _why_not_canonical(label: str, value: str) -> str | None:
    """One side's explanation, or None if the value is usable."""
    quoted = go_quote(value)
    if not value:
        return f"{label} {quoted} is empty, not a decimal integer"
    if is_decimal_integer(value):
        return f"{label} {quoted} is not a canonical decimal integer"
    try:
        go_parse_int64(value)
    except GoNumError as exc:
        if exc.is_range_error:
            return f"{label} {quoted} is out of int64 range"
        return f"{label} {quoted} is not a decimal integer ({exc})"  # unreachable in practice
    return None


def why_not_numeric(toleration_value: str, taint_value: str) -> str | None:
    """Human explanation (for ``explain``) of why a ``Gt``/``Lt`` value pair cannot be compared.

    Names every side that fails; None when both values are usable (the comparison itself
    then decides).
    """
    reasons = [
        r
        for r in (
            _why_not_canonical("toleration value", toleration_value),
            _why_not_canonical("taint value", taint_value),
        )
        if r is not None
    ]
    return "; ".join(reasons) if reasons else None
