"""Go ``strconv.Quote`` — Kubernetes error messages embed inputs with ``%q``.

Kept separate so the ip/cidr/url libraries word their errors exactly as Go does
(``ParseAddr("1.2.3"): IPv4 address too short``), including escapes of control and
non-printable characters.
"""

from __future__ import annotations

_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(s: str | bytes) -> str:
    """``strconv.Quote``: printable runes verbatim, Go escapes for the rest (lower-case hex);
    bytes that are not valid UTF-8 (and lone surrogates) become ``\\xHH``."""
    data = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
    out = ['"']
    i = 0
    while i < len(data):
        ch, width = _decode_rune(data, i)
        i += width
        if ch is None:
            out.append(f"\\x{data[i - width]:02x}")
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _decode_rune(data: bytes, i: int) -> tuple[str | None, int]:
    """One UTF-8 rune at ``i`` -> (char, width); (None, 1) for an invalid byte."""
    first = data[i]
    if first < 0x80:
        return chr(first), 1
    width = 2 if 0xC2 <= first <= 0xDF else 3 if 0xE0 <= first <= 0xEF else (
        4 if 0xF0 <= first <= 0xF4 else 0)
    if width == 0:
        return None, 1
    try:
        return data[i : i + width].decode("utf-8"), width
    except UnicodeDecodeError:
        return None, 1
