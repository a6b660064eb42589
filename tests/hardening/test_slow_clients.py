"""Slow and hostile clients, for each worker class: slowloris heads, stalled bodies of
every framing, long pipelines and 1,000 idle keep-alive connections. Throughout, health
(on both listeners) and a normal `/filter` must answer, correctly: "answers", not "is
fast" (latency numbers belong in perf/). No verdict rests on the clock: where an attack
could hold the server until the attackers' own deadline, the answer must come while the
attackers are still connected, i.e. before the server cut them."""

from __future__ import annotations

import resource
import socket
import threading
import time

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from extender.server.app import REQUEST_READ_TIMEOUT
from perf.attacks import closed
from testing.live import NAMES, free_port, request, start, stop

# one pytest-xdist worker runs the module: the module's servers made once, not once per worker
pytestmark = pytest.mark.xdist_group("hardening/test_slow_clients")

BODY = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None, "NodeNames": NAMES})
FEASIBLE = ["od-a1", "od-b1", "spot-a1", "spot-b1"]


def post(body: bytes = BODY, extra: bytes = b"") -> bytes:
    return (b"POST /filter HTTP/1.1\r\nHost: x\r\n" + extra + b"Content-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.fixture(scope="module", params=["inline", "pool"])
def server(request):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:  # this test process holds 1,000+ sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    metrics = free_port()
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", request.param,
                       "--metrics-listen", f"127.0.0.1:{metrics}", "--log-level", "error")
    assert_served((port, metrics))
    yield port, metrics
    stop(proc)


def assert_served(ports: tuple[int, int]) -> None:
    """Health on both listeners and a correct /filter (the request's timeout is only a
    hang guard: a slow machine is slow, not wrong)."""
    port, metrics = ports
    for target, method, path, body in ((port, "POST", "/filter", BODY), (port, "GET", "/healthz", None),
                                       (metrics, "GET", "/healthz", None), (metrics, "GET", "/readyz", None)):
        status, data = request(target, method, path, body)
        assert status == 200, (path, status, data[:200])
        if path == "/filter":
            assert orjson.loads(data)["NodeNames"] == FEASIBLE


def read_one(sock: socket.socket) -> bytes:
    """One whole response (head and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return head + b"\r\n\r\n" + body


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def test_stalled_requests_of_every_framing(server):
    """More stalled requests than pool threads, of every framing; none holds a thread."""
    beginnings = [
        post()[:-5],  # Content-Length body cut short
        post()[:20],  # head cut short
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n" + b"{" * 5000,  # > 1 MiB
        b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
        b"POST /filter HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n",
    ]
    stalled = []
    try:
        for _ in range(4):
            for data in beginnings:
                sock = connect(server[0])
                sock.sendall(data)
                stalled.append(sock)
        time.sleep(0.3)
        assert_served(server)
        # answered while they still hold: a thread they held would have waited for their cut
        holding = [sock for i, sock in enumerate(stalled) if i % len(beginnings) != 2]  # > 1 MiB: may be cut at once
        assert not any(closed(sock) for sock in holding), "answered only after the stalled requests were cut"
        for _ in range(2):
            assert_served(server)
        # the server gives up on them after REQUEST_READ_TIMEOUT (100 Continue aside)
        deadline = time.monotonic() + REQUEST_READ_TIMEOUT + 30  # generous: a cut that never comes fails
        for sock in stalled:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            assert not data or data.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), data[:100]
    finally:
        for sock in stalled:
            sock.close()


def test_slowloris_heads_trickling_in(server):
    stop_flag = threading.Event()
    errors: list[str] = []
    head = post()

    def trickle() -> None:
        socks = [connect(server[0]) for _ in range(40)]
        try:
            for i in range(len(head)):
                if stop_flag.is_set():
                    return
                for sock in socks:
                    sock.sendall(head[i:i + 1])
                time.sleep(0.05)
        except OSError as exc:  # closed by the server's read deadline: fine
            errors.append(repr(exc))
        finally:
            for sock in socks:
                sock.close()

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        for _ in range(10):
            assert_served(server)
            time.sleep(0.1)
    finally:
        stop_flag.set()
        thread.join()


def test_long_and_mixed_pipelines(server):
    chunked = (b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n")
    big = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None,
                        "NodeNames": NAMES + ["x" * 100] * 12_000})  # > 1 MiB: a pool thread
    pipeline = (post() * 50 + chunked + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + post(big)
                + post(extra=b"Expect: 100-continue\r\n") + post())
    with connect(server[0]) as sock:
        sock.sendall(pipeline)
        data = b""
        deadline = time.monotonic() + 60  # generous: the loop ends at the 55th answer
        while data.count(b"HTTP/1.1 200 OK") < 55 and time.monotonic() < deadline:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 55
    # the Expect request's body came with it: no 100 Continue is needed (one is harmless)
    assert data.count(b"HTTP/1.1 ") - 55 == data.count(b"HTTP/1.1 100 Continue") <= 1
    assert_served(server)


def test_a_thousand_idle_keep_alive_connections(server):
    idle = []
    try:
        for i in range(1000):
            sock = connect(server[0])
            idle.append(sock)
            if i % 2:  # one request, then idle on a kept-alive connection
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_one(sock).startswith(b"HTTP/1.1 200")
        for _ in range(5):
            assert_served(server)
        for sock in idle[1::100]:  # kept-alive ones still work
            sock.sendall(post())
            answer = read_one(sock)
            assert answer.startswith(b"HTTP/1.1 200")
            assert orjson.loads(answer.partition(b"\r\n\r\n")[2])["NodeNames"] == FEASIBLE
    finally:
        for sock in idle:
            sock.close()
