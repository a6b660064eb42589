"""Kubernetes CEL ``format`` library (K8s 1.31+, ``library/format.go``).

``format.named(name)`` -> ``optional_type(Format)`` (none for an unknown name);
``format.dns1123Label()`` ... ``format.datetime()`` -> ``Format``;
``<Format>.validate(s)`` -> ``optional.none()`` when valid, else
``optional.of([messages])`` with the apimachinery / kube-openapi texts:

* DNS-1123 label / subdomain, DNS-1035 label (``NameIsDNSLabel`` & co.; the ``*Prefix``
  variants first apply apimachinery's ``maskTrailingDash``, which replaces the *last two
  bytes* of a name ending in ``-`` by ``a`` — and panics on the one-byte name ``-``, which
  cel-go reports as ``internal error: runtime error: slice bounds out of range [:-1]``);
* qualified name and label value: ``extender.matching.labels`` (the same validators the
  node-affinity code uses; not re-implemented here);
* ``uri``: Go ``url.ParseRequestURI`` (``extender.cel.lib.gourl``), its error text;
* ``uuid`` / ``byte`` / ``date`` / ``datetime``: kube-openapi ``strfmt`` (UUID regex with
  optional hyphens, govalidator's base64 regex, Go ``time.Parse("2006-01-02")``, strfmt's
  ``IsDateTime``), with the fixed messages of ``format.go``.

Format values compare equal by name.  Cost (``extender.cel.cost``): like ``find``, with
the format's ``MaxRegexSize`` as the pattern length.
"""

from __future__ import annotations

import re
from typing import Any

from extender.cel.lib import gourl
from extender.cel.lib.optional import NONE, Optional
from extender.cel.values import EvalError, cel_function, kind, want
from extender.matching.labels import (
    _byte_len,
    _max_len_error,
    _regex_error,
    is_dns1123_subdomain,
    validate_label_key,
    validate_label_value,
)

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_ERR = ("a lowercase RFC 1123 label must consist of lower case alphanumeric "
                      "characters or '-', and must start and end with an alphanumeric character")
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_ERR = ("a DNS-1035 label must consist of lower case alphanumeric characters or "
                      "'-', start with an alphabetic character, and end with an alphanumeric "
                      "character")
_LABEL_MAX = 63
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1035_LABEL_RE = re.compile(_DNS1035_LABEL_FMT)
_SUBDOMAIN_RE = re.compile(_DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*")

_UUID_RE = re.compile("[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                      "[0-9a-fA-F]{12}")
_BASE64_RE = re.compile("(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|"
                        "[A-Za-z0-9+/]{4})")
_DATE_RE = re.compile("([0-9]{4})-([0-9]{2})-([0-9]{2})")
# strfmt DateTimePattern; "." is any character but a newline (as in Go and Python)
_TIME_RE = re.compile("([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")


def dns1123_label(value: str) -> list[str]:
    """apimachinery ``IsDNS1123Label``."""
    errs = []
    if _byte_len(value) > _LABEL_MAX:
        errs.append(_max_len_error(_LABEL_MAX))
    if _DNS1123_LABEL_RE.fullmatch(value) is None:
        if _SUBDOMAIN_RE.fullmatch(value) is not None:
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_DNS1123_LABEL_ERR, _DNS1123_LABEL_FMT, "my-name",
                                     "123-abc"))
    return errs


