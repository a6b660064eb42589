"""Tests for extender.matching.numeric: IsDecimalInteger, Go ParseInt/ParseUint, Gt/Lt rule.

Tables are ported as data from upstream tests (apimachinery ``decimal_int_test.go``,
core/v1 ``toleration_test.go``) and from spec §3.2/§3.3.
"""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from extender.matching.numeric import (
    DECIMAL_INTEGER_ERROR,
    EMPTY_ERROR,
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    GoNumError,
    compare_numeric,
    go_parse_int64,
    go_parse_uint64,
    go_quote,
    is_decimal_integer,
    parse_canonical_int64,
    why_not_numeric,
)

# --------------------------------------------------------------------------------------------
# TestIsDecimalInteger (apimachinery content/decimal_int_test.go), as (name, input, valid)
# --------------------------------------------------------------------------------------------

IS_DECIMAL_INTEGER_CASES = [
    # valid
    ("zero", "0", True),
    ("positive single digit 1", "1", True),
    ("positive single digit 2", "2", True),
    ("positive single digit 5", "5", True),
    ("positive single digit 9", "9", True),
    ("negative single digit", "-5", True),
    ("negative single digit 1", "-1", True),
    ("negative single digit 9", "-9", True),
    ("number starting with 1", "100", True),
    ("number starting with 2", "234", True),
    ("number starting with 3", "345", True),
    ("number starting with 4", "456", True),
    ("number starting with 5", "567", True),
    ("number starting with 6", "678", True),
    ("number starting with 7", "789", True),
    ("number starting with 8", "890", True),
    ("number starting with 9", "999", True),
    ("positive multi-digit", "123", True),
    ("negative multi-digit", "-456", True),
    ("negative starting with 1", "-100", True),
    ("negative starting with 9", "-987", True),
    ("large positive number", "9223372036854775807", True),
    ("large negative number", "-9223372036854775808", True),
    ("very long valid number", "12345678901234567890", True),
    ("all nines", "999999999999", True),
    # invalid: zeros and signs
    ("negative zero", "-0", False),
    ("double zero", "00", False),
    ("triple zero", "000", False),
    ("many zeros", "0000000", False),
    ("leading zero single digit", "01", False),
    ("leading zero digit 2", "02", False),
    ("leading zero digit 9", "09", False),
    ("leading zero multi-digit", "0123", False),
    ("octal-like format", "0700", False),
    ("octal-like format 2", "0950", False),
    ("multiple leading zeros", "00123", False),
    ("negative with leading zero", "-01", False),
    ("negative with leading zeros", "-0123", False),
    ("negative double zero", "-00", False),
    ("plus sign", "+123", False),
    ("positive plus sign", "+5", False),
    ("plus zero", "+0", False),
    # empty and whitespace
    ("empty string", "", False),
    ("just minus sign", "-", False),
    ("just plus sign", "+", False),
    ("single space", " ", False),
    ("multiple spaces", "   ", False),
    ("leading space", " 123", False),
    ("trailing space", "123 ", False),
    ("space in middle", "12 3", False),
    ("spaces around", " 123 ", False),
    # decimals
    ("decimal number", "12.3", False),
    ("decimal zero", "0.0", False),
    ("negative decimal", "-12.5", False),
    ("trailing dot", "123.", False),
    ("leading dot", ".123", False),
    # letters
    ("alphabetic", "abc", False),
    ("alphanumeric", "12a3", False),
    ("letter at start", "a123", False),
    ("letter at end", "123a", False),
    ("uppercase letters", "ABC", False),
    ("mixed case", "12A3", False),
    # bases and exponents
    ("hexadecimal", "0x123", False),
    ("hex uppercase", "0X123", False),
    ("octal prefix", "0o777", False),
    ("binary prefix", "0b101", False),
    ("scientific notation", "1e5", False),
    ("scientific negative exp", "1e-5", False),
    ("scientific uppercase", "1E5", False),
    # separators
    ("underscore separator", "1_000", False),
    ("comma separator", "1,000", False),
    ("period separator", "1.000", False),
    ("apostrophe separator", "1'000", False),
    # sign placement
    ("double minus", "--123", False),
    ("double plus", "++123", False),
    ("plus minus", "+-123", False),
    ("minus plus", "-+123", False),
    ("minus at end", "123-", False),
    ("minus in middle", "12-3", False),
    ("plus at end", "123+", False),
    ("plus in middle", "12+3", False),
    # control characters
    ("tab character at start", "\t123", False),
    ("tab character at end", "123\t", False),
    ("newline character", "123\n", False),
    ("carriage return", "123\r", False),
    ("null character", "123\x00", False),
    ("vertical tab", "123\v", False),
    ("form feed", "123\f", False),
    # punctuation
    ("parentheses", "(123)", False),
    ("brackets", "[123]", False),
    ("braces", "{123}", False),
    ("dollar sign", "$123", False),
    ("percent sign", "123%", False),
    ("hash", "#123", False),
    ("at sign", "@123", False),
    ("ampersand", "&123", False),
    ("asterisk", "*123", False),
    ("slash", "12/3", False),
    ("backslash", "12\\3", False),
    ("pipe", "12|3", False),
    ("semicolon", "12;3", False),
    ("colon", "12:3", False),
    ("question mark", "12?3", False),
    ("exclamation", "12!3", False),
    ("tilde", "~123", False),
    ("backtick", "`123", False),
    ("single quote", "'123'", False),
    ("double quote", '"123"', False),
    # unicode
    ("unicode minus", "\u2212123", False),
    ("unicode digit", "\uff11\uff12\uff13", False),  # fullwidth digits
    ("arabic digits", "\u0661\u0662\u0663", False),  # Arabic-Indic digits
    ("chinese characters", "一二三", False),
    ("superscript", "123\u2074", False),
    ("subscript", "123\u2084", False),
    # extra (not upstream): a leading newline must not slip through `$`-style matching
    ("newline then digits", "\n123", False),
    ("digits then newline only", "5\n", False),
]


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    IS_DECIMAL_INTEGER_CASES,
    ids=[c[0] for c in IS_DECIMAL_INTEGER_CASES],
)
def test_is_decimal_integer(name: str, value: str, valid: bool) -> None:
    errs = is_decimal_integer(value)
    if valid:
        assert errs == []
    elif value == "":
        assert errs == [EMPTY_ERROR]
    else:
        assert errs == [DECIMAL_INTEGER_ERROR]


