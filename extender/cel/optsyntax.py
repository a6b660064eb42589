"""cel-go's optional syntax, rewritten into function calls cel-python's grammar can parse.

=================  ==========================================
``x.?f``           ``x.__opt_field__('f')``
``x[?k]``          ``x.__opt_index__(k)``
``[a, ?b]``        ``[a, __opt_elem__(b)]``   (dropped when ``b`` is none)
``{?k: v}``        ``{k: __opt_elem__(v)}``   (dropped when ``v`` is none)
=================  ==========================================

The rewrite is a single left-to-right scan that skips string literals and tracks the
brackets it is in; it only runs when the text contains optional syntax, so every other
expression is parsed (and its errors reported) exactly as written.  The ``__opt_*``
names are reserved: user text containing them is refused.
"""

from __future__ import annotations

import re

RESERVED = "__opt_"
_IDENT = re.compile(r"\s*\?\s*([_a-zA-Z][_a-zA-Z0-9]*)")
_OPERAND_END = re.compile(r"[\w)\]}'\"]")


class _Frame:
    __slots__ = ("kind", "close", "open_elem", "pending_entry")

    def __init__(self, kind: str, close: str) -> None:
        self.kind, self.close = kind, close  # kind: list | index | map | paren
        self.open_elem = False  # an __opt_elem__( is open until the next , or close
        self.pending_entry = False  # a {?k: entry: wrap the value after the next ':'


def _next_code(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def rewrite(text: str, literals: list[tuple[int, int]]) -> str:
    """``literals``: the (start, end) spans of string literals, in order."""
    out: list[str] = []
    stack: list[_Frame] = []
    spans = dict(literals)
    prev = ""  # the last significant code character ("'" after a string literal)
    i = 0
    while i < len(text):
        if i in spans:
            out.append(text[i:spans[i]])
            i, prev = spans[i], "'"
            continue
        ch = text[i]
        top = stack[-1] if stack else None
        if ch == "." and (m := _IDENT.match(text, i + 1)):
            out.append(f".__opt_field__('{m.group(1)}')")
            i, prev = m.end(), ")"
            continue
        if ch in "[{":
            j = _next_code(text, i + 1)
            optional = j < len(text) and text[j] == "?"
            if ch == "[" and optional and _OPERAND_END.match(prev or " "):
                stack.append(_Frame("index", ")"))
                out.append(".__opt_index__(")
                i = j + 1
                prev = "("
                continue
            frame = _Frame("list" if ch == "[" else "map", "]" if ch == "[" else "}")
            stack.append(frame)
            out.append(ch)
            i = j
            prev = ch
            if optional:
                i = j + 1
                _start_optional(frame, out)
            continue
        if ch == "(":
            stack.append(_Frame("paren", ")"))
        elif ch in ")]}" and top is not None:
            if top.open_elem:
                out.append(")")
            stack.pop()
            out.append(top.close if top.kind == "index" else ch)
            i, prev = i + 1, ch
            continue
        elif ch == "," and top is not None and top.kind in ("list", "map"):
            if top.open_elem:
                out.append(")")
                top.open_elem = False
            out.append(",")
            j = _next_code(text, i + 1)
            i = j
            prev = ","
            if j < len(text) and text[j] == "?":
                i = j + 1
                _start_optional(top, out)
            continue
        elif ch == ":" and top is not None and top.kind == "map" and top.pending_entry:
            out.append(": __opt_elem__(")
            top.pending_entry, top.open_elem = False, True
            i, prev = i + 1, "("
            continue
        out.append(ch)
        if not ch.isspace():
            prev = ch
        i += 1
    return "".join(out)


def _start_optional(frame: _Frame, out: list[str]) -> None:
    if frame.kind == "list":
        out.append(" __opt_elem__(")
        frame.open_elem = True
    else:
        frame.pending_entry = True
