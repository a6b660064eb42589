"""The verbs' port of `extender serve` (`extender.server.listener` in the gunicorn
worker): which bytes make a complete request, and end to end that every kind of request
gets its answer (pipelines, split and half-closed requests, chunked and Expect bodies,
oversized bodies, slow clients, many connections), for both worker classes."""

from __future__ import annotations

import socket
import threading
import warnings

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from extender.config import build_config
from extender.request.lane import LOOP, POOL
from extender.server.app import INLINE_MAX_BYTES, App
from extender.server.http1 import MAX_HEAD_BYTES, Refused, Request
from testing.live import NAMES, request, start, stop

BODY = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None, "NodeNames": NAMES})
FEASIBLE = ["od-a1", "od-b1", "spot-a1", "spot-b1"]
INCOMPLETE = -1


def post(body: bytes = BODY, path: str = "/filter", extra: bytes = b"") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


# --- which bytes make a whole request -----------------------------------------------------

HEAD = b"POST /filter HTTP/1.1\r\nHost: x\r\n"
LIMIT = 1 << 20


def size_of(data: bytes, limit: int = LIMIT) -> int | str:
    """Where the first request in `data` ends; INCOMPLETE; or the refusal's status."""
    buf = bytearray(data)
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return INCOMPLETE
    try:
        return Request.parse(bytes(buf[:end]), limit).end(buf, limit)
    except Refused as exc:
        return f"refused {exc.status}"


@pytest.mark.parametrize(("data", "expected"), [
    (post(b"{}"), len(post(b"{}"))),
    (post(b"{}") + b"GET /healthz HTTP/1.1\r\n", len(post(b"{}"))),  # pipelined: first only
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 34),  # no body
    (b"GET /healthz HTTP/1.0\r\n\r\n", 25),
    (post(b"{}")[:-1], INCOMPLETE),  # body not all here
    (HEAD, INCOMPLETE),  # head not all here
    (b"", INCOMPLETE),
    (HEAD + b"content-length: 2\r\n\r\n{}", len(HEAD) + 23),  # names are case-insensitive
    (HEAD + b"Content-Length:2\r\n\r\n{}", len(HEAD) + 22),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", len(HEAD) + 42),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2;ext=1\r\n{}\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", len(HEAD) + 64),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n", INCOMPLETE),  # the last chunk, no empty line yet
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{", INCOMPLETE),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n", "refused 400"),  # not hex
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", "refused 400"),  # no CRLF after the data
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 20 + b"\r\n", "refused 400"),  # a size past 64 bits
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 1100, "refused 400"),  # no end of the size line
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % (LIMIT + 1), "refused 413"),
    (HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n", "refused 400"),
    (HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}", "refused 400"),
    (HEAD.replace(b"1.1", b"1.0") + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "refused 400"),
    (HEAD + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n", INCOMPLETE),  # 100 sent
    (HEAD + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", len(HEAD) + 45),
    (HEAD + b"Upgrade: h2c\r\nContent-Length: 0\r\n\r\n", len(HEAD) + 35),  # no upgrade: answered
    (HEAD + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "refused 400"),
    (HEAD + b"Content-Length: -2\r\n\r\n{}", "refused 400"),
    (HEAD + b"Content-Length: 0x2\r\n\r\n{}", "refused 400"),
    (HEAD + b"Content-Length : 2\r\n\r\n{}", "refused 400"),  # space before the colon
    (HEAD + b"X-A: 1\r\n  folded\r\nContent-Length: 2\r\n\r\n{}", "refused 400"),
    (HEAD + b"No colon\r\n\r\n", "refused 400"),
    (HEAD + b"\r\n", "refused 411"),  # a POST without a length
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "refused 400"),  # HTTP/2 preface
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", "refused 414"),
    (HEAD + b"Content-Length: %d\r\n\r\n" % (LIMIT + 1), "refused 413"),  # over the limit, unread
])
def test_a_request_is_whole_once_its_framing_says_so(data, expected):
    assert size_of(data) == expected