def test_is_decimal_integer_error_texts() -> None:
    assert EMPTY_ERROR == "must be non-empty"
    assert DECIMAL_INTEGER_ERROR == "must be a valid decimal integer in canonical form"


@pytest.mark.parametrize("value", ["+123", "0700", "01"])
def test_parseint_accepts_what_is_decimal_integer_rejects(value: str) -> None:
    """Upstream: 'strconv.ParseInt accepts things we reject (proving we're stricter)'."""
    go_parse_int64(value)
    assert is_decimal_integer(value) != []
    assert parse_canonical_int64(value) is None


# --------------------------------------------------------------------------------------------
# TestCompareNumericValues (core/v1 toleration_test.go): (operator, toleration, taint, expected)
# --------------------------------------------------------------------------------------------

COMPARE_NUMERIC_CASES = [
    ("Gt", "100", "200", True),
    ("Gt", "200", "100", False),
    ("Gt", "100", "100", False),
    ("Gt", "-100", "-50", True),
    ("Gt", "-50", "-100", False),
    ("Gt", "0", "1", True),
    ("Gt", "9223372036854775806", "9223372036854775807", True),
    ("Lt", "200", "100", True),
    ("Lt", "100", "200", False),
    ("Lt", "100", "100", False),
    ("Lt", "-50", "-100", True),
    ("Lt", "-100", "-50", False),
    ("Lt", "0", "-1", True),
    # invalid toleration values
    ("Gt", "abc", "100", False),
    ("Gt", "", "100", False),
    ("Gt", "0100", "200", False),
    ("Gt", "+100", "200", False),
    ("Gt", "100.5", "200", False),
    ("Gt", "-", "100", False),
    # invalid taint values
    ("Gt", "100", "xyz", False),
    ("Gt", "100", "", False),
    ("Gt", "100", "0200", False),
    ("Lt", "100", "+200", False),
    ("Lt", "100", " 200 ", False),
    # unsupported operators
    ("Equal", "100", "100", False),
    ("Exists", "100", "100", False),
    # zero edge cases
    ("Gt", "0", "0", False),
    ("Lt", "0", "0", False),
    # int64 bounds
    ("Gt", "0", "9223372036854775807", True),
    ("Lt", "0", "-9223372036854775808", True),
]


