"""RE2 regular expressions: CEL ``matches`` and the Kubernetes ``find``/``findAll``.

Go's ``regexp`` is RE2 (no backtracking, leftmost-first); google-re2 gives the same
engine, so ``(a+)+$`` on a long input is linear.  ``findAll`` follows Go's
``FindAllString`` rule that an empty match directly after the previous match is dropped
(spec cel.md §1.2), which Python's and google-re2's ``findall`` do not.
"""

from __future__ import annotations

from typing import Any

import re2

from extender.caching import memoized
from extender.cel.limits import MAX_EXPRESSION_BYTES
from extender.cel.values import EvalError, cel_function, want

#: compiled patterns kept: ``memoized`` counts 200 bytes + the pattern's length an entry,
#: so about 550 short patterns (each ~2.4 KB of RE2's memory); a constant pattern is
#: never too long to be kept
PATTERN_BYTES = 128 << 10
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would log every failed compile to stderr via absl


def _go_only_error(pattern: str) -> str | None:
    """What Go's regexp/syntax rejects and C++ RE2 accepts: the ``\\C`` (any byte)
    escape, which Go reports as an invalid escape sequence."""
    i = pattern.find("\\")
    while i >= 0:
        if pattern[i + 1 : i + 2] == "C":
            return "invalid escape sequence: `\\C`"
        i = pattern.find("\\", i + 2)
    return None


@memoized(max_bytes=PATTERN_BYTES, max_chars=MAX_EXPRESSION_BYTES)
def _compile(pattern: str) -> tuple[Any, str | None]:
    go_only = _go_only_error(pattern)
    if go_only is not None:
        return None, go_only
    try:
        return re2.compile(pattern, _OPTIONS), None
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        return None, str(detail) or "invalid pattern"


def compile_pattern(pattern: str) -> Any:
    """Compiled RE2 pattern (cached, including failures); EvalError when invalid."""
    rx, err = _compile(str(pattern))
    if rx is None:
        raise EvalError(f"invalid regular expression {str(pattern)!r}: {err}")
    return rx


def pattern_error(pattern: str) -> str | None:
    """Compile-time check of a constant pattern: the error message, or None."""
    rx, err = _compile(pattern)
    return None if rx is not None else f"invalid regular expression {pattern!r}: {err}"


@cel_function("matches")
def matches(text: Any, pattern: Any) -> Any:
    want(text, "string")
    want(pattern, "string")
    return bool(compile_pattern(pattern).search(str(text)) is not None)


@cel_function("find")
def find(text: Any, pattern: Any) -> Any:
    want(text, "string")
    want(pattern, "string")
    m = compile_pattern(pattern).search(str(text))
    return str(m.group() if m is not None else "")


def go_find_all(rx: Any, s: str, n: int = -1) -> list[str]:
    """Go ``FindAllString(s, n)``: drop an empty match adjacent to the previous match."""
    out: list[str] = []
    pos, prev_end = 0, -1
    while (n < 0 or len(out) < n) and pos <= len(s):
        m = rx.search(s, pos)
        if m is None:
            break
        a, b = m.span()
        if not (a == b and a == prev_end):
            out.append(m.group())
        pos = a + 1 if a == b else b
        prev_end = b
    return out


@cel_function("findAll")
def find_all(text: Any, pattern: Any, limit: Any = None) -> Any:
    want(text, "string")
    want(pattern, "string")
    n = -1
    if limit is not None:
        want(limit, "int")
        n = int(limit)
        if n == 0:
            return list([])
    found = go_find_all(compile_pattern(pattern), str(text), n)
    return list([str(x) for x in found])


FUNCTIONS = {"matches": matches, "find": find, "findAll": find_all}
