"""Tests for extender.matching.semver (blang/semver v4 semantics, KEP-5721 operators).

Data: spec §4.4 table (Parse and ParseTolerant columns), §4.3 comparison chain, blang's own
``v4/semver_test.go`` tables, KEP-5721 examples.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.matching.semver import (
    SemverError,
    Version,
    compare,
    compare_semver,
    parse,
    parse_tolerant,
    parse_tolerant_cached,
    try_parse_tolerant,
    why_not_semver,
)

V = Version

# --------------------------------------------------------------------------------------------
# Spec §4.4: input -> (Parse result, ParseTolerant result).  A result is either a Version
# (compared structurally, build included) or the exact error message.
# --------------------------------------------------------------------------------------------

_SAME = object()

SPEC_TABLE: list[tuple[str, Version | str, Version | str | object]] = [
    ("1.2.3", V(1, 2, 3), _SAME),
    ("v1.2.3", 'Invalid character(s) found in major number "v1"', V(1, 2, 3)),
    (
        "V1.2.3",
        'Invalid character(s) found in major number "V1"',
        'Invalid character(s) found in major number "0V1"',
    ),
    (" v1.2.3 ", 'Invalid character(s) found in major number " v1"', V(1, 2, 3)),
    (
        "vv1.2.3",
        'Invalid character(s) found in major number "vv1"',
        'Invalid character(s) found in major number "0v1"',
    ),
    ("1.2", "No Major.Minor.Patch elements found", V(1, 2, 0)),
    ("1", "No Major.Minor.Patch elements found", V(1, 0, 0)),
    ("v1.35", "No Major.Minor.Patch elements found", V(1, 35, 0)),
    ("01", "No Major.Minor.Patch elements found", V(1, 0, 0)),
    ("", "Version string empty", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("  ", "No Major.Minor.Patch elements found", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.2.3.4", 'Invalid character(s) found in patch number "3.4"', _SAME),
    ("01.02.03", 'Major number must not contain leading zeroes "01"', V(1, 2, 3)),
    ("1.02.3", 'Minor number must not contain leading zeroes "02"', V(1, 2, 3)),
    ("1.2.03", 'Patch number must not contain leading zeroes "03"', V(1, 2, 3)),
    ("00.0.0", 'Major number must not contain leading zeroes "00"', V(0, 0, 0)),
    ("1.2.03-rc.1", 'Patch number must not contain leading zeroes "03"', V(1, 2, 3, ("rc", 1))),
    ("1.2.3-alpha", V(1, 2, 3, ("alpha",)), _SAME),
    ("1.2.3-alpha.1", V(1, 2, 3, ("alpha", 1)), _SAME),
    ("1.2.3-0.3.7", V(1, 2, 3, (0, 3, 7)), _SAME),
    ("1.2.3-01", 'Numeric PreRelease version must not contain leading zeroes "01"', _SAME),
    ("1.2.3-rc.01", 'Numeric PreRelease version must not contain leading zeroes "01"', _SAME),
    ("1.2.3+build.1", V(1, 2, 3, (), ("build", "1")), _SAME),
    ("1.2.3-rc.1+build.5", V(1, 2, 3, ("rc", 1), ("build", "5")), _SAME),
    (
        "1.2.3-beta+exp.sha.5114f85",
        V(1, 2, 3, ("beta",), ("exp", "sha", "5114f85")),
        _SAME,
    ),
    (
        "1.2-beta",
        "No Major.Minor.Patch elements found",
        "Short version cannot contain PreRelease/Build meta data",
    ),
    (
        "1.2+meta",
        "No Major.Minor.Patch elements found",
        "Short version cannot contain PreRelease/Build meta data",
    ),
    ("1.2.3-", "Prerelease is empty", _SAME),
    ("1.2.3+", "Build meta data is empty", _SAME),
    ("1.2.3-alpha..1", "Prerelease is empty", _SAME),
    ("1.2.3-al_pha", 'Invalid character(s) found in prerelease "al_pha"', _SAME),
    ("1.2.3+a+b", 'Invalid character(s) found in build meta data "a+b"', _SAME),
    ("1.2.x", 'Invalid character(s) found in patch number "x"', _SAME),
    ("1.2.3 ", 'Invalid character(s) found in patch number "3 "', V(1, 2, 3)),
    (
        "1.2. 3",
        'Invalid character(s) found in patch number " 3"',
        'Invalid character(s) found in patch number "0 3"',
    ),
    (
        "-1.2.3",
        'Invalid character(s) found in major number "-1"',
        'Invalid character(s) found in major number "0-1"',
    ),
    ("1..3", 'strconv.ParseUint: parsing "": invalid syntax', _SAME),
    ("18446744073709551615.0.0", V(18446744073709551615, 0, 0), _SAME),
    (
        "18446744073709551616.0.0",
        'strconv.ParseUint: parsing "18446744073709551616": value out of range',
        _SAME,
    ),
    ("0.0.0", V(0, 0, 0), _SAME),
]


def _check(fn, value: str, expected: Version | str) -> None:  # type: ignore[no-untyped-def]
    if isinstance(expected, Version):
        got = fn(value)
        assert got.identical(expected), f"{got!r} != {expected!r}"
    else:
        with pytest.raises(SemverError) as info:
            fn(value)
        assert str(info.value) == expected


@pytest.mark.parametrize(
    ("value", "strict", "tolerant"), SPEC_TABLE, ids=[repr(c[0]) for c in SPEC_TABLE]
)
def test_spec_table_parse(value: str, strict: Version | str, tolerant: object) -> None:
    _check(parse, value, strict)


@pytest.mark.parametrize(
    ("value", "strict", "tolerant"), SPEC_TABLE, ids=[repr(c[0]) for c in SPEC_TABLE]
)
def test_spec_table_parse_tolerant(value: str, strict: Version | str, tolerant: object) -> None:
    expected = strict if tolerant is _SAME else tolerant
    assert isinstance(expected, (Version, str))
    _check(parse_tolerant, value, expected)
    _check(parse_tolerant_cached, value, expected)
    _check(parse_tolerant_cached, value, expected)  # second call served from the cache


def test_spec_string_normalisation() -> None:
    assert str(parse_tolerant("v01.2")) == "1.2.0"
    assert str(parse_tolerant(" v1.35 ")) == "1.35.0"
    assert str(parse("1.2.3-rc.1+build.5")) == "1.2.3-rc.1+build.5"


# --------------------------------------------------------------------------------------------
# Spec §4.3 comparison chain and checks
# --------------------------------------------------------------------------------------------

CHAIN = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
]


@pytest.mark.parametrize(("i", "j"), list(itertools.combinations(range(len(CHAIN)), 2)))
def test_spec_chain_all_pairs(i: int, j: int) -> None:
    a, b = parse(CHAIN[i]), parse(CHAIN[j])
    assert compare(a, b) == -1
    assert compare(b, a) == 1
    assert a < b and b > a and a != b and a <= b and b >= a


def test_spec_chain_sorts() -> None:
    shuffled = [parse(s) for s in reversed(CHAIN)]
    assert [str(v) for v in sorted(shuffled)] == CHAIN
    assert [str(v) for v in sorted(shuffled, key=Version.sort_key)] == CHAIN


SPEC_COMPARE_CHECKS = [
    ("1.0.0-1", "1.0.0-a", -1),  # numeric < alphanumeric
    ("1.0.0-Alpha", "1.0.0-alpha", -1),  # bytewise: 'A' < 'a'
    ("1.0.0--", "1.0.0-0a", -1),  # '-' < digits
    ("1.0.0-0a", "1.0.0-A", -1),  # digits < upper case
    ("1.0.0-2", "1.0.0-10", -1),  # numeric identifiers compare numerically
    ("1.0.0-a2", "1.0.0-a10", 1),  # alphanumerics compare bytewise
    ("1.10.0", "1.9.0", 1),
    ("1.0.0+build", "1.0.0", 0),
    ("1.0.0+a", "1.0.0+b", 0),
    ("1.0.0-rc.1+a", "1.0.0-rc.1+b", 0),
    ("18446744073709551615.0.0", "18446744073709551614.0.0", 1),
]


@pytest.mark.parametrize(("a", "b", "expected"), SPEC_COMPARE_CHECKS)
def test_spec_compare_checks(a: str, b: str, expected: int) -> None:
    va, vb = parse(a), parse(b)
    assert compare(va, vb) == expected
    assert compare(vb, va) == -expected
    assert va.compare(vb) == expected
    assert (va == vb) is (expected == 0)


def test_build_ignored_by_eq_and_hash_but_not_identical() -> None:
    a, b = parse("1.0.0+a"), parse("1.0.0+b")
    assert a == b and hash(a) == hash(b)
    assert not a.identical(b)
    assert len({a, b, parse("1.0.0")}) == 1


def test_identifier_kind_matters() -> None:
    """blang PRVersion{IsNum}: a hand-built string identifier '1' is not the number 1."""
    num, txt = V(1, 0, 0, (1,)), V(1, 0, 0, ("1",))
    assert compare(num, txt) == -1
    assert num != txt
    assert not num.identical(txt)


def test_comparison_with_other_types() -> None:
    assert (parse("1.0.0") == "1.0.0") is False
    with pytest.raises(TypeError):
        _ = parse("1.0.0") < "1.0.0"  # type: ignore[operator]


# --------------------------------------------------------------------------------------------
# blang v4 semver_test.go tables
# --------------------------------------------------------------------------------------------

BLANG_FORMAT_TESTS = [
    (V(1, 2, 3), "1.2.3"),
    (V(0, 0, 1), "0.0.1"),
    (V(0, 0, 1, ("alpha", "preview"), ("123", "456")), "0.0.1-alpha.preview+123.456"),
    (V(1, 2, 3, ("alpha", 1), ("123", "456")), "1.2.3-alpha.1+123.456"),
    (V(1, 2, 3, ("alpha", 1)), "1.2.3-alpha.1"),
    (V(1, 2, 3, (), ("123", "456")), "1.2.3+123.456"),
    (V(1, 2, 3, ("alpha", "b-eta"), ("123", "b-uild")), "1.2.3-alpha.b-eta+123.b-uild"),
    (V(1, 2, 3, (), ("123", "b-uild")), "1.2.3+123.b-uild"),
    (V(1, 2, 3, ("alpha", "b-eta")), "1.2.3-alpha.b-eta"),
]


@pytest.mark.parametrize(("version", "text"), BLANG_FORMAT_TESTS)
def test_blang_stringer(version: Version, text: str) -> None:
    assert str(version) == text


@pytest.mark.parametrize(("version", "text"), BLANG_FORMAT_TESTS)
def test_blang_parse(version: Version, text: str) -> None:
    got = parse(text)
    assert compare(got, version) == 0
    assert got.identical(version)


BLANG_TOLERANT_FORMAT_TESTS = [
    (V(1, 2, 3), "v1.2.3"),
    (V(1, 2, 0, ("alpha",)), "1.2.0-alpha"),
    (V(1, 2, 0), "1.2.00"),
    (V(1, 2, 3), "\t1.2.3 "),
    (V(1, 2, 3), "01.02.03"),
    (V(0, 0, 3), "00.0.03"),
    (V(0, 0, 3), "000.0.03"),
    (V(1, 2, 0), "1.2"),
    (V(1, 0, 0), "1"),
]


@pytest.mark.parametrize(("version", "text"), BLANG_TOLERANT_FORMAT_TESTS)
def test_blang_parse_tolerant(version: Version, text: str) -> None:
    assert parse_tolerant(text).identical(version)


def _pv(*pre: int | str) -> tuple[int | str, ...]:
    return pre


BLANG_COMPARE_TESTS = [
    (V(1, 0, 0), V(1, 0, 0), 0),
    (V(2, 0, 0), V(1, 0, 0), 1),
    (V(0, 1, 0), V(0, 1, 0), 0),
    (V(0, 2, 0), V(0, 1, 0), 1),
    (V(0, 0, 1), V(0, 0, 1), 0),
    (V(0, 0, 2), V(0, 0, 1), 1),
    (V(1, 2, 3), V(1, 2, 3), 0),
    (V(2, 2, 4), V(1, 2, 4), 1),
    (V(1, 3, 3), V(1, 2, 3), 1),
    (V(1, 2, 4), V(1, 2, 3), 1),
    # Spec examples #11
    (V(1, 0, 0), V(2, 0, 0), -1),
    (V(2, 0, 0), V(2, 1, 0), -1),
    (V(2, 1, 0), V(2, 1, 1), -1),
    # Spec examples #9
    (V(1, 0, 0), V(1, 0, 0, _pv("alpha")), 1),
    (V(1, 0, 0, _pv("alpha")), V(1, 0, 0, _pv("alpha", 1)), -1),
    (V(1, 0, 0, _pv("alpha", 1)), V(1, 0, 0, _pv("alpha", "beta")), -1),
    (V(1, 0, 0, _pv("alpha", "beta")), V(1, 0, 0, _pv("beta")), -1),
    (V(1, 0, 0, _pv("beta")), V(1, 0, 0, _pv("beta", 2)), -1),
    (V(1, 0, 0, _pv("beta", 2)), V(1, 0, 0, _pv("beta", 11)), -1),
    (V(1, 0, 0, _pv("beta", 11)), V(1, 0, 0, _pv("rc", 1)), -1),
    (V(1, 0, 0, _pv("rc", 1)), V(1, 0, 0), -1),
    # Ignore build metadata
    (V(1, 0, 0, (), ("1", "2", "3")), V(1, 0, 0), 0),
]


@pytest.mark.parametrize(("a", "b", "expected"), BLANG_COMPARE_TESTS)
def test_blang_compare(a: Version, b: Version, expected: int) -> None:
    assert compare(a, b) == expected
    assert compare(b, a) == -expected


BLANG_WRONG_FORMAT = [
    "",
    ".",
    "1.",
    ".1",
    "a.b.c",
    "1.a.b",
    "1.1.a",
    "1.a.1",
    "a.1.1",
    "..",
    "1..",
    "1.1.",
    "1..1",
    "1.1.+123",
    "1.1.-beta",
    "-1.1.1",
    "1.-1.1",
    "1.1.-1",
    "20000000000000000000.1.1",
    "1.20000000000000000000.1",
    "1.1.20000000000000000000",
    "1.1.1-20000000000000000000",
    "01.1.1",
    "001.1.1",
    "1.01.1",
    "1.001.1",
    "1.1.01",
    "1.1.001",
    "1.1.1-01",
    "1.1.1-001",
    "1.1.1-beta.01",
    "1.1.1-beta.001",
    "0.0.0-!",
    "0.0.0+!",
    "0.0.0-.alpha",
    "0.0.0-alpha+",
    "0.0.0-alpha+test.",
]


@pytest.mark.parametrize("value", BLANG_WRONG_FORMAT)
def test_blang_wrong_format(value: str) -> None:
    with pytest.raises(SemverError):
        parse(value)


# Exact messages for a few of blang's wrong formats (derived from semver.go).
BLANG_WRONG_FORMAT_MESSAGES = [
    (".", "No Major.Minor.Patch elements found"),
    ("1.1.+123", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.1.-beta", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.-1.1", 'Invalid character(s) found in minor number "-1"'),
    ("1.1.-1", 'strconv.ParseUint: parsing "": invalid syntax'),
    (
        "1.20000000000000000000.1",
        'strconv.ParseUint: parsing "20000000000000000000": value out of range',
    ),
    (
        "1.1.1-20000000000000000000",
        'strconv.ParseUint: parsing "20000000000000000000": value out of range',
    ),
    ("001.1.1", 'Major number must not contain leading zeroes "001"'),
    ("1.1.001", 'Patch number must not contain leading zeroes "001"'),
    ("0.0.0-!", 'Invalid character(s) found in prerelease "!"'),
    ("0.0.0+!", 'Invalid character(s) found in build meta data "!"'),
    ("0.0.0-.alpha", "Prerelease is empty"),
    ("0.0.0-alpha+test.", "Build meta data is empty"),
    ("1.2.3+a-b", None),  # not an error: '-' after '+' belongs to build metadata
    ("1.2.3-a+b-c", None),
    ("1.2.3-é", 'Invalid character(s) found in prerelease "é"'),
    ("1.2.3-a\n", 'Invalid character(s) found in prerelease "a\\n"'),
    ("1.2.3\n", 'Invalid character(s) found in patch number "3\\n"'),
    ("1.2.\u0663", 'Invalid character(s) found in patch number "\u0663"'),
]


@pytest.mark.parametrize(("value", "message"), BLANG_WRONG_FORMAT_MESSAGES)
def test_parse_error_messages(value: str, message: str | None) -> None:
    if message is None:
        parse(value)
        return
    with pytest.raises(SemverError) as info:
        parse(value)
    assert str(info.value) == message


def test_dash_after_plus_is_build() -> None:
    v = parse("1.2.3+a-b")
    assert v.pre == () and v.build == ("a-b",)
    w = parse("1.2.3-a+b-c")
    assert w.pre == ("a",) and w.build == ("b-c",)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1.0+abc", "Short version cannot contain PreRelease/Build meta data"),
        # Three dot-separated parts, so not "short": minor "0-rc" becomes "0-rc" after the
        # zero-strip-and-reprefix step and fails the digit check.
        ("1.0-rc.1", 'Invalid character(s) found in minor number "0-rc"'),
    ],
)
def test_blang_wrong_tolerant_format(value: str, message: str) -> None:
    with pytest.raises(SemverError) as info:
        parse_tolerant(value)
    assert str(info.value) == message


def test_blang_compare_helpers() -> None:
    v = V(1, 0, 0, ("alpha",))
    v1 = V(1, 0, 0)
    assert v == v
    assert v1 != v
    assert v >= v and v <= v
    assert v < v1 and v <= v1
    assert v1 > v and v1 >= v


def test_prerelease_identifier_kinds() -> None:
    assert parse("1.0.0-123").pre == (123,)
    assert isinstance(parse("1.0.0-123").pre[0], int)
    assert parse("1.0.0-alpha").pre == ("alpha",)
    assert parse("1.0.0-0").pre == (0,)


# --------------------------------------------------------------------------------------------
# ParseTolerant specifics
# --------------------------------------------------------------------------------------------

TOLERANT_EXTRA: list[tuple[str, Version | str]] = [
    ("v", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("vv", 'Invalid character(s) found in major number "v"'),  # one byte left: no "0" prefix
    ("1.2.3-rc.01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
    ("1.02-rc", "Short version cannot contain PreRelease/Build meta data"),
    ("1-rc", "Short version cannot contain PreRelease/Build meta data"),
    ("v1.2.3-rc.1+b.7", V(1, 2, 3, ("rc", 1), ("b", "7"))),
    ("\u3000v1.2.3\u2003", V(1, 2, 3)),  # Go TrimSpace removes Unicode spaces
    ("\x85 1.2.3\xa0", V(1, 2, 3)),
    # U+001C..U+001F are not Go whitespace (Python's str.strip() would remove them).
    ("\x1c1.2.3", 'Invalid character(s) found in major number "0\\x1c1"'),
    ("\u200b1.2.3", 'Invalid character(s) found in major number "0\\u200b1"'),
    # One non-ASCII char is 2+ bytes in Go, so it gets the "0" prefix too.
    ("é.1.1", 'Invalid character(s) found in major number "0é"'),
    ("1.é", 'Invalid character(s) found in minor number "0é"'),
    ("a", 'Invalid character(s) found in major number "a"'),  # single byte: untouched
    ("1.2.3.4", 'Invalid character(s) found in patch number "3.4"'),
    ("0001.0002.0003-beta", V(1, 2, 3, ("beta",))),
    # KEP-5721's example: the prefix is not stripped and "0" gets prepended.
    ("containerd://2.1.4", 'Invalid character(s) found in major number "0containerd://2"'),
    ("v1.2.x", 'Invalid character(s) found in patch number "x"'),
]


@pytest.mark.parametrize(("value", "expected"), TOLERANT_EXTRA)
def test_parse_tolerant_extra(value: str, expected: Version | str) -> None:
    _check(parse_tolerant, value, expected)


def test_try_parse_tolerant() -> None:
    assert try_parse_tolerant("v1.2") == V(1, 2, 0)
    assert try_parse_tolerant("nope") is None


def test_cached_error_is_fresh_each_time() -> None:
    errors = []
    for _ in range(2):
        with pytest.raises(SemverError) as info:
            parse_tolerant_cached("1.2.x")
        errors.append(info.value)
    assert errors[0] is not errors[1]
    assert str(errors[0]) == str(errors[1]) == 'Invalid character(s) found in patch number "x"'


# --------------------------------------------------------------------------------------------
# Operators (spec §0.2, KEP-5721)
# --------------------------------------------------------------------------------------------

# (operator, taint-or-node-label value, toleration-or-requirement value, expected)
OPERATOR_CASES = [
    # KEP-5721 scoring example: toleration SemverGt v1.5.0 tolerates taint v2.0.0, not v1.0.0.
    ("SemverGt", "v2.0.0", "v1.5.0", True),
    ("SemverGt", "v1.0.0", "v1.5.0", False),
    # KEP Story 2: taint v3.27.2, toleration SemverLt v3.28.0 -> tolerated.
    ("SemverLt", "v3.27.2", "v3.28.0", True),
    ("SemverLt", "v3.28.0", "v3.28.0", False),
    # KEP Story 1: node label version SemverGt v1.31.99.
    ("SemverGt", "v1.32.0", "v1.31.99", True),
    ("SemverGt", "v1.31.5", "v1.31.99", False),
    # KEP Story 3 / 4.
    ("SemverGt", "2.1.4", "2.0.0", True),
    ("SemverGt", "1.6.36", "2.0.0", False),
    ("SemverGt", "6.1.0", "5.10.0", True),
    ("SemverGt", "5.9.0", "5.10.0", False),
    # KEP caveat: containerd:// prefix never parses -> no match for any operator.
    ("SemverLt", "containerd://2.1.4", "2.2.0", False),
    ("SemverGt", "containerd://2.1.4", "2.2.0", False),
    ("SemverEq", "containerd://2.1.4", "2.1.4", False),
    # Equality ignores build metadata and tolerant normalisation.
    ("SemverEq", "v1.2", "1.2.0", True),
    ("SemverEq", "1.2.3", "1.2.3+build.7", True),
    ("SemverEq", "01.02.03", "1.2.3", True),
    ("SemverEq", "1.2.3-rc.1", "1.2.3", False),
    # Pre-release ordering.
    ("SemverLt", "1.0.0-rc.1", "1.0.0", True),
    ("SemverGt", "1.0.0", "1.0.0-rc.1", True),
    ("SemverGt", "1.0.0-beta.11", "1.0.0-beta.2", True),
    # Strictness.
    ("SemverGt", "1.0.0", "1.0.0", False),
    ("SemverLt", "1.0.0", "1.0.0", False),
    # Parse failure on either side.
    ("SemverGt", "high", "1.0.0", False),
    ("SemverLt", "high", "1.0.0", False),
    ("SemverGt", "2.0.0", "", False),
    ("SemverEq", "", "", False),
    ("SemverEq", "V1.0.0", "V1.0.0", False),
    # Unknown operators.
    ("semvergt", "2.0.0", "1.0.0", False),
    ("Gt", "2.0.0", "1.0.0", False),
    ("SemverGe", "2.0.0", "1.0.0", False),
    ("", "1.0.0", "1.0.0", False),
]


@pytest.mark.parametrize(("op", "value", "requirement", "expected"), OPERATOR_CASES)
def test_compare_semver(op: str, value: str, requirement: str, expected: bool) -> None:
    assert compare_semver(op, value, requirement) is expected


WHY_NOT_CASES: list[tuple[str, str, str | None]] = [
    ("v2.0.0", "v1.5.0", None),
    ("1.0.0", "1.0.0", None),
    (
        "containerd://2.1.4",
        "2.2.0",
        'taint value "containerd://2.1.4" is not a valid semantic version: '
        'Invalid character(s) found in major number "0containerd://2"',
    ),
    (
        "1.0.0",
        "1.2-rc",
        'toleration value "1.2-rc" is not a valid semantic version: '
        "Short version cannot contain PreRelease/Build meta data",
    ),
    (
        "",
        "x.y.z",
        'taint value "" is not a valid semantic version: '
        'strconv.ParseUint: parsing "": invalid syntax; '
        'toleration value "x.y.z" is not a valid semantic version: '
        'Invalid character(s) found in major number "x"',
    ),
]


@pytest.mark.parametrize(("value", "requirement", "expected"), WHY_NOT_CASES)
def test_why_not_semver(value: str, requirement: str, expected: str | None) -> None:
    assert why_not_semver(value, requirement) == expected


def test_why_not_semver_custom_labels() -> None:
    got = why_not_semver(
        "latest", "1.0", value_label="node label value", requirement_label="requirement value"
    )
    assert got == (
        'node label value "latest" is not a valid semantic version: '
        'Invalid character(s) found in major number "0latest"'
    )


# --------------------------------------------------------------------------------------------
# Where the PyPI `semver` package disagrees (recorded; production code does not use it)
# --------------------------------------------------------------------------------------------


def test_pypi_semver_disagreements_are_recorded() -> None:
    import semver as pypi  # a test dependency only (pyproject: test extras)
    # 1. No tolerant mode: a leading "v", short versions and leading zeros are rejected,
    #    where blang ParseTolerant (which KEP-5721 uses) accepts them.
    for text, ours in [("v1.2.3", V(1, 2, 3)), ("1.2", V(1, 2, 0)), ("01.2.3", V(1, 2, 3))]:
        assert parse_tolerant(text) == ours
        with pytest.raises(ValueError):
            pypi.Version.parse(text)
    # 2. Its errors are generic; blang's messages (which we surface in explain) are specific.
    with pytest.raises(ValueError) as info:
        pypi.Version.parse("1.2.x")
    assert "Invalid character(s)" not in str(info.value)
    # 3. It accepts 20-digit numbers beyond uint64; blang reports a ParseUint range error.
    big = "18446744073709551616.0.0"
    assert pypi.Version.parse(big).major == 18446744073709551616
    with pytest.raises(SemverError):
        parse(big)
    # Where they agree: precedence of ordinary versions.
    assert pypi.Version.parse("1.0.0-Alpha").compare("1.0.0-alpha") == -1
    assert compare(parse("1.0.0-Alpha"), parse("1.0.0-alpha")) == -1


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

_NUM = st.one_of(
    st.integers(min_value=0, max_value=20), st.integers(min_value=0, max_value=2**64 - 1)
)
_ALNUM_ID = st.text(st.sampled_from(list("abcAZz-09")), min_size=1, max_size=5).filter(
    lambda s: not s.isdigit()
)
_PRE_ID = st.one_of(st.integers(min_value=0, max_value=12), _ALNUM_ID)
_BUILD_ID = st.text(st.sampled_from(list("ab9-0")), min_size=1, max_size=4)
VERSIONS = st.builds(
    Version,
    _NUM,
    _NUM,
    _NUM,
    st.lists(_PRE_ID, max_size=3).map(tuple),
    st.lists(_BUILD_ID, max_size=2).map(tuple),
)
SMALL_VERSIONS = st.builds(
    Version,
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(0, 2),
    st.lists(st.one_of(st.integers(0, 2), st.sampled_from(["a", "b", "A", "-"])), max_size=3).map(
        tuple
    ),
    st.lists(st.sampled_from(["x", "y"]), max_size=1).map(tuple),
)


@given(VERSIONS)
def test_round_trip_parse_and_tolerant(v: Version) -> None:
    s = str(v)
    assert parse(s).identical(v)
    assert parse_tolerant(s).identical(v)
    assert parse_tolerant("v" + s).identical(v)
    assert parse_tolerant(f" {s}\t") == v


@given(SMALL_VERSIONS, SMALL_VERSIONS)
def test_compare_antisymmetric_and_consistent(a: Version, b: Version) -> None:
    c = compare(a, b)
    assert c in (-1, 0, 1)
    assert compare(b, a) == -c
    assert (a.sort_key() < b.sort_key()) is (c < 0)
    assert (a.sort_key() == b.sort_key()) is (c == 0)
    assert (a == b) is (c == 0)
    if c == 0:
        assert hash(a) == hash(b)


@given(SMALL_VERSIONS, SMALL_VERSIONS, SMALL_VERSIONS)
def test_compare_transitive(a: Version, b: Version, c: Version) -> None:
    if compare(a, b) <= 0 and compare(b, c) <= 0:
        assert compare(a, c) <= 0


@given(st.lists(SMALL_VERSIONS, max_size=8))
def test_sorted_is_consistent_with_compare(vs: list[Version]) -> None:
    ordered = sorted(vs)
    assert all(compare(x, y) <= 0 for x, y in itertools.pairwise(ordered))
    assert [v.sort_key() for v in ordered] == sorted(v.sort_key() for v in vs)


@given(SMALL_VERSIONS, SMALL_VERSIONS)
def test_operators_agree_with_compare(a: Version, b: Version) -> None:
    sa, sb = str(a), str(b)
    c = compare(a, b)
    assert compare_semver("SemverGt", sa, sb) is (c > 0)
    assert compare_semver("SemverLt", sa, sb) is (c < 0)
    assert compare_semver("SemverEq", sa, sb) is (c == 0)


@given(st.text(max_size=20))
def test_parse_never_raises_anything_but_semver_error(s: str) -> None:
    for fn in (parse, parse_tolerant):
        try:
            v = fn(s)
        except SemverError:
            continue
        assert parse(str(v)).identical(v)
