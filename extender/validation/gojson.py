"""Decode annotation JSON exactly as kube-apiserver decodes the same fields in `spec`.

Kubernetes decodes request bodies with `sigs.k8s.io/json` (Go's `encoding/json` with
case-sensitive field names). This module reproduces the parts that decide whether an
annotation is accepted and what it means:

* syntax: RFC 8259 only, Go's error texts (`invalid character '}' looking for
  beginning of value`, `unexpected end of JSON input`), nesting limit 10,000
  (`exceeded max depth`); checked on the whole text before any value is stored;
* strings: escapes as Go's `unquote` — a lone or mismatched surrogate escape becomes
  U+FFFD, invalid UTF-8 becomes one U+FFFD per bad byte;
* typed decoding into the core/v1 structs is `extender.validation.goschema`.

The parser is iterative (no recursion, whatever the depth) and works on UTF-8 bytes,
since Go's messages quote bytes.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

from extender.matching.numeric import go_quote

MAX_DEPTH = 10_000  # encoding/json maxNestingDepth


class GoJSONError(ValueError):
    """A syntax error or the first type mismatch; `str()` is Go's text."""

    def __init__(self, message: str, path: tuple = (), syntax: bool = True) -> None:
        super().__init__(message)
        self.path = path  # where a type mismatch happened: keys and indices
        self.syntax = syntax


class Num(str):
    """A JSON number, kept as its literal text (Go parses it per target field type)."""


class JObj(list):
    """A JSON object as its (key, value) pairs in document order, duplicates kept."""


# --- syntax -------------------------------------------------------------------------

_WS = re.compile(rb"[ \t\n\r]*")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_PLAIN_STRING = re.compile(rb'"([^"\\\x00-\x1f]*)"')
_STRING_BODY = re.compile(rb'(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*')
_ESCAPES = {ord('"'): '"', ord("\\"): "\\", ord("/"): "/", ord("b"): "\b", ord("f"): "\f",
            ord("n"): "\n", ord("r"): "\r", ord("t"): "\t"}


def _go_replace(exc: UnicodeDecodeError) -> tuple[str, int]:
    """Go's `utf8.DecodeRune` gives up one byte at a time: one U+FFFD per bad byte."""
    return "\ufffd", exc.start + 1


codecs.register_error("gojson-replace", _go_replace)


def quote_char(c: int) -> str:
    """encoding/json `quoteChar`: how a byte is shown in a syntax error."""
    if c == ord("'"):
        return "'\\''"
    if c == ord('"'):
        return "'\"'"
    return "'" + go_quote(chr(c))[1:-1] + "'"


def _invalid(c: int, context: str) -> GoJSONError:
    return GoJSONError(f"invalid character {quote_char(c)} {context}")


_EOF = "unexpected end of JSON input"


def _unquote(raw: bytes) -> str:
    """Body of a string literal (already syntax-checked) -> text, as Go's `unquote`."""
    if b"\\" not in raw:
        return raw.decode("utf-8", "gojson-replace")
    out: list[str] = []
    i, n, start = 0, len(raw), 0
    while i < n:
        if raw[i] != 0x5C:  # backslash
            i += 1
            continue
        out.append(raw[start:i].decode("utf-8", "gojson-replace"))
        kind = raw[i + 1]
        if kind != ord("u"):
            out.append(_ESCAPES[kind])
            i += 2
        else:
            cp = int(raw[i + 2:i + 6], 16)
            i += 6
            if 0xD800 <= cp <= 0xDFFF:
                low = int(raw[i + 2:i + 6], 16) if raw[i:i + 2] == b"\\u" and i + 6 <= n else -1
                if 0xD800 <= cp < 0xDC00 and 0xDC00 <= low <= 0xDFFF:
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                else:
                    cp = 0xFFFD  # invalid surrogate: replacement rune, next escape on its own
            out.append(chr(cp))
        start = i
    out.append(raw[start:].decode("utf-8", "gojson-replace"))
    return "".join(out)


def _string_error(data: bytes, pos: int) -> GoJSONError:
    """Diagnose a string literal starting at `pos` that the fast patterns rejected."""
    i = pos + 1
    n = len(data)
    while i < n:
        c = data[i]
        if c == 0x22:
            raise AssertionError("unreachable: string was valid")
        if c < 0x20:
            return _invalid(c, "in string literal")
        if c == 0x5C:
            if i + 1 >= n:
                return GoJSONError(_EOF)
            e = data[i + 1]
            if e == ord("u"):
                for j in range(i + 2, i + 6):
                    if j >= n:
                        return GoJSONError(_EOF)
                    if data[j] not in b"0123456789abcdefABCDEF":
                        return _invalid(data[j], "in \\u hexadecimal character escape")
                i += 6
                continue
            if e not in _ESCAPES:
                return _invalid(e, "in string escape code")
            i += 2
            continue
        i += 1
    return GoJSONError(_EOF)