def test_a_chunked_body_is_scanned_once_however_it_arrives():
    """The scan resumes where it stopped: 20,000 one-byte chunks arriving one at a time
    cost one pass, not 20,000."""
    buf = bytearray(HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
    request = Request.parse(bytes(buf[:-4]), LIMIT)
    for _ in range(20_000):
        buf += b"1\r\nx\r\n"
        assert request.end(buf, LIMIT) == INCOMPLETE
    assert request.chunked[0] == len(buf)
    buf += b"0\r\n\r\n"
    end = request.end(buf, LIMIT)
    assert end == len(buf)
    request.take_body(buf, end)
    assert request.body == b"x" * 20_000 and request.body_size == 20_000


# --- end to end ------------------------------------------------------------------------

def read_response(sock: socket.socket, pending: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body; bytes after it stay in `pending`."""
    while b"\r\n\r\n" not in pending:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {bytes(pending)!r}"
        pending += chunk
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    size = int(headers.get("content-length", "0"))  # none on 100 Continue
    while len(rest) < size:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    pending[:] = rest[size:]
    return int(status_line.split()[1]), headers, rest[:size]


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


@pytest.fixture(scope="module", params=["inline", "pool"])
def server(request):
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", request.param,
                       "--max-body-bytes", str(2 * INLINE_MAX_BYTES), "--log-level", "warning")
    yield port
    stop(proc)


def test_keep_alive_requests_on_one_connection(server):
    with connect(server) as sock:
        pending = bytearray()
        for _ in range(30):
            sock.sendall(post())
            status, _, body = read_response(sock, pending)
            assert status == 200
            assert orjson.loads(body)["NodeNames"] == FEASIBLE


def test_pipelined_requests_are_answered_in_order(server):
    with connect(server) as sock:
        sock.sendall(post() + post(path="/prioritize") + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     + post() * 20)
        pending = bytearray()
        assert orjson.loads(read_response(sock, pending)[2])["NodeNames"] == FEASIBLE
        # slim: the hosts off the most common score, 30 (od-b1 and spot-c1 carry PreferNoSchedule taints)
        assert orjson.loads(read_response(sock, pending)[2]) == [
            {"Host": h, "Score": -30} for h in ("od-b1", "spot-c1")]
        assert read_response(sock, pending)[2] == b"ok"
        for _ in range(20):  # more than one burst
            assert orjson.loads(read_response(sock, pending)[2])["NodeNames"] == FEASIBLE


def test_a_request_arriving_in_pieces(server):
    data = post()
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for cut in (5, 40, len(data) - 10, len(data) - 1):  # inside the head, then the body
            sock.sendall(data[:cut])
            threading.Event().wait(0.05)
            sock.sendall(data[cut:])
            status, _, body = read_response(sock, bytearray())
            assert status == 200
            assert orjson.loads(body)["NodeNames"] == FEASIBLE


def test_a_half_closed_client_still_gets_its_answer(server):
    with connect(server) as sock:
        sock.sendall(post())
        sock.shutdown(socket.SHUT_WR)
        status, _, body = read_response(sock, bytearray())
        assert status == 200
        assert orjson.loads(body)["NodeNames"] == FEASIBLE


def test_connection_close_is_honoured(server):
    with connect(server) as sock:
        sock.sendall(post(extra=b"Connection: close\r\n"))
        pending = bytearray()
        assert read_response(sock, pending)[0] == 200
        assert sock.recv(10) == b""  # the server closed


@pytest.mark.parametrize("framing", ["chunked", "expect"])
def test_bodies_the_pool_reads(server, framing):
    with connect(server) as sock:
        if framing == "chunked":
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n")
        else:
            sock.sendall(post(extra=b"Expect: 100-continue\r\n"))
        pending = bytearray()
        status, _, body = read_response(sock, pending)
        if status == 100:
            status, _, body = read_response(sock, pending)
        assert status == 200
        assert orjson.loads(body)["NodeNames"] == FEASIBLE
        sock.sendall(post())  # and the connection goes on
        assert orjson.loads(read_response(sock, pending)[2])["NodeNames"] == FEASIBLE


def test_a_body_larger_than_inline_requests_is_still_answered(server):
    padded = BODY[:-1] + b',"Padding":"' + b"x" * INLINE_MAX_BYTES + b'"}'
    status, data = request(server, "POST", "/filter", padded)
    assert status == 200
    assert orjson.loads(data)["NodeNames"] == FEASIBLE
    status, data = request(server, "POST", "/filter", b"x" * (2 * INLINE_MAX_BYTES + 1))
    assert status == 413
    assert b"exceeds the limit" in data


def test_malformed_requests_get_4xx_and_the_server_keeps_serving(server):
    for junk, code in ((b"NOT HTTP AT ALL\r\n\r\n", 400),
                       (b"POST /filter HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
                       (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n", 414)):
        with connect(server) as sock:
            sock.sendall(junk)
            assert read_response(sock, bytearray())[0] == code
    assert request(server, "GET", "/healthz") == (200, b"ok")


@pytest.mark.parametrize("server", ["inline"], indirect=True)  # pool threads would wait
def test_a_stalled_client_does_not_hold_up_others(server):
    stalled = [connect(server) for _ in range(8)]  # more than the pool's threads
    try:
        for i, sock in enumerate(stalled):
            sock.sendall(post()[: 10 + 30 * i])  # heads and bodies cut short
        for _ in range(5):
            status, data = request(server, "POST", "/filter", BODY)
            assert status == 200
            assert orjson.loads(data)["NodeNames"] == FEASIBLE
    finally:
        for sock in stalled:
            sock.close()


def test_many_connections_at_once(server):
    errors: list[str] = []

    def client() -> None:
        try:
            with connect(server) as sock:
                pending = bytearray()
                for _ in range(10):
                    sock.sendall(post())
                    status, _, body = read_response(sock, pending)
                    if status != 200 or orjson.loads(body)["NodeNames"] != FEASIBLE:
                        errors.append(f"{status} {body[:100]!r}")
        except Exception as exc:  # collected, asserted below
            errors.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("head", [
    b"POST /filter HTTP/1.1\r\nHost: x\r\n",
    b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\n",  # under a prefix
    b"POST /filter HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n",
    b"POST /%66ilter HTTP/1.1\r\nHost: x\r\n",  # percent-encoded
    b"POST /filter?pod=x HTTP/1.1\r\nHost: x\r\n",  # a query
    b"POST http://x/filter HTTP/1.1\r\nHost: x\r\n",  # absolute form
    b"POST /filter HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n",
])
def test_every_way_to_reach_a_verb_gets_the_same_answer(server, head):
    with connect(server) as sock:
        pending = bytearray()
        for _ in range(2):  # and the connection stays usable
            sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
            status, headers, body = read_response(sock, pending)
            assert status == 200
            assert headers["content-type"] == "application/json"
            assert "date" in headers
            assert headers.get("connection", "keep-alive").lower() == "keep-alive"
            assert orjson.loads(body)["NodeNames"] == FEASIBLE


def test_verb_errors_from_the_buffered_path(server):
    with connect(server) as sock:
        pending = bytearray()
        sock.sendall(post(b"{oops"))
        status, headers, body = read_response(sock, pending)
        assert (status, headers["content-type"]) == (400, "application/json")
        assert "malformed JSON" in orjson.loads(body)["error"]
        sock.sendall(post(b'{"NodeNames": []}'))  # no Pod: filter answers 200 with Error
        status, _, body = read_response(sock, pending)
        assert status == 200 and orjson.loads(body)["Error"]
        sock.sendall(post(b'{"NodeNames": []}', path="/prioritize"))
        assert read_response(sock, pending)[0] == 400


@pytest.mark.parametrize("server", ["inline"], indirect=True)  # pool waits for the end
def test_a_head_that_never_ends_is_refused(server):
    with connect(server) as sock:
        sock.sendall(b"POST /filter HTTP/1.1\r\nX-Pad: " + b"a" * (2 * MAX_HEAD_BYTES))
        assert read_response(sock, bytearray())[0] == 431
        assert sock.recv(10) == b""  # and closed
    assert request(server, "GET", "/healthz") == (200, b"ok")


@pytest.mark.parametrize("worker_class, lane", [("inline", LOOP), ("pool", POOL), ("gthread", POOL)])
def test_a_cheap_verb_runs_where_its_worker_class_says(example_extender, worker_class, lane):
    """inline answers a small verb on the event loop; pool, and gthread (its deprecated
    name), on a pool thread."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        config = build_config({"worker_class": worker_class}, env={})
    app = App(example_extender, config)
    assert app.place(Request("POST", "/filter", BODY)) == lane


def test_gthread_serves_as_pool_and_logs_that_it_is_deprecated():
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", "gthread")
    try:
        status, body = request(port, "POST", "/filter", BODY)
        assert status == 200 and orjson.loads(body)["NodeNames"] == FEASIBLE
    finally:
        stop(proc)
    lines = [orjson.loads(line) for line in proc.stderr.read().splitlines() if line.startswith(b"{")]
    deprecated = [line for line in lines if "deprecated" in line["msg"]]
    assert [(line["level"], line["msg"]) for line in deprecated] == [(
        "warning", "--worker-class: 'gthread' is deprecated and will be removed: it names the "
        "'pool' worker class (every verb on a --threads pool thread); use 'pool'")]
