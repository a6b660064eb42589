"""HTTP/1.1 on the wire, for the listener (`extender.server.listener`): a request's head
parsed from its bytes, its body's framing (`Content-Length` or chunked) found in a
buffer, and the bytes of an answer. No sockets here: the listener reads and writes.

Strict, because a request another parser could read differently is a request smuggled
past it: a bare CR or LF anywhere in a head, a chunk line or trailers, a
repeated `Content-Length`, `Transfer-Encoding` or `Host`, both framings at once, a
transfer coding other than chunked (or chunked on HTTP/1.0), a malformed chunk size or
extension, a header name that is not a token, a control character other than HTAB in
a header value, whitespace other than SP and HTAB around one (`Transfer-Encoding:` VT `chunked`
is not chunked: it is refused, as Go's net/http refuses it) are all refused (400) and the
connection closed. Bounded: a request line
over `MAX_LINE` (414), a head over `MAX_HEAD_BYTES` (431), a body over the listener's
`max_body_bytes` (413, before it is read).

What a route gives back is a `Reply` (status, content type, body, extra headers); what
cannot be answered at all is `Refused` (a status, a message, extra headers), answered
with `{"error": message}` and the connection closed.
"""

from __future__ import annotations

import re
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

JSON = "application/json"
# (status, content type, body, extra headers)
Reply = tuple[int, str, bytes, dict[str, str]]
MAX_HEAD_BYTES = 64 << 10  # no end of head by then: 431
MAX_LINE = 8190  # request line (gunicorn's limit_request_line): 414 beyond
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# RFC 9112 chunk-size [ chunk-ext ]: a size, then `;name[=value]` extensions (tokens or
# quoted strings, whitespace around the separators); nothing else, no bare CR or LF
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t !-~\x80-\xff])*"'
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d{1,19})")
_CHUNK_LINE = re.compile(rb"([0-9a-fA-F]{1,16})(?:[ \t]*;[ \t]*" + _TOKEN
                         + rb"(?:[ \t]*=[ \t]*(?:" + _TOKEN + rb"|" + _QUOTED + rb"))?)*[ \t]*")
_SINGLE = (b"content-length", b"transfer-encoding", b"host")  # headers that may not repeat
# RFC 9110 field-name (a token) and field-value as Go's net/http reads them
# (`httpguts.ValidHeaderFieldName`, `ValidHeaderFieldValue`): no control character but
# HTAB in a value (NUL, VT, FF, DEL refused), optional whitespace SP and HTAB only
_FIELD_NAME = re.compile(_TOKEN)
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_OWS = b" \t"


class Refused(Exception):
    """A request answered with an error instead of a route's answer: HTTP `status`, the
    message, extra `headers` (Retry-After, WWW-Authenticate) and `extra` fields of the
    JSON error body. The listener closes the connection after it; the /explain and
    /drift routes answer it as their JSON error (`extender.server.explain_routes`)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.extra = extra or {}


def bare_line_ends(data: bytes | bytearray) -> bool:
    """Whether `data` holds a CR or LF that is not part of a CRLF (a line end another
    parser could read differently: request smuggling)."""
    pairs = data.count(b"\r\n")
    return data.count(b"\n") != pairs or data.count(b"\r") != pairs


def request_path(target: str) -> str:
    """The decoded path of a request target (origin or absolute form)."""
    if not target.startswith("/") and "://" in target:
        target = urlsplit(target).path or "/"
    path = target.partition("?")[0]
    return unquote(path) if "%" in path else path


def head_end(buf: bytearray) -> int:
    """Where the head at the start of `buf` ends (before its blank line), -1 while it is
    still arriving; Refused once it is longer than a head or a request line may be."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0 and len(buf) >= MAX_HEAD_BYTES:
        line = buf.find(b"\r\n", 0, MAX_LINE + 2)
        raise Refused(414 if line < 0 else 431, "request line too long" if line < 0
                      else "request head too large")
    return end