@pytest.mark.parametrize(("op", "toleration", "taint", "expected"), COMPARE_NUMERIC_CASES)
def test_compare_numeric_upstream(op: str, toleration: str, taint: str, expected: bool) -> None:
    assert compare_numeric(op, toleration, taint) is expected


# Value part of TestTolerationToleratesTaint (gate on): (operator, toleration, taint, tolerated)
TOLERATES_TAINT_NUMERIC_CASES = [
    ("Gt", "950", "800", False),
    ("Gt", "750", "950", True),
    ("Lt", "800", "950", False),
    ("Lt", "950", "800", True),
    ("Gt", "950", "950", False),
    ("Gt", "950", "high", False),
    ("Gt", "-100", "-200", False),
    ("Gt", "9223372036854775806", "100", False),
]


@pytest.mark.parametrize(("op", "toleration", "taint", "expected"), TOLERATES_TAINT_NUMERIC_CASES)
def test_compare_numeric_toleration_table(
    op: str, toleration: str, taint: str, expected: bool
) -> None:
    assert compare_numeric(op, toleration, taint) is expected


# Spec §3.3 matching examples.
SPEC_MATCHING_EXAMPLES = [
    ("Gt", "750", "800", True),
    ("Gt", "800", "800", False),
    ("Lt", "800", "750", True),
    ("Gt", "0100", "200", False),
    ("Gt", "100", "0200", False),
    ("Gt", "-1", "0", True),
    ("Gt", "100", "+200", False),
]


@pytest.mark.parametrize(("op", "toleration", "taint", "expected"), SPEC_MATCHING_EXAMPLES)
def test_compare_numeric_spec_examples(
    op: str, toleration: str, taint: str, expected: bool
) -> None:
    assert compare_numeric(op, toleration, taint) is expected


@pytest.mark.parametrize("op", ["gt", "lt", "GT", "Gte", "", "SemverGt", "Equal", "Exists"])
def test_compare_numeric_other_operators_never_match(op: str) -> None:
    assert compare_numeric(op, "1", "2") is False
    assert compare_numeric(op, "2", "1") is False


# Spec §3.3 outcome table: value -> (ParseInt alone, usable for Gt/Lt).
# ParseInt column: int, "range" or "syntax".
SPEC_OUTCOME_TABLE = [
    ("0", 0, True),
    ("950", 950, True),
    ("-5", -5, True),
    ("-0", 0, False),
    ("+5", 5, False),
    ("05", 5, False),
    ("0100", 100, False),
    ("9223372036854775807", INT64_MAX, True),
    ("9223372036854775808", "range", False),
    ("-9223372036854775808", INT64_MIN, True),
    ("12345678901234567890", "range", False),
    (" 5", "syntax", False),
    ("5 ", "syntax", False),
    ("1_000", "syntax", False),
    ("1e3", "syntax", False),
    ("0x10", "syntax", False),
    ("12.0", "syntax", False),
    ("abc", "syntax", False),
    ("", "syntax", False),
]


@pytest.mark.parametrize(("value", "parse_int", "usable"), SPEC_OUTCOME_TABLE)
def test_spec_outcome_table(value: str, parse_int: int | str, usable: bool) -> None:
    if isinstance(parse_int, int):
        assert go_parse_int64(value) == parse_int
    else:
        with pytest.raises(GoNumError) as info:
            go_parse_int64(value)
        expected_err = "value out of range" if parse_int == "range" else "invalid syntax"
        assert str(info.value) == f'strconv.ParseInt: parsing "{value}": {expected_err}'
    result = parse_canonical_int64(value)
    if usable:
        assert result == parse_int
    else:
        assert result is None


# --------------------------------------------------------------------------------------------
# Go strconv.ParseInt / ParseUint edge cases: (input, value or exact error message)
# --------------------------------------------------------------------------------------------