def dns1035_label(value: str) -> list[str]:
    """apimachinery ``IsDNS1035Label``."""
    errs = []
    if _byte_len(value) > _LABEL_MAX:
        errs.append(_max_len_error(_LABEL_MAX))
    if _DNS1035_LABEL_RE.fullmatch(value) is None:
        errs.append(_regex_error(_DNS1035_LABEL_ERR, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def mask_trailing_dash(name: str) -> str:
    """apimachinery ``maskTrailingDash``: ``name[:len(name)-2] + "a"`` on UTF-8 bytes.

    A multi-byte character cut in half leaves dangling bytes that Go keeps; they are
    represented by NUL characters here (same byte count, and no regex accepts them)."""
    if not name.endswith("-"):
        return name
    raw = name.encode("utf-8", "surrogatepass")
    if len(raw) < 2:
        raise EvalError("internal error: runtime error: slice bounds out of range [:-1]")
    head = raw[:-2]
    for cut in range(min(4, len(head)) + 1):
        try:
            text = head[: len(head) - cut].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            continue
        return text + "\x00" * cut + "a"
    return "\x00" * len(head) + "a"  # pragma: no cover - unreachable for valid str input


def _prefixed(validate, prefix: bool):
    return lambda s: validate(mask_trailing_dash(s) if prefix else s)


def _days_in(month: int, year: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def is_date(s: str) -> bool:
    """Go ``time.Parse("2006-01-02", s) == nil`` (year 0000 included, leap years)."""
    m = _DATE_RE.fullmatch(s)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.groups())
    return 1 <= month <= 12 and 1 <= day <= _days_in(month, year)


def is_datetime(s: str) -> bool:
    """kube-openapi ``strfmt.IsDateTime``: split the lower-cased text at every ``t``, the
    first part must be a date and the second ``HH:MM:SS[.frac](z|±hh:mm)`` with
    ``HH <= 23``, ``MM <= 59``, ``SS <= 59`` (further ``t``-parts are ignored, as there)."""
    if _byte_len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not is_date(parts[0]):
        return False
    m = _TIME_RE.fullmatch(parts[1])
    return m is not None and m[1] <= "23" and m[2] <= "59" and m[3] <= "59"


def _uri(s: str) -> list[str]:
    try:
        gourl.parse_request_uri(s)
    except gourl.URLError as exc:
        return [str(exc)]
    return []


def _check(predicate, message: str):
    return lambda s: [] if predicate(s) else [message]


class Format:
    """Opaque CEL value of type ``kubernetes.NamedFormat``; equal when the names are."""

    cel_type = "Format"
    strict_equality = True
    __slots__ = ("name", "validate", "max_regex_size")

    def __init__(self, name: str, validate, max_regex_size: int) -> None:
        self.name, self.validate, self.max_regex_size = name, validate, max_regex_size

    def cel_equals(self, other: Any) -> bool:
        if not isinstance(other, Format):  # Kubernetes' Equal: no such overload
            raise TypeError("Format.Equal: no such overload")
        return self.name == other.name

    def __repr__(self) -> str:
        return f"Format({self.name})"


#: Kubernetes' ``urlLength`` (its estimate of govalidator's URL regex, for ``uri``, which
#: ParseRequestURI implements without a regex), ``len(strfmt.UUIDPattern)``, ``len(govalidator.Base64)``,
#: ``len(strfmt.DateTimePattern)``.
_URL_REGEX_SIZE, _UUID_REGEX_SIZE, _BASE64_REGEX_SIZE, _DATETIME_REGEX_SIZE = 1103, 70, 84, 71

#: key of ``format.<key>()`` / ``format.named('<key>')`` -> Format (``ConstantFormats``).
FORMATS: dict[str, Format] = {
    "dns1123Label": Format("DNS1123Label", _prefixed(dns1123_label, False), 30),
    "dns1123Subdomain": Format("DNS1123Subdomain", _prefixed(is_dns1123_subdomain, False), 60),
    "dns1035Label": Format("DNS1035Label", _prefixed(dns1035_label, False), 30),
    "qualifiedName": Format("QualifiedName", validate_label_key, 60),
    "dns1123LabelPrefix": Format("DNS1123LabelPrefix", _prefixed(dns1123_label, True), 30),
    "dns1123SubdomainPrefix": Format("DNS1123SubdomainPrefix",
                                     _prefixed(is_dns1123_subdomain, True), 60),
    "dns1035LabelPrefix": Format("DNS1035LabelPrefix", _prefixed(dns1035_label, True), 30),
    "labelValue": Format("LabelValue", validate_label_value, 40),
    "uri": Format("URI", _uri, _URL_REGEX_SIZE),
    "uuid": Format("uuid", _check(lambda s: _UUID_RE.fullmatch(s) is not None,
                                  "does not match the UUID format"), _UUID_REGEX_SIZE),
    "byte": Format("byte", _check(lambda s: _BASE64_RE.fullmatch(s) is not None,
                                  "invalid base64"), _BASE64_REGEX_SIZE),
    "date": Format("date", _check(is_date, "invalid date"), _DATETIME_REGEX_SIZE),
    "datetime": Format("datetime", _check(is_datetime, "invalid datetime"),
                       _DATETIME_REGEX_SIZE),
}


@cel_function("format.named")
def named(name: Any) -> Any:
    want(name, "string")
    f = FORMATS.get(str(name))
    return NONE if f is None else Optional(f)


@cel_function("validate")
def validate(fmt: Any, s: Any) -> Any:
    if not isinstance(fmt, Format):
        raise TypeError(kind(fmt))
    want(s, "string")
    errors = fmt.validate(str(s))
    if not errors:
        return NONE
    return Optional(list([str(e) for e in errors]))


def _constant(f: Format):
    @cel_function(f"format.{f.name}")
    def impl() -> Any:
        return f

    return impl


FUNCTIONS = {"format.named": named, "validate": validate,
             **{f"format.{key}": _constant(f) for key, f in FORMATS.items()}}
