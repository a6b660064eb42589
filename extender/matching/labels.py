"""Kubernetes label key / label value syntax, as checked by ``labels.NewRequirement``.

Node-affinity requirements with a bad key or value are parse errors upstream (the term never
matches; spec §6.2, §6.3), so the extender must apply the same syntax rules.  Messages follow
apimachinery ``content.IsLabelKey`` (= ``validation.IsQualifiedName``), ``content.IsLabelValue``
(= ``validation.IsValidLabelValue``) and ``IsDNS1123Subdomain`` on current master, including
their ``RegexError`` formatting quirk (``'MyName',  or 'my.name'`` with two spaces).
Lengths are counted in UTF-8 bytes, as Go's ``len`` does.
"""

from __future__ import annotations

import re

from extender.caching import memoized

__all__ = [
    "LABEL_KEY_NAME_MAX_LENGTH",
    "LABEL_VALUE_MAX_LENGTH",
    "DNS1123_SUBDOMAIN_MAX_LENGTH",
    "is_dns1123_subdomain",
    "validate_label_key",
    "validate_label_value",
]

LABEL_KEY_NAME_MAX_LENGTH = 63
LABEL_VALUE_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253

_EMPTY_ERROR = "must be non-empty"

_LABEL_KEY_CHAR = "[A-Za-z0-9]"
_LABEL_KEY_EXT_CHAR = "[-A-Za-z0-9_.]"
_LABEL_KEY_FMT = "(" + _LABEL_KEY_CHAR + _LABEL_KEY_EXT_CHAR + "*)?" + _LABEL_KEY_CHAR
_LABEL_KEY_ERR_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_ERR_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)

# fullmatch (never `$`, which in Python also matches before a trailing newline).
_LABEL_KEY_RE = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
DNS1123_LABEL_MAX_LENGTH = 63


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} bytes"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery ``RegexError``, byte for byte (including its doubled space before 'or')."""
    if not examples:
        return msg + " (regex used for validation is '" + fmt + "')"
    msg += " (e.g. "
    for i, ex in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += "'" + ex + "', "
    return msg + "regex used for validation is '" + fmt + "')"


def _byte_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


@memoized()
def _dns1123_subdomain(value: str) -> tuple[str, ...]:
    errs: list[str] = []
    if _byte_len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(_max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if _DNS1123_SUBDOMAIN_RE.fullmatch(value) is None:
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_ERR_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return tuple(errs)


def is_dns1123_subdomain(value: str) -> list[str]:
    """``IsDNS1123Subdomain``: lowercase RFC 1123 subdomain, at most 253 bytes."""
    return list(_dns1123_subdomain(value))


def is_dns1123_label(value: str) -> bool:
    """``IsDNS1123Label`` passes: a lowercase RFC 1123 label of at most 63 characters
    (a namespace's name, as the API server validates it)."""
    return len(value) <= DNS1123_LABEL_MAX_LENGTH and _DNS1123_LABEL_RE.fullmatch(value) is not None


@memoized()
def _label_key(key: str) -> tuple[str, ...]:
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part " + _EMPTY_ERROR)
        else:
            errs.extend("prefix part " + m for m in _dns1123_subdomain(prefix))
    else:
        return (
            "a valid label key "
            + _regex_error(_LABEL_KEY_ERR_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    if not name:
        errs.append("name part " + _EMPTY_ERROR)
    elif _byte_len(name) > LABEL_KEY_NAME_MAX_LENGTH:
        errs.append("name part " + _max_len_error(LABEL_KEY_NAME_MAX_LENGTH))
    if _LABEL_KEY_RE.fullmatch(name) is None:
        errs.append(
            "name part "
            + _regex_error(_LABEL_KEY_ERR_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return tuple(errs)


def validate_label_key(key: str) -> list[str]:
    """``IsQualifiedName`` / ``IsLabelKey``: ``[prefix/]name``; [] when valid.

    prefix: DNS-1123 subdomain (≤ 253 bytes); name: ≤ 63 bytes of
    ``([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]``.
    """
    return list(_label_key(key))


@memoized()
def _label_value(value: str) -> tuple[str, ...]:
    errs: list[str] = []
    if _byte_len(value) > LABEL_VALUE_MAX_LENGTH:
        errs.append(_max_len_error(LABEL_VALUE_MAX_LENGTH))
    if _LABEL_VALUE_RE.fullmatch(value) is None:
        errs.append(
            _regex_error(_LABEL_VALUE_ERR_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return tuple(errs)


def validate_label_value(value: str) -> list[str]:
    """``IsValidLabelValue``: [] when valid.

    Valid: empty, or ≤ 63 bytes matching ``(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?``.
    """
    return list(_label_value(value))
