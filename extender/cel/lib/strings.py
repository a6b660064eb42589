"""cel-go ``ext.Strings`` version 2 (indices are Unicode code points; Go semantics).

Python ``str`` indexes code points like Go's ``[]rune``; Go ``strings.SplitN`` /
``strings.Replace`` / ``strings.TrimSpace`` semantics are reproduced explicitly where
Python's built-ins differ (``split`` with n, empty separators, the whitespace set).
``reverse()`` is strings v3 and is not part of Kubernetes 1.35's environment.
``format()`` lives in ``extender.cel.lib.printf``.
"""

from __future__ import annotations

from typing import Any

from extender.cel.values import GO_SPACE, EvalError, cel_function, kind, want

S = str


def _int(v: Any) -> int:
    want(v, "int")
    return int(v)


@cel_function("charAt")
def char_at(s: Any, i: Any) -> Any:
    want(s, "string")
    idx = _int(i)
    if idx < 0 or idx > len(s):
        raise EvalError(f"index out of range: {idx}")
    return S(s[idx : idx + 1])


def _index_of(s: str, sub: str, offset: int) -> int:
    if sub == "":
        return offset
    if offset < 0:
        raise EvalError(f"index out of range: {offset}")
    if offset >= len(s):
        return -1
    return s.find(sub, offset)


def _last_index_of(s: str, sub: str, offset: int) -> int:
    if sub == "":
        return offset
    if offset < 0:
        raise EvalError(f"index out of range: {offset}")
    if offset >= len(s):
        return -1
    start = min(offset, len(s) - len(sub))
    if start < 0:
        return -1
    return s.rfind(sub, 0, start + len(sub))


def index_of_string(s: Any, sub: Any, offset: Any = None) -> Any:
    want(sub, "string")
    off = 0 if offset is None else _int(offset)
    return int(_index_of(str(s), str(sub), off))


def last_index_of_string(s: Any, sub: Any, offset: Any = None) -> Any:
    want(sub, "string")
    if offset is None:
        if sub == "":
            return int(len(s))
        if len(sub) > len(s):  # cel-go v0.26: -1, also for '' (no offset -1 error)
            return -1
        off = len(s) - 1
    else:
        off = _int(offset)
    return int(_last_index_of(str(s), str(sub), off))


@cel_function("lowerAscii")
def lower_ascii(s: Any) -> Any:
    want(s, "string")
    return S("".join(c.lower() if "A" <= c <= "Z" else c for c in s))


@cel_function("upperAscii")
def upper_ascii(s: Any) -> Any:
    want(s, "string")
    return S("".join(c.upper() if "a" <= c <= "z" else c for c in s))


@cel_function("replace")
def replace(s: Any, old: Any, new: Any, n: Any = None) -> Any:
    for v in (s, old, new):
        want(v, "string")
    count = -1 if n is None else _int(n)
    if count == 0:
        return s
    return S(str(s).replace(str(old), str(new), count if count > 0 else -1))


def go_split_n(s: str, sep: str, n: int) -> list[str]:
    """Go ``strings.SplitN``: n == 0 -> [], n < 0 -> all, empty sep splits code points."""
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if n < 0 or n >= len(chars):
            return chars
        return chars[: n - 1] + ["".join(chars[n - 1 :])]
    return s.split(sep) if n < 0 else s.split(sep, n - 1)


@cel_function("split")
def split(s: Any, sep: Any, n: Any = None) -> Any:
    want(s, "string")
    want(sep, "string")
    count = -1 if n is None else _int(n)
    return list([S(p) for p in go_split_n(str(s), str(sep), count)])


@cel_function("substring")
def substring(s: Any, start: Any, end: Any = None) -> Any:
    want(s, "string")
    a = _int(start)
    b = len(s) if end is None else _int(end)
    if a > b and end is not None:
        raise EvalError(f"invalid substring range. start: {a}, end: {b}")
    for i in (a, b):
        if i < 0 or i > len(s):
            raise EvalError(f"index out of range: {i}")
    return S(s[a:b])


@cel_function("trim")
def trim(s: Any) -> Any:
    want(s, "string")
    return S(str(s).strip(GO_SPACE))


@cel_function("join")
def join(items: Any, sep: Any = None) -> Any:
    want(items, "list")
    separator = "" if sep is None else sep
    want(S(separator), "string")
    for x in items:
        if kind(x) != "string":
            raise TypeError(f"join: list element of type {kind(x)}")
    return S(str(separator).join(items))


def go_quote(s: str) -> str:
    """cel-go ``strings.quote``: escape \\a \\b \\f \\n \\r \\t \\v \\\\ and \\" only."""
    table = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
             "\v": "\\v", "\\": "\\\\", '"': '\\"'}
    clean = s.encode("utf-8", "replace").decode("utf-8")
    return '"' + "".join(table.get(c, c) for c in clean) + '"'


@cel_function("strings.quote")
def quote(s: Any) -> Any:
    want(s, "string")
    return S(go_quote(str(s)))


FUNCTIONS = {
    "charAt": char_at, "lowerAscii": lower_ascii, "upperAscii": upper_ascii,
    "replace": replace, "split": split, "substring": substring, "trim": trim, "join": join,
    "strings.quote": quote,
}
# indexOf / lastIndexOf are shared with the K8s lists library; see lib/lists.py.
