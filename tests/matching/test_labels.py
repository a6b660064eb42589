"""Tests for extender.matching.labels (label key / label value / DNS-1123 subdomain syntax).

Tables ported as data from apimachinery ``content/kube_test.go`` (= ``TestIsQualifiedName``,
``TestIsValidLabelValue`` in ``util/validation``) and ``TestIsDNS1123Subdomain``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.matching.labels import (
    is_dns1123_subdomain,
    validate_label_key,
    validate_label_value,
)

KEY_REGEX_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_REGEX_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
SUBDOMAIN_REGEX_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)

# --------------------------------------------------------------------------------------------
# Label keys (IsQualifiedName / IsLabelKey)
# --------------------------------------------------------------------------------------------

KEY_SUCCESS = [
    "simple",
    "now-with-dashes",
    "1-starts-with-num",
    "1234",
    "simple/simple",
    "now-with-dashes/simple",
    "now-with-dashes/now-with-dashes",
    "now.with.dots/simple",
    "now-with.dashes-and.dots/simple",
    "1-num.2-num/3-num",
    "1234/5678",
    "1.2.3.4/5678",
    "Uppercase_Is_OK_123",
    "example.com/Uppercase_Is_OK_123",
    "requests.storage-foo",
    "a" * 63,
    "a" * 253 + "/" + "b" * 63,
    # extras used in this project
    "node.kubernetes.io/sla",
    "topology.kubernetes.io/zone",
    "kubernetes.io/hostname",
    "a",
    "A",
    "a_b",
]

KEY_ERROR = [
    "nospecialchars%^=@",
    "cantendwithadash-",
    "-cantstartwithadash-",
    "only/one/slash",
    "Example.com/abc",
    "example_com/abc",
    "example.com/",
    "/simple",
    "a" * 64,
    "a" * 254 + "/abc",
    # extras
    "",
    "/",
    "a\n",  # Python `$` would accept a trailing newline; fullmatch must not
    "\u00e9",
    "key with space",
]


@pytest.mark.parametrize("key", KEY_SUCCESS, ids=lambda k: k[:40])
def test_label_key_success(key: str) -> None:
    assert validate_label_key(key) == []


@pytest.mark.parametrize("key", KEY_ERROR, ids=lambda k: repr(k[:40]))
def test_label_key_error(key: str) -> None:
    assert validate_label_key(key) != []


KEY_MESSAGES: list[tuple[str, list[str]]] = [
    (
        "only/one/slash",
        [
            "a valid label key "
            + KEY_REGEX_ERR
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ],
    ),
    ("", ["name part must be non-empty", "name part " + KEY_REGEX_ERR]),
    ("example.com/", ["name part must be non-empty", "name part " + KEY_REGEX_ERR]),
    ("/simple", ["prefix part must be non-empty"]),
    ("Example.com/abc", ["prefix part " + SUBDOMAIN_REGEX_ERR]),
    ("a" * 64, ["name part must be no more than 63 bytes"]),
    ("-" + "a" * 64, ["name part must be no more than 63 bytes", "name part " + KEY_REGEX_ERR]),
    (
        "a" * 254 + "/abc",
        ["prefix part must be no more than 253 bytes"],
    ),
    (
        "A" * 254 + "/",
        [
            "prefix part must be no more than 253 bytes",
            "prefix part " + SUBDOMAIN_REGEX_ERR,
            "name part must be non-empty",
            "name part " + KEY_REGEX_ERR,
        ],
    ),
    ("cantendwithadash-", ["name part " + KEY_REGEX_ERR]),
    # 32 x 'é' = 64 bytes: Go counts bytes, so the length error fires as well.
    ("\u00e9" * 32, ["name part must be no more than 63 bytes", "name part " + KEY_REGEX_ERR]),
    ("\u00e9" * 31, ["name part " + KEY_REGEX_ERR]),
]


@pytest.mark.parametrize(("key", "expected"), KEY_MESSAGES, ids=lambda k: repr(k)[:30])
def test_label_key_messages(key: str, expected: list[str]) -> None:
    assert validate_label_key(key) == expected


def test_label_key_result_is_a_fresh_list() -> None:
    errs = validate_label_key("-bad")
    errs.append("mutated")
    assert validate_label_key("-bad") == ["name part " + KEY_REGEX_ERR]


# --------------------------------------------------------------------------------------------
# Label values (IsValidLabelValue / IsLabelValue)
# --------------------------------------------------------------------------------------------

VALUE_SUCCESS = [
    "simple",
    "now-with-dashes",
    "1-starts-with-num",
    "end-with-num-1",
    "1234",
    "a" * 63,
    "",
    # extras: values the Gt/Lt and semver operators meet
    "950",
    "0950",
    "v1.2.3",
    "1.2.3-rc.1",
    "a_b.c-d",
]

VALUE_ERROR = [
    "nospecialchars%^=@",
    "Tama-nui-te-r\u0101.is.M\u0101ori.sun",
    "\\backslashes\\are\\bad",
    "-starts-with-dash",
    "ends-with-dash-",
    ".starts.with.dot",
    "ends.with.dot.",
    "a" * 64,
    # extras
    "-5",
    "+5",
    " 5",
    "5\n",
    "1.2.3+build",
    "containerd://2.1.4",
]


@pytest.mark.parametrize("value", VALUE_SUCCESS, ids=lambda v: repr(v[:40]))
def test_label_value_success(value: str) -> None:
    assert validate_label_value(value) == []


@pytest.mark.parametrize("value", VALUE_ERROR, ids=lambda v: repr(v[:40]))
def test_label_value_error(value: str) -> None:
    assert validate_label_value(value) != []


VALUE_MESSAGES: list[tuple[str, list[str]]] = [
    ("-5", [VALUE_REGEX_ERR]),
    ("a" * 64, ["must be no more than 63 bytes"]),
    ("-" * 64, ["must be no more than 63 bytes", VALUE_REGEX_ERR]),
    ("\u00e9" * 32, ["must be no more than 63 bytes", VALUE_REGEX_ERR]),
]


@pytest.mark.parametrize(("value", "expected"), VALUE_MESSAGES, ids=lambda v: repr(v)[:30])
def test_label_value_messages(value: str, expected: list[str]) -> None:
    assert validate_label_value(value) == expected


# --------------------------------------------------------------------------------------------
# DNS-1123 subdomain (label key prefix)
# --------------------------------------------------------------------------------------------

SUBDOMAIN_GOOD = [
    "a", "ab", "abc", "a1", "a-1", "a--1--2--b",
    "0", "01", "012", "1a", "1-a", "1--a--b--2",
    "a.a", "ab.a", "abc.a", "a1.a", "a-1.a", "a--1--2--b.a",
    "a.1", "ab.1", "abc.1", "a1.1", "a-1.1", "a--1--2--b.1",
    "0.a", "01.a", "012.a", "1a.a", "1-a.a", "1--a--b--2",
    "0.1", "01.1", "012.1", "1a.1", "1-a.1", "1--a--b--2.1",
    "a.b.c.d.e", "aa.bb.cc.dd.ee", "1.2.3.4.5", "11.22.33.44.55",
    "a" * 253,
]  # fmt: skip

SUBDOMAIN_BAD = [
    "", "A", "ABC", "aBc", "A1", "A-1", "1-A",
    "-", "a-", "-a", "1-", "-1",
    "_", "a_", "_a", "a_b", "1_", "_1", "1_2",
    ".", "a.", ".a", "a..b", "1.", ".1", "1..2",
    " ", "a ", " a", "a b", "1 ", " 1", "1 2",
    "A.a", "aB.a", "ab.A", "A1.a", "a1.A",
    "A.1", "aB.1", "A1.1", "1A.1",
    "0.A", "01.A", "012.A", "1A.a", "1a.A",
    "A.B.C.D.E", "AA.BB.CC.DD.EE", "a.B.c.d.e", "aa.bB.cc.dd.ee",
    "a@b", "a,b", "a_b", "a;b",
    "a:b", "a%b", "a?b", "a$b",
    "a" * 254,
    "a\n",
]  # fmt: skip


@pytest.mark.parametrize("value", SUBDOMAIN_GOOD, ids=lambda v: v[:30])
def test_dns1123_subdomain_good(value: str) -> None:
    assert is_dns1123_subdomain(value) == []


@pytest.mark.parametrize("value", SUBDOMAIN_BAD, ids=lambda v: repr(v[:30]))
def test_dns1123_subdomain_bad(value: str) -> None:
    assert is_dns1123_subdomain(value) != []


def test_dns1123_subdomain_messages() -> None:
    assert is_dns1123_subdomain("a" * 254) == ["must be no more than 253 bytes"]
    assert is_dns1123_subdomain("A") == [SUBDOMAIN_REGEX_ERR]


# --------------------------------------------------------------------------------------------
# Properties against independent regex oracles (ASCII alphabets incl. edge characters)
# --------------------------------------------------------------------------------------------

_VALUE_ORACLE = re.compile(r"\A(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_NAME_ORACLE = re.compile(r"\A(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_ORACLE = re.compile(r"\A" + _DNS_LABEL + r"(?:\." + _DNS_LABEL + r")*\Z")

_ALPHABET = st.sampled_from(list("aZ09-_./ \n\u00e9"))


@given(st.text(_ALPHABET, max_size=70))
def test_label_value_agrees_with_oracle(s: str) -> None:
    ok = len(s.encode()) <= 63 and _VALUE_ORACLE.match(s) is not None
    assert (validate_label_value(s) == []) is ok


@given(st.text(_ALPHABET, max_size=80))
def test_label_key_agrees_with_oracle(s: str) -> None:
    parts = s.split("/")
    if len(parts) == 1:
        prefix_ok, name = True, parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        prefix_ok = len(prefix) <= 253 and _SUBDOMAIN_ORACLE.match(prefix) is not None
    else:
        assert len(validate_label_key(s)) == 1
        return
    name_ok = len(name.encode()) <= 63 and _NAME_ORACLE.match(name) is not None
    assert (validate_label_key(s) == []) is (prefix_ok and name_ok)


@given(st.from_regex(r"\A(?:[A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]\Z"))
def test_generated_label_values_are_valid(s: str) -> None:
    assert validate_label_value(s) == []
    assert validate_label_key(s) == []
    assert validate_label_key("example.com/" + s) == []
