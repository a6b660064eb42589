"""Semantic versions with the exact behaviour of ``github.com/blang/semver/v4``.

KEP-5721's ``SemverGt``/``SemverLt``/``SemverEq`` operators are specified in terms of blang's
``ParseTolerant`` and ``Compare`` (spec §0.2, §4).  The PyPI ``semver`` package parses and
reports errors differently, so this is an independent implementation of blang's rules,
including its error texts (``%q`` quoting via :func:`go_quote`) and the Go ``ParseUint``
errors it passes through unchanged.

Equality choice: ``Version.__eq__`` is blang ``Equals`` (``compare(a, b) == 0``), i.e. build
metadata is ignored, and ``__hash__`` agrees with it.  ``==``, ``<``, sorting and set/dict
membership are therefore all consistent with :func:`compare`.  Use :meth:`Version.identical`
for structural equality that also looks at build metadata.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from extender.caching import memoized
from extender.matching.numeric import GoNumError, go_parse_uint64, go_quote

__all__ = [
    "SEMVER_OPERATORS",
    "PRVersion",
    "SemverError",
    "Version",
    "compare",
    "compare_semver",
    "parse",
    "parse_tolerant",
    "parse_tolerant_cached",
    "try_parse_tolerant",
    "why_not_semver",
]

SEMVER_OPERATORS = frozenset({"SemverGt", "SemverLt", "SemverEq"})

#: A pre-release identifier: ``int`` for numeric identifiers, ``str`` for alphanumeric ones
#: (blang ``PRVersion{IsNum}``).  The type, not the text, decides how it compares.
PRVersion = int | str

# Go unicode.IsSpace (what strings.TrimSpace removes).  Python's str.strip() would also
# remove U+001C..U+001F, which Go keeps.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

_NUMBERS_RE = re.compile(r"[0-9]*")
_ALPHANUM_RE = re.compile(r"[0-9A-Za-z-]*")
_DIGITS = "0123456789"


class SemverError(ValueError):
    """A blang/semver parse error; ``str()`` is blang's (or Go strconv's) exact message."""


def _go_str_cmp(a: str, b: str) -> int:
    """Go string comparison (bytewise on UTF-8) as -1/0/1."""
    if a == b:
        return 0
    if not (a.isascii() and b.isascii()):
        ab = a.encode("utf-8", "surrogatepass")
        bb = b.encode("utf-8", "surrogatepass")
        return 1 if ab > bb else -1
    return 1 if a > b else -1


def _compare_pr(x: PRVersion, y: PRVersion) -> int:
    """blang ``PRVersion.Compare``: numeric < alphanumeric; like kinds compare naturally."""
    x_num = isinstance(x, int)
    y_num = isinstance(y, int)
    if x_num and not y_num:
        return -1
    if y_num and not x_num:
        return 1
    if x_num:
        if x == y:
            return 0
        return 1 if x > y else -1  # type: ignore[operator]
    return _go_str_cmp(x, y)  # type: ignore[arg-type]


def compare(a: Version, b: Version) -> int:
    """blang ``Version.Compare``: -1, 0 or 1; build metadata is ignored."""
    if a.major != b.major:
        return 1 if a.major > b.major else -1
    if a.minor != b.minor:
        return 1 if a.minor > b.minor else -1
    if a.patch != b.patch:
        return 1 if a.patch > b.patch else -1
    ap, bp = a.pre, b.pre
    if not ap:
        return 0 if not bp else 1
    if not bp:
        return -1
    for x, y in zip(ap, bp, strict=False):
        c = _compare_pr(x, y)
        if c:
            return c
    if len(ap) == len(bp):
        return 0
    return -1 if len(ap) < len(bp) else 1


def _pr_key(p: PRVersion) -> tuple[int, int | bytes]:
    if isinstance(p, int):
        return (0, p)
    return (1, p.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True, eq=False)
class Version:
    """A parsed version (blang ``Version``); see the module docstring for equality."""

    major: int
    minor: int
    patch: int
    pre: tuple[PRVersion, ...] = ()
    build: tuple[str, ...] = ()

    def __str__(self) -> str:
        """blang ``String()``: normalised ``M.m.p[-pre][+build]``."""
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            s += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            s += "+" + ".".join(self.build)
        return s

    def compare(self, other: Version) -> int:
        """blang ``Compare``."""
        return compare(self, other)

    def sort_key(self) -> tuple[object, ...]:
        """A key whose natural ordering equals :func:`compare` (release sorts after pre)."""
        if not self.pre:
            return (self.major, self.minor, self.patch, 1, ())
        return (self.major, self.minor, self.patch, 0, tuple(_pr_key(p) for p in self.pre))

    def identical(self, other: Version) -> bool:
        """Structural equality, including build metadata and identifier kinds."""
        return (
            self.major == other.major
            and self.minor == other.minor
            and self.patch == other.patch
            and self.pre == other.pre
            and self.build == other.build
            and all(type(a) is type(b) for a, b in zip(self.pre, other.pre, strict=True))
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return compare(self, other) == 0

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return compare(self, other) != 0

    def __hash__(self) -> int:
        # Consistent with __eq__: build is ignored; identifier kind is part of the key.
        return hash((self.major, self.minor, self.patch, tuple(_pr_key(p) for p in self.pre)))

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return compare(self, other) < 0

    def __le__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return compare(self, other) <= 0

    def __gt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return compare(self, other) > 0

    def __ge__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return compare(self, other) >= 0


def _parse_number(part: str, lower: str, title: str) -> int:
    """Major/minor/patch check: digits only (empty passes!), no leading zero, then ParseUint."""
    if _NUMBERS_RE.fullmatch(part) is None:
        raise SemverError(f"Invalid character(s) found in {lower} number {go_quote(part)}")
    if len(part) > 1 and part[0] == "0":
        raise SemverError(f"{title} number must not contain leading zeroes {go_quote(part)}")
    try:
        return go_parse_uint64(part)
    except GoNumError as exc:
        raise SemverError(str(exc)) from exc


def _parse_pr(s: str) -> PRVersion:
    """blang ``NewPRVersion``."""
    if not s:
        raise SemverError("Prerelease is empty")
    if _NUMBERS_RE.fullmatch(s) is not None:
        if len(s) > 1 and s[0] == "0":
            raise SemverError(
                f"Numeric PreRelease version must not contain leading zeroes {go_quote(s)}"
            )
        try:
            return go_parse_uint64(s)
        except GoNumError as exc:
            raise SemverError(str(exc)) from exc
    if _ALPHANUM_RE.fullmatch(s) is not None:
        return s
    raise SemverError(f"Invalid character(s) found in prerelease {go_quote(s)}")


def parse(s: str) -> Version:
    """blang ``Parse``: strict SemVer 2.0.0 with blang's error messages."""
    if not s:
        raise SemverError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _parse_number(parts[0], "major", "Major")
    minor = _parse_number(parts[1], "minor", "Minor")

    patch_str = parts[2]
    build_strs: list[str] = []
    pre_strs: list[str] = []
    plus = patch_str.find("+")
    if plus != -1:
        build_strs = patch_str[plus + 1 :].split(".")
        patch_str = patch_str[:plus]
    dash = patch_str.find("-")
    if dash != -1:
        pre_strs = patch_str[dash + 1 :].split(".")
        patch_str = patch_str[:dash]
    patch = _parse_number(patch_str, "patch", "Patch")

    pre = tuple(_parse_pr(p) for p in pre_strs)
    for b in build_strs:
        if not b:
            raise SemverError("Build meta data is empty")
        if _ALPHANUM_RE.fullmatch(b) is None:
            raise SemverError(f"Invalid character(s) found in build meta data {go_quote(b)}")
    return Version(major, minor, patch, pre, tuple(build_strs))