PARSE_INT_CASES: list[tuple[str, int | str]] = [
    ("0", 0),
    ("-0", 0),
    ("+0", 0),
    ("1", 1),
    ("-1", -1),
    ("+1", 1),
    ("007", 7),
    ("-007", -7),
    ("00000000000000000000000000000000000001", 1),
    ("9223372036854775807", INT64_MAX),
    ("+9223372036854775807", INT64_MAX),
    ("-9223372036854775808", INT64_MIN),
    ("0009223372036854775807", INT64_MAX),
    ("9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    (
        "-9223372036854775809",
        'strconv.ParseInt: parsing "-9223372036854775809": value out of range',
    ),
    (
        "18446744073709551615",
        'strconv.ParseInt: parsing "18446744073709551615": value out of range',
    ),
    (
        "18446744073709551616",
        'strconv.ParseInt: parsing "18446744073709551616": value out of range',
    ),
    ("1" * 5000, f'strconv.ParseInt: parsing "{"1" * 5000}": value out of range'),
    ("", 'strconv.ParseInt: parsing "": invalid syntax'),
    ("-", 'strconv.ParseInt: parsing "-": invalid syntax'),
    ("+", 'strconv.ParseInt: parsing "+": invalid syntax'),
    ("+-1", 'strconv.ParseInt: parsing "+-1": invalid syntax'),
    ("--1", 'strconv.ParseInt: parsing "--1": invalid syntax'),
    (" 1", 'strconv.ParseInt: parsing " 1": invalid syntax'),
    ("1 ", 'strconv.ParseInt: parsing "1 ": invalid syntax'),
    ("1\n", 'strconv.ParseInt: parsing "1\\n": invalid syntax'),
    ("\t1", 'strconv.ParseInt: parsing "\\t1": invalid syntax'),
    ("1_000", 'strconv.ParseInt: parsing "1_000": invalid syntax'),
    ("0x10", 'strconv.ParseInt: parsing "0x10": invalid syntax'),
    ("0o7", 'strconv.ParseInt: parsing "0o7": invalid syntax'),
    ("0b1", 'strconv.ParseInt: parsing "0b1": invalid syntax'),
    ("1e3", 'strconv.ParseInt: parsing "1e3": invalid syntax'),
    ("12.0", 'strconv.ParseInt: parsing "12.0": invalid syntax'),
    ("abc", 'strconv.ParseInt: parsing "abc": invalid syntax'),
    ("\u0661\u0662", 'strconv.ParseInt: parsing "\u0661\u0662": invalid syntax'),
    ("\uff11", 'strconv.ParseInt: parsing "\uff11": invalid syntax'),
    ("1\u00a0", 'strconv.ParseInt: parsing "1\\u00a0": invalid syntax'),
    ('1"', 'strconv.ParseInt: parsing "1\\"": invalid syntax'),
    ("1\\", 'strconv.ParseInt: parsing "1\\\\": invalid syntax'),
    # Go reports overflow as soon as it happens, before seeing a later bad character.
    (
        "99999999999999999999x",
        'strconv.ParseInt: parsing "99999999999999999999x": value out of range',
    ),
    (
        "-99999999999999999999x",
        'strconv.ParseInt: parsing "-99999999999999999999x": value out of range',
    ),
    # ...but only past uint64: this prefix fits uint64, so the 'x' is a syntax error.
    (
        "9223372036854775808x",
        'strconv.ParseInt: parsing "9223372036854775808x": invalid syntax',
    ),
]


@pytest.mark.parametrize(("value", "expected"), PARSE_INT_CASES, ids=lambda v: repr(v)[:40])
def test_go_parse_int64(value: str, expected: int | str) -> None:
    if isinstance(expected, int):
        assert go_parse_int64(value) == expected
    else:
        with pytest.raises(GoNumError) as info:
            go_parse_int64(value)
        assert str(info.value) == expected
        assert info.value.func == "ParseInt"
        assert info.value.num == value


def test_go_parse_int64_range_error_carries_clamped_value() -> None:
    with pytest.raises(GoNumError) as pos:
        go_parse_int64("9223372036854775808")
    assert pos.value.is_range_error and pos.value.value == INT64_MAX
    with pytest.raises(GoNumError) as neg:
        go_parse_int64("-9223372036854775809")
    assert neg.value.is_range_error and neg.value.value == INT64_MIN
    with pytest.raises(GoNumError) as syn:
        go_parse_int64("x")
    assert not syn.value.is_range_error and syn.value.value == 0


def test_gonumerror_is_valueerror() -> None:
    with pytest.raises(ValueError):
        go_parse_int64("nope")


