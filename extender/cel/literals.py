"""String and bytes literals decoded exactly as cel-go's parser does (``parser/unescape.go``).

cel-python's lexer accepts any ``\\`` escape and its decoder is lenient (``'\\q'`` was
accepted; ``b'\\u00ff'`` raised a bare ValueError that crashed ``extender explain`` and
``extender validate``).  cel-go's rules, reproduced here:

* newlines normalise to ``\\n``; ``r``/``R`` raw literals keep every backslash;
* escapes ``\\a \\b \\f \\n \\r \\t \\v \\\\ \\' \\" \\` \\?``; ``\\xHH``/``\\XHH``; ``\\uHHHH`` and
  ``\\UHHHHHHHH`` (strings only); octal ``\\[0-3][0-7][0-7]``; anything else is an error;
* in a string, ``\\x``/octal/``\\u`` give a code point, which must be a valid one (no
  surrogates, at most U+10FFFF); in bytes, ``\\x`` and octal give one byte.
"""

from __future__ import annotations

_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
           "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?"}
_HEX = "0123456789abcdefABCDEF"
_HEX_DIGITS = {"x": 2, "X": 2, "u": 4, "U": 8}


class LiteralError(ValueError):
    """The literal is not valid CEL; ``str()`` is cel-go's message."""


def decode(token: str) -> str | bytes:
    """A STRING_LIT / MLSTRING_LIT / BYTES_LIT token's value."""
    is_bytes = token[:1] in ("b", "B")
    text = token[1:] if is_bytes else token
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    raw = text[:1] in ("r", "R")
    if raw:
        text = text[1:]
    quote = 3 if len(text) >= 6 and text[:3] in ("'''", '"""') else 1
    if len(text) < 2 * quote or text[:quote] != text[-quote:] or text[0] not in "'\"":
        raise LiteralError("unable to unescape string")
    body = text[quote:-quote]
    if raw or "\\" not in body:
        return body.encode("utf-8", "surrogatepass") if is_bytes else body
    return _unescape(body, is_bytes)


def _unescape(body: str, is_bytes: bool) -> str | bytes:
    out = bytearray() if is_bytes else []
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch != "\\":
            if is_bytes:
                out += ch.encode("utf-8", "surrogatepass")
            else:
                out.append(ch)
            i += 1
            continue
        if i + 1 >= n:
            raise LiteralError("unable to unescape string, found '\\' as last character")
        c = body[i + 1]
        i += 2
        if c in _SIMPLE:
            value = _SIMPLE[c]
            if is_bytes:
                out += value.encode()
            else:
                out.append(value)
            continue
        if c in _HEX_DIGITS:
            width = _HEX_DIGITS[c]
            digits = body[i : i + width]
            if is_bytes and c in "uU":
                raise LiteralError("unable to unescape string")
            if len(digits) < width or any(d not in _HEX for d in digits):
                raise LiteralError("unable to unescape string")
            i += width
            _append_code(out, int(digits, 16), is_bytes, c in "xX")
            continue
        if c in "0123":
            digits = body[i : i + 2]
            if len(digits) < 2 or any(d not in "01234567" for d in digits):
                raise LiteralError("unable to unescape octal sequence in string")
            i += 2
            _append_code(out, int(c + digits, 8), is_bytes, True)
            continue
        raise LiteralError("unable to unescape string")
    return bytes(out) if is_bytes else "".join(out)


def _append_code(out, code: int, is_bytes: bool, byte_escape: bool) -> None:
    if is_bytes and byte_escape:
        out.append(code)
        return
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise LiteralError("invalid unicode code point")
    out.append(chr(code))