def _needs_zero_strip(p: str) -> bool:
    # Go checks len(p) > 1 in *bytes*: one non-ASCII character already counts as long.
    return len(p) > 1 or (len(p) == 1 and p > "\x7f")


def parse_tolerant(s: str) -> Version:
    """blang ``ParseTolerant``: trim, drop one ``v``, strip leading zeros, pad, then ``parse``.

    Quirks kept on purpose: only a lowercase ``v`` is removed; a part whose stripped form does
    not start with a digit gets a ``0`` prefix (``V1`` -> ``0V1``), which then shows in errors;
    only the first two dots split, so the third part keeps pre-release/build text.
    """
    s = s.strip(_GO_SPACE)
    if s.startswith("v"):
        s = s[1:]
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if _needs_zero_strip(p):
            p = p.lstrip("0")
            if not p or p[0] not in _DIGITS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        last = parts[-1]
        if "+" in last or "-" in last:
            raise SemverError("Short version cannot contain PreRelease/Build meta data")
        parts.extend("0" for _ in range(3 - len(parts)))
    return parse(".".join(parts))


@memoized()
def _tolerant_cached(s: str) -> tuple[Version | None, str | None]:
    try:
        return parse_tolerant(s), None
    except SemverError as exc:
        return None, str(exc)


def try_parse_tolerant(s: str) -> Version | None:
    """Cached ``ParseTolerant`` for the hot path: the version, or None if it does not parse."""
    return _tolerant_cached(s)[0]


def parse_tolerant_cached(s: str) -> Version:
    """Cached :func:`parse_tolerant`; failures are cached too and re-raised as fresh errors."""
    v, err = _tolerant_cached(s)
    if v is None:
        raise SemverError(err)
    return v


def compare_semver(operator: str, node_or_taint_value: str, requirement_value: str) -> bool:
    """KEP-5721 operators with the Gt/Lt direction (spec §0.2).

    ``SemverGt``: value > requirement; ``SemverLt``: value < requirement; ``SemverEq``: equal
    by ``Compare == 0`` (build ignored).  Here *value* is the taint's (tolerations) or the node
    label's (affinity) and *requirement* the toleration's or the requirement's.  A parse
    failure on either side or an unknown operator is a non-match.
    """
    if operator not in SEMVER_OPERATORS:
        return False
    v = _tolerant_cached(node_or_taint_value)[0]
    if v is None:
        return False
    r = _tolerant_cached(requirement_value)[0]
    if r is None:
        return False
    c = compare(v, r)
    if operator == "SemverGt":
        return c > 0
    if operator == "SemverLt":
        return c < 0
    return c == 0


def why_not_semver(
    node_or_taint_value: str,
    requirement_value: str,
    *,
    value_label: str = "taint value",
    requirement_label: str = "toleration value",
) -> str | None:
    """Human explanation (for ``explain``) of which side is not a version and why.

    Labels default to the toleration wording; pass e.g. ``value_label="node label value"``,
    ``requirement_label="requirement value"`` for node affinity.  None if both parse.
    """
    reasons = []
    for label, value in (
        (value_label, node_or_taint_value),
        (requirement_label, requirement_value),
    ):
        err = _tolerant_cached(value)[1]
        if err is not None:
            reasons.append(f"{label} {go_quote(value)} is not a valid semantic version: {err}")
    return "; ".join(reasons) if reasons else None