def _number_error(data: bytes, pos: int) -> GoJSONError:
    """Diagnose a number literal at `pos` that `_NUMBER` could not match fully."""
    n = len(data)
    i = pos + 1  # past '-'
    if i >= n:
        return GoJSONError(_EOF)
    return _invalid(data[i], "in numeric literal")


def _after_number(data: bytes, m: re.Match) -> GoJSONError | None:
    """`1.` / `1e` / `1e+` not followed by a digit: Go's number-state messages."""
    n, end = len(data), m.end()
    if end < n and data[end] == ord(".") and m.group(1) is None and m.group(2) is None:
        return GoJSONError(_EOF) if end + 1 >= n else _invalid(data[end + 1], "after decimal point in numeric literal")
    if end < n and data[end] in b"eE" and m.group(2) is None:
        j = end + 1
        if j < n and data[j] in b"+-":
            j += 1
        return GoJSONError(_EOF) if j >= n else _invalid(data[j], "in exponent of numeric literal")
    return None


_LITERALS = {ord("t"): (b"true", True), ord("f"): (b"false", False), ord("n"): (b"null", None)}


def loads(text: str | bytes) -> Any:
    """Parse JSON like Go: objects as `JObj`, numbers as `Num`; raises GoJSONError."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    n = len(data)
    pos = _WS.match(data, 0).end()
    # stack entries: [container, expecting] where expecting is "value", "key", "colon", "comma"
    stack: list[list] = []
    root: list = []  # holds the single top-level value
    pending_key: list[str | None] = []

    def store(value: Any) -> None:
        if not stack:
            root.append(value)
            return
        top = stack[-1]
        if isinstance(top[0], JObj):
            top[0].append((pending_key.pop(), value))
        else:
            top[0].append(value)
        top[1] = "comma"

    while True:
        pos = _WS.match(data, pos).end()
        if pos >= n:
            raise GoJSONError(_EOF)
        c = data[pos]
        state = stack[-1][1] if stack else ("value" if not root else "end")
        if state == "end":
            raise _invalid(c, "after top-level value")
        if state == "colon":
            if c != ord(":"):
                raise _invalid(c, "after object key")
            stack[-1][1] = "value"
            pos += 1
            continue
        if state == "comma":
            obj = isinstance(stack[-1][0], JObj)
            if c == ord(","):
                stack[-1][1] = "key" if obj else "value"
                pos += 1
                continue
            if c == (ord("}") if obj else ord("]")):
                container = stack.pop()[0]
                pos += 1
                store(container)
                if not stack:
                    pos = _WS.match(data, pos).end()
                    if pos < n:
                        raise _invalid(data[pos], "after top-level value")
                    return root[0]
                continue
            raise _invalid(c, "after object key:value pair" if obj else "after array element")
        if state in ("key", "first-key"):
            if c == ord("}") and state == "first-key":
                stack[-1][1] = "comma"
                continue
            if c != ord('"'):
                raise _invalid(c, "looking for beginning of object key string")
            key, pos = _string(data, pos)
            pending_key.append(key)
            stack[-1][1] = "colon"
            continue
        # a value (also the first element of an array: "first-value" accepts ']')
        if c == ord("]") and state == "first-value":
            stack[-1][1] = "comma"
            continue
        if c in (ord("{"), ord("[")):
            if len(stack) + 1 > MAX_DEPTH:
                raise GoJSONError("exceeded max depth")
            stack.append([JObj(), "first-key"] if c == ord("{") else [[], "first-value"])
            pos += 1
            continue
        if c == ord('"'):
            value, pos = _string(data, pos)
        elif c == ord("-") or 0x30 <= c <= 0x39:
            m = _NUMBER.match(data, pos)
            if m is None:
                raise _number_error(data, pos)
            bad = _after_number(data, m)
            if bad is not None:
                raise bad
            value, pos = Num(m.group().decode()), m.end()
        elif c in _LITERALS:
            word, value = _LITERALS[c]
            for k, expected in enumerate(word):
                if pos + k >= n:
                    raise GoJSONError(_EOF)
                if data[pos + k] != expected:
                    name = word.decode()
                    raise _invalid(data[pos + k], f"in literal {name} (expecting {quote_char(expected)})")
            pos += len(word)
        else:
            raise _invalid(c, "looking for beginning of value")
        store(value)
        if not stack:
            pos = _WS.match(data, pos).end()
            if pos < n:
                raise _invalid(data[pos], "after top-level value")
            return root[0]


def _string(data: bytes, pos: int) -> tuple[str, int]:
    m = _PLAIN_STRING.match(data, pos)
    if m is not None:
        raw = m.group(1)
        return (raw.decode("ascii") if raw.isascii() else raw.decode("utf-8", "gojson-replace")), m.end()
    body = _STRING_BODY.match(data, pos + 1)
    end = body.end()
    if end < len(data) and data[end] == 0x22:
        return _unquote(data[pos + 1:end]), end + 1
    raise _string_error(data, pos)
