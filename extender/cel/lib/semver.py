"""Kubernetes CEL ``semver`` library, version 1 (spec cel.md §1.3).

Parsing and comparison come from ``extender.matching.semver`` (blang/semver v4).  K8s'
``normalize`` flag is blang ``ParseTolerant`` *without* its whitespace trimming; every
input with leading/trailing whitespace fails normalisation anyway (whitespace can never
become a valid component), so we reject those first and delegate the rest.
"""

from __future__ import annotations

from typing import Any

from extender.cel.values import GO_SPACE, INT64_MAX, EvalError, cel_function, kind, want
from extender.matching.semver import SemverError, Version, compare, parse, parse_tolerant


class Semver:
    """Opaque CEL value of type ``kubernetes.Semver``; ``==`` is blang Compare == 0."""

    cel_type = "Semver"
    strict_equality = True
    __slots__ = ("version",)

    def __init__(self, version: Version) -> None:
        self.version = version

    def cel_equals(self, other: Any) -> bool:
        if not isinstance(other, Semver):  # Kubernetes' Equal: no such overload
            raise TypeError("Semver.Equal: no such overload")
        return compare(self.version, other.version) == 0

    def __repr__(self) -> str:
        return f"semver({str(self.version)!r})"


def parse_semver(text: str, normalize: bool = False) -> Version:
    """K8s ``semver(text, normalize)``; raises SemverError with blang's message."""
    if not normalize:
        return parse(text)
    if text != text.strip(GO_SPACE):
        # Normalisation does not trim; a bordering space always ends up in some component.
        return parse(text)
    return parse_tolerant(text)


def _to_semver(s: Any, normalize: Any = None) -> Version:
    want(s, "string")
    if normalize is not None:
        want(normalize, "bool")
    try:
        return parse_semver(str(s), bool(normalize))
    except SemverError as exc:
        raise EvalError(str(exc)) from None


@cel_function("semver")
def semver(s: Any, normalize: Any = None) -> Any:
    return Semver(_to_semver(s, normalize))


@cel_function("isSemver")
def is_semver(s: Any, normalize: Any = None) -> Any:
    try:
        _to_semver(s, normalize)
    except EvalError:
        return False
    return True


def _as_int64(v: int) -> int:
    """Go ``int64(uint64)``: wraps above MaxInt64."""
    return int(v - 2**64 if v > INT64_MAX else v)


@cel_function("major")
def major(v: Any) -> Any:
    return _as_int64(_version(v).major)


@cel_function("minor")
def minor(v: Any) -> Any:
    return _as_int64(_version(v).minor)


@cel_function("patch")
def patch(v: Any) -> Any:
    return _as_int64(_version(v).patch)


def _version(v: Any) -> Version:
    if not isinstance(v, Semver):
        raise TypeError(kind(v))
    return v.version


def semver_compare(a: Any, b: Any) -> int:
    return compare(_version(a), _version(b))


FUNCTIONS = {"semver": semver, "isSemver": is_semver, "major": major, "minor": minor,
             "patch": patch}
# compareTo / isGreaterThan / isLessThan are shared with quantity: see lib/compare.py.
