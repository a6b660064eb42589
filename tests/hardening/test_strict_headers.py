"""Issue #48's fifth finding: header fields were read leniently. `bytes.strip()` also
removes VT and FF, so `Transfer-Encoding:\\x0bchunked` was read as chunked (a proxy that
does not strip it frames the body otherwise: request smuggling); NUL and NBSP in header
names and NUL in values were accepted. Now fields are read as Go's net/http reads
them: a name is an RFC 9110 token, a value holds no control character but HTAB, the
whitespace around it is SP or HTAB only. Anything else: 400, and the connection closes."""

from __future__ import annotations

import socket

import pytest

from extender.server.listener import Listener

BODY = b'{"a": 1}'
MALFORMED = {
    "VT before a transfer coding": b"Transfer-Encoding:\x0bchunked\r\n",
    "FF after a transfer coding": b"Transfer-Encoding: chunked\x0c\r\n",
    "VT before a length": b"Content-Length:\x0b8\r\n",
    "NUL in a name": b"X-A\x00b: 1\r\n",
    "NBSP in a name": b"X-A\xa0b: 1\r\n",
    "space before the colon": b"Content-Length : 8\r\n",
    "a folded line (obs-fold)": b"X-A: 1\r\n  continued\r\n",
    "an empty name": b": 1\r\n",
    "NUL in a value": b"X-A: a\x00b\r\n",
    "DEL in a value": b"X-A: a\x7fb\r\n",
    "ESC in a value": b"X-A: \x1b[31m\r\n",
}


@pytest.fixture(scope="module")
def port():
    listener = Listener("127.0.0.1:0", {"/healthz": lambda: (200, "text/plain", b"ok")},
                        post_routes={"/x": lambda body: (200, "application/json", body)}).start()
    yield listener.port
    listener.stop()


def exchange(port: int, data: bytes) -> tuple[bytes, bool]:
    """The answer to `data`, and whether the server closed the connection after it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received or len(received) < received.find(b"\r\n\r\n") + 4 + _length(received):
            chunk = sock.recv(65536)
            if not chunk:
                return received, True
            received += chunk
        sock.settimeout(10)
        return received, sock.recv(1) == b""


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


@pytest.mark.parametrize("field", MALFORMED.values(), ids=MALFORMED.keys())
def test_each_malformed_header_field_is_a_400_and_a_close(port, field):
    for head in (b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"):
        answer, closed = exchange(port, head + field + b"\r\n" + (BODY if head.startswith(b"POST") else b""))
        assert answer.startswith(b"HTTP/1.1 400 "), (field, answer[:200])
        assert b"Connection: close" in answer and closed, field


@pytest.mark.parametrize("method", [b"G\x00T", b"GE(T", b"G\xa0T"])
def test_a_method_that_is_not_a_token_is_a_400(port, method):
    answer, closed = exchange(port, method + b" /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and closed


def test_tabs_and_spaces_around_a_value_and_obs_text_inside_it_are_fine(port):
    answer, closed = exchange(port, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length:\t 8 \t\r\n"
                                    b"X-A: caf\xe9\tau lait\r\nConnection: close\r\n\r\n" + BODY)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(BODY) and closed