PARSE_UINT_CASES: list[tuple[str, int | str]] = [
    ("0", 0),
    ("00", 0),
    ("18446744073709551615", UINT64_MAX),
    ("018446744073709551615", UINT64_MAX),
    (
        "18446744073709551616",
        'strconv.ParseUint: parsing "18446744073709551616": value out of range',
    ),
    ("", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("+1", 'strconv.ParseUint: parsing "+1": invalid syntax'),
    ("-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
    ("-0", 'strconv.ParseUint: parsing "-0": invalid syntax'),
    ("1_0", 'strconv.ParseUint: parsing "1_0": invalid syntax'),
    (" 1", 'strconv.ParseUint: parsing " 1": invalid syntax'),
    ("\u0661", 'strconv.ParseUint: parsing "\u0661": invalid syntax'),
    (
        "20000000000000000000.1",
        'strconv.ParseUint: parsing "20000000000000000000.1": value out of range',
    ),
]


@pytest.mark.parametrize(("value", "expected"), PARSE_UINT_CASES)
def test_go_parse_uint64(value: str, expected: int | str) -> None:
    if isinstance(expected, int):
        assert go_parse_uint64(value) == expected
    else:
        with pytest.raises(GoNumError) as info:
            go_parse_uint64(value)
        assert str(info.value) == expected
        assert info.value.func == "ParseUint"


# --------------------------------------------------------------------------------------------
# go_quote (strconv.Quote)
# --------------------------------------------------------------------------------------------

GO_QUOTE_CASES = [
    ("", '""'),
    ("abc", '"abc"'),
    ("a b", '"a b"'),
    ('a"b', '"a\\"b"'),
    ("a\\b", '"a\\\\b"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),
    ("é", '"é"'),
    ("日本", '"日本"'),
    ("\u00a0", '"\\u00a0"'),  # NBSP is not printable for Go
    ("\u00ad", '"\\u00ad"'),  # soft hyphen (Cf)
    ("\u2028", '"\\u2028"'),
    ("\u0085", '"\\u0085"'),
    ("\U0001f600", '"\U0001f600"'),  # emoji is a printable symbol
    ("\U000e0001", '"\\U000e0001"'),  # language tag (Cf)
    ("\ufffd", '"\ufffd"'),
]


@pytest.mark.parametrize(("value", "expected"), GO_QUOTE_CASES)
def test_go_quote(value: str, expected: str) -> None:
    assert go_quote(value) == expected


# --------------------------------------------------------------------------------------------
# why_not_numeric
# --------------------------------------------------------------------------------------------

WHY_NOT_CASES: list[tuple[str, str, str | None]] = [
    ("100", "200", None),
    ("100", "100", None),  # both parse; equality is the comparison's business
    ("-5", "0", None),
    ("0100", "200", 'toleration value "0100" is not a canonical decimal integer'),
    ("100", "9223372036854775808", 'taint value "9223372036854775808" is out of int64 range'),
    (
        "-9223372036854775809",
        "1",
        'toleration value "-9223372036854775809" is out of int64 range',
    ),
    ("100", "+200", 'taint value "+200" is not a canonical decimal integer'),
    ("100", " 200 ", 'taint value " 200 " is not a canonical decimal integer'),
    ("", "1", 'toleration value "" is empty, not a decimal integer'),
    (
        "abc",
        "high",
        'toleration value "abc" is not a canonical decimal integer; '
        'taint value "high" is not a canonical decimal integer',
    ),
    ("1", "a\nb", 'taint value "a\\nb" is not a canonical decimal integer'),
]


@pytest.mark.parametrize(("toleration", "taint", "expected"), WHY_NOT_CASES)
def test_why_not_numeric(toleration: str, taint: str, expected: str | None) -> None:
    assert why_not_numeric(toleration, taint) == expected


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

_INT64 = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
_NUMERIC_ALPHABET = st.sampled_from(list("0123456789-+ _.xe\t\n\u0661\uff11\u00a0"))
_NUMERIC_TEXT = st.text(_NUMERIC_ALPHABET, max_size=24)
_NEAR_BOUNDS = st.sampled_from(
    [INT64_MIN - 1, INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX, INT64_MAX + 1]
).map(str)
_MANGLED_INTS = st.tuples(
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from(["", "+", "0", "00", "-0", " ", "_"]),
    st.sampled_from(["", " ", "\n", "0", "_1"]),
).map(lambda t: f"{t[1]}{t[0]}{t[2]}")
_ANY_NUMERIC_STRING = st.one_of(_NUMERIC_TEXT, _NEAR_BOUNDS, _MANGLED_INTS, _INT64.map(str))


def _oracle_canonical(s: str) -> int | None:
    """Usable iff s is exactly Python's rendering of some int64 other than the string '-0'."""
    if not re.fullmatch(r"-?[0-9]+", s, flags=re.ASCII):
        return None
    n = int(s)
    if str(n) != s or not INT64_MIN <= n <= INT64_MAX:
        return None
    return n


def _oracle_go_parse_int(s: str) -> int | str:
    """Literal transliteration of Go's byte loop; returns the value or 'syntax'/'range'."""
    if s == "":
        return "syntax"
    neg = s[0] == "-"
    body = s[1:] if s[0] in "+-" else s
    if body == "":
        return "syntax"
    n = 0
    overflow = False
    for ch in body.encode("utf-8"):
        if not 0x30 <= ch <= 0x39:
            return "syntax"
        n = n * 10 + (ch - 0x30)
        if n > UINT64_MAX:
            overflow = True
            break
    if overflow:
        return "range"
    if (not neg and n > INT64_MAX) or (neg and n > -INT64_MIN):
        return "range"
    return -n if neg else n


@given(_ANY_NUMERIC_STRING)
@example("-0")
@example("9223372036854775808")
@example("-9223372036854775808")
def test_parse_canonical_int64_agrees_with_oracle(s: str) -> None:
    assert parse_canonical_int64(s) == _oracle_canonical(s)
    # Definition from the spec: IsDecimalInteger then ParseInt.
    expected: int | None
    if is_decimal_integer(s):
        expected = None
    else:
        try:
            expected = go_parse_int64(s)
        except GoNumError:
            expected = None
    assert parse_canonical_int64(s) == expected


@given(_ANY_NUMERIC_STRING)
@example("99999999999999999999x")
@example("18446744073709551616x")
def test_go_parse_int64_agrees_with_byte_loop_oracle(s: str) -> None:
    expected = _oracle_go_parse_int(s)
    if isinstance(expected, int):
        assert go_parse_int64(s) == expected
    else:
        with pytest.raises(GoNumError) as info:
            go_parse_int64(s)
        assert info.value.err == ("value out of range" if expected == "range" else "invalid syntax")


@given(_INT64)
def test_go_parse_int64_round_trips_every_int64(n: int) -> None:
    assert go_parse_int64(str(n)) == n
    assert parse_canonical_int64(str(n)) == n
    assert is_decimal_integer(str(n)) == []


@given(st.integers(min_value=0, max_value=INT64_MAX), st.integers(min_value=1, max_value=5))
def test_go_parse_int64_accepts_plus_and_leading_zeros(n: int, zeros: int) -> None:
    assert go_parse_int64("+" + str(n)) == n
    assert go_parse_int64("0" * zeros + str(n)) == n
    assert go_parse_int64("-" + "0" * zeros + str(n)) == -n
    assert parse_canonical_int64("+" + str(n)) is None
    assert parse_canonical_int64("0" * zeros + str(n)) is None


@given(
    st.one_of(
        st.integers(max_value=INT64_MIN - 1),
        st.integers(min_value=INT64_MAX + 1),
    )
)
def test_out_of_range_is_range_error(n: int) -> None:
    with pytest.raises(GoNumError) as info:
        go_parse_int64(str(n))
    assert info.value.is_range_error
    assert parse_canonical_int64(str(n)) is None


@given(_INT64, _INT64)
def test_compare_numeric_matches_integer_order(tol: int, taint: int) -> None:
    assert compare_numeric("Gt", str(tol), str(taint)) is (taint > tol)
    assert compare_numeric("Lt", str(tol), str(taint)) is (taint < tol)
    assert why_not_numeric(str(tol), str(taint)) is None


@given(_ANY_NUMERIC_STRING, _ANY_NUMERIC_STRING)
def test_compare_numeric_false_when_either_side_unusable(tol: str, taint: str) -> None:
    t1, t2 = _oracle_canonical(tol), _oracle_canonical(taint)
    if t1 is None or t2 is None:
        assert compare_numeric("Gt", tol, taint) is False
        assert compare_numeric("Lt", tol, taint) is False
        assert why_not_numeric(tol, taint) is not None
    else:
        assert compare_numeric("Gt", tol, taint) is (t2 > t1)
        assert compare_numeric("Lt", tol, taint) is (t2 < t1)


@given(st.text(max_size=30))
def test_go_quote_round_trips_through_python_for_ascii(s: str) -> None:
    quoted = go_quote(s)
    assert quoted.startswith('"') and quoted.endswith('"')
    if s.isascii():
        # For ASCII, Go's escapes are a subset of Python's string-literal escapes.
        assert ast.literal_eval(quoted) == s