def declared_size(buf: bytearray, total: int, max_body: int) -> int:
    """The bytes the request at the start of `buf` will hold once whole: its head and
    declared body (`total`, the bytes held now, while the head is incomplete;
    `max_body` for a chunked body)."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return total
    head = bytes(buf[:end]).lower()
    if b"\r\ntransfer-encoding:" in head:
        return max(total, max_body)
    length = _CONTENT_LENGTH.search(head)
    return max(total, end + 4 + (int(length.group(1)) if length else 0))


def _request_line(line: bytes, head: bytes) -> list[bytes]:
    """Method, target and version of a request line (`head`: the whole head, checked
    for bare line ends once the line's length is)."""
    if len(line) > MAX_LINE:
        raise Refused(414, "request line too long")
    if bare_line_ends(head):
        raise Refused(400, "a bare CR or LF in the request head")
    parts = line.split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or not _FIELD_NAME.fullmatch(parts[0]) \
            or not parts[1]:
        raise Refused(400, "malformed request line")
    return parts


def _header_fields(lines: list[bytes]) -> dict[bytes, bytes]:
    """The header fields by lower-case name; Refused for a malformed line or a repeated
    header that says where the request ends or whom it is for."""
    headers: dict[bytes, bytes] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not _FIELD_NAME.fullmatch(name):
            raise Refused(400, "malformed header line")
        if not _FIELD_VALUE.fullmatch(value):
            raise Refused(400, "a control character in a header value")
        name, value = name.lower(), value.strip(_OWS)
        if name in headers and name in _SINGLE:
            raise Refused(400, f"repeated {name.decode('latin-1')} header")
        headers[name] = value
    return headers


class Request:
    """A parsed request head, then its body (`body`, set once it has arrived). `gone`:
    its client closed the connection while it was being answered (work on it stops:
    `extender.request.deadline`); `parse_charge`: bytes its parsed body holds in the budget."""

    __slots__ = ("method", "target", "path", "keep_alive", "head_size", "body_size", "chunked",
                 "expect", "body", "arrived", "headers", "client", "gone", "parse_charge")

    def __init__(self, method: str, target: str, body: bytes = b"", keep_alive: bool = True) -> None:
        self.method = method
        self.target = target
        self.path = request_path(target)
        self.keep_alive = keep_alive
        self.body = body
        self.head_size = 0
        self.body_size = len(body)
        self.chunked: list | None = None  # [scan position, data bytes, (start, end) of each chunk's data]
        self.expect = False  # `Expect: 100-continue` still to answer
        self.arrived = time.monotonic()
        self.headers: dict[bytes, bytes] = {}  # lower-case names
        self.client = ""  # the peer's address
        self.gone = False
        self.parse_charge = 0

    def header(self, name: str) -> str:
        """A header's value (latin-1), "" when absent."""
        return self.headers.get(name.lower().encode("latin-1"), b"").decode("latin-1")

    @property
    def has_body(self) -> bool:
        return self.chunked is not None or self.body_size > 0

    @classmethod
    def parse(cls, data: bytes, max_body: int) -> Request:
        """A request from its head (`data`, without the blank line); Refused if it is
        malformed or declares a body over `max_body`."""
        lines = data.split(b"\r\n")
        method, target, version = _request_line(lines[0], data)
        headers = _header_fields(lines[1:])
        request = cls(method.decode("latin-1"), target.decode("latin-1"))
        request.head_size = len(data) + 4
        request.headers = headers
        connection = headers.get(b"connection", b"").lower()
        http11 = version == b"HTTP/1.1"
        request.keep_alive = b"close" not in connection if http11 else b"keep-alive" in connection
        request._framing(http11, max_body)
        request.expect = http11 and headers.get(b"expect", b"").lower() == b"100-continue"
        return request

    def _framing(self, http11: bool, max_body: int) -> None:
        """How the body ends: chunked, or after its `Content-Length` (0 when absent, except
        on a POST: 411); Refused for an ambiguous framing or a body over `max_body`."""
        coding = self.headers.get(b"transfer-encoding")
        length = self.headers.get(b"content-length")
        if coding is not None:
            if coding.lower() != b"chunked" or not http11:
                raise Refused(400, "unsupported transfer coding (only chunked, on HTTP/1.1)")
            if length is not None:
                raise Refused(400, "both Content-Length and Transfer-Encoding")
            self.chunked = [self.head_size, 0, []]
            return
        if length is None:
            if self.method == "POST":
                raise Refused(411, "a Content-Length header is required")
            length = b"0"
        if not length.isdigit():
            raise Refused(400, "malformed Content-Length")
        self.body_size = int(length)
        if self.body_size > max_body:
            raise Refused(413, f"request body exceeds the limit of {max_body} bytes")

    def end(self, buf: bytearray, max_body: int) -> int:
        """Where this request ends in `buf` (which starts with its head) once its body has
        fully arrived, else -1; a chunked body is scanned from where the last call
        stopped. Refused for a broken chunked framing or a body over `max_body`."""
        if self.chunked is None:
            size = self.head_size + self.body_size
            return size if len(buf) >= size else -1
        return self._chunked_end(buf, max_body)

    def _chunked_end(self, buf: bytearray, max_body: int) -> int:
        pos, _, spans = self.chunked
        while True:
            self.chunked[0] = pos
            line_end = buf.find(b"\r\n", pos, pos + 1024)
            if line_end < 0:
                if len(buf) - pos < 1024:
                    return -1
                raise Refused(400, "malformed chunked request body")
            line = _CHUNK_LINE.fullmatch(buf, pos, line_end)
            if line is None:  # not hex, past 64 bits, a malformed extension, a bare CR or LF
                raise Refused(400, "malformed chunked request body")
            size = int(line.group(1), 16)
            if size == 0:  # the last chunk
                return _trailers_end(buf, line_end)
            data_end = line_end + 2 + size
            if self.chunked[1] + size > max_body:
                raise Refused(413, f"request body exceeds the limit of {max_body} bytes")
            if len(buf) < data_end + 2:
                return -1
            if buf[data_end:data_end + 2] != b"\r\n":
                raise Refused(400, "malformed chunked request body")
            spans.append((line_end + 2, data_end))
            self.chunked[1] += size
            pos = data_end + 2

    def take_body(self, buf: bytearray, end: int) -> None:
        if self.chunked is None:
            self.body = bytes(buf[self.head_size:end])
        else:
            self.body = b"".join(buf[s:e] for s, e in self.chunked[2])
            self.body_size, self.chunked = len(self.body), None


def _trailers_end(buf: bytearray, line_end: int) -> int:
    """Where a chunked body ends whose last chunk's line ends at `line_end`: after its
    trailers (if any) and the empty line that ends them; -1 until they have arrived."""
    trailer_end = buf.find(b"\r\n\r\n", line_end, line_end + MAX_HEAD_BYTES)
    if trailer_end < 0:
        if len(buf) - line_end < MAX_HEAD_BYTES:
            return -1
        raise Refused(400, "malformed chunked request body")
    if bare_line_ends(buf[line_end:trailer_end + 4]):
        raise Refused(400, "malformed chunked request body")
    return trailer_end + 4


_PHRASES = {s.value: s.phrase for s in HTTPStatus}
_date = [0, ""]  # (second, the Date header's value) cached for one second


def http_date() -> str:
    now = int(time.time())
    if _date[0] != now:
        _date[:] = [now, formatdate(now, usegmt=True)]
    return _date[1]


def response(code: int, kind: str, body: bytes, keep_alive: bool, head_only: bool = False,
             extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    head = (f"HTTP/1.1 {code} {_PHRASES.get(code, '')}\r\nServer: extender\r\nDate: {http_date()}\r\n"
            f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n")
    head += "".join(f"{name}: {value}\r\n" for name, value in extra)
    head = (head + "\r\n").encode("latin-1")
    return head if head_only else head + body


def encode(request: Request, reply: Reply) -> tuple[bytes, bool]:
    """The bytes of `reply` to `request`, and whether the connection stays open after it
    (not when either side said `Connection: close`)."""
    code, kind, payload, headers = reply
    keep = request.keep_alive and headers.get("Connection") != "close"
    extra = tuple((k, v) for k, v in headers.items() if k != "Connection")
    return response(code, kind, payload, keep, head_only=request.method == "HEAD", extra=extra), keep


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})
