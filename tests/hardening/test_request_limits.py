"""Request limits of a live `extender serve` (issue #28): a broken chunked framing is a
400 on every path that takes a body (gunicorn's InvalidChunkSize escaped as a 500; since
issue #35 the others refuse any body before it is read), and the in-flight byte budget
sheds requests with 503 + Retry-After while small ones keep being answered."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from testing.live import NAMES, free_port, request, start, stop

# one pytest-xdist worker runs the module: the module's servers made once, not once per worker
pytestmark = pytest.mark.xdist_group("hardening/test_request_limits")

BODY = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None, "NodeNames": NAMES})
PATHS = ["/filter", "/prioritize", "/bind", "/preempt", "/scheduler/filter", "/healthz", "/readyz",
         "/metrics", "/nope"]
BROKEN = [
    b"zz\r\n{}\r\n0\r\n\r\n",  # a size that is not hex
    b"2\r\n{}XX0\r\n\r\n",  # no CRLF after the chunk
    b"1" * 20 + b"\r\n{}\r\n0\r\n\r\n",  # a size past 64 bits
    b"-1\r\n{}\r\n0\r\n\r\n",
]


def status_of(sock: socket.socket, data: bytes) -> int:
    """Send `data`, read one answer's status line (0: closed without an answer)."""
    sock.settimeout(10)
    sock.sendall(data)
    received = b""
    while b"\r\n" not in received:
        try:
            chunk = sock.recv(4096)
        except OSError:
            return 0
        if not chunk:
            return 0
        received += chunk
    return int(received.split(b" ", 2)[1])


def chunked(path: str, body: bytes, method: str = "POST") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n").encode() + body


@pytest.fixture(scope="module", params=["inline", "pool"])
def server(request):
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", request.param, "--log-level", "error")
    yield port
    stop(proc)


# the requests that take a body; any other request that declares one is refused before
# its body is read (health and metrics take none: issue #35)
TAKES_BODY = {("POST", p) for p in ("/filter", "/prioritize", "/bind", "/preempt", "/scheduler/filter")}
NO_BODY = {("GET", "/healthz"): 413, ("GET", "/readyz"): 413, ("GET", "/metrics"): 413,
           ("POST", "/healthz"): 405, ("POST", "/readyz"): 405, ("POST", "/metrics"): 405,
           ("POST", "/nope"): 404, ("GET", "/nope"): 404}


@pytest.mark.gunicorn
def test_broken_chunked_framing_is_a_400_on_every_path_that_takes_a_body(server):
    for path in PATHS:
        for body in BROKEN:
            for method in ("POST", "GET"):
                with socket.create_connection(("127.0.0.1", server)) as sock:
                    code = status_of(sock, chunked(path, body, method))
                expected = 400 if (method, path) in TAKES_BODY else NO_BODY.get((method, path), 405)
                assert code == expected, (path, method, body, code)
    assert request(server, "POST", "/filter", BODY)[0] == 200


@pytest.mark.gunicorn
def test_broken_chunked_framing_is_a_400_over_tls(tmp_path):
    """With --verbs-tls gunicorn's own parser reads the body (no buffering on the loop):
    the app answers the InvalidChunkSize it meets with a 400."""
    from validation.pki import CA, write_pair

    ca = CA.create()
    cert, key, _ = ca.issue("verbs")
    cert_path, key_path = write_pair(tmp_path, cert, key)
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--cluster", str(EXAMPLES / "cluster.yaml"),
         "--listen", f"127.0.0.1:{port}", "--metrics-listen", "off", "--verbs-tls", "true",
         "--tls-cert-file", str(cert_path), "--tls-private-key-file", str(key_path), "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") as s:
                    if status_of(s, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n") == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        for path in ("/filter", "/prioritize", "/preempt", "/bind"):
            for body in (BROKEN[0], BROKEN[1], BROKEN[3]):  # a 20-digit size waits for its bytes
                with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") as s:
                    code = status_of(s, chunked(path, body))
                assert code == 400, (path, body, code)
    finally:
        stop(proc)


def status_or_shed(port: int, body: bytes) -> int:
    """A /filter's status; 503 when it was shed (and closed) while its body was sent."""
    try:
        return request(port, "POST", "/filter", body)[0]
    except OSError:
        return 503


def shed_answers(socks: list[socket.socket], at_least: int, timeout: float = 30.0) -> list[bytes]:
    """What each socket has received, once `at_least` of them hold a whole 503 head (or
    at `timeout`): a socket stops reading at EOF or a reset."""
    answers, done = [b""] * len(socks), [False] * len(socks)
    deadline = time.monotonic() + timeout
    while sum(a.startswith(b"HTTP/1.1 503 ") and b"\r\n\r\n" in a for a in answers) < at_least \
            and time.monotonic() < deadline:
        for i, sock in enumerate(socks):
            if done[i]:
                continue
            sock.setblocking(False)
            try:
                chunk = sock.recv(4096)
                answers[i] += chunk
                done[i] = not chunk
            except BlockingIOError:
                pass
            except OSError:
                done[i] = True
        time.sleep(0.02)
    return answers


@pytest.mark.gunicorn
@pytest.mark.parametrize("worker_class", ["inline", "pool"])
def test_bodies_past_the_in_flight_budget_are_shed_and_small_requests_still_answered(worker_class):
    """8 stalled 4 MiB bodies against a 20 MiB budget (4 MiB for large requests once 16
    MiB are kept for small ones): those past it get 503 + Retry-After at once, a small
    /filter is answered meanwhile, and once they are gone a large request fits again."""
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", worker_class, "--log-level", "error",
                       "--max-body-bytes", str(4 << 20), "--max-inflight-bytes", str(20 << 20))
    stalled = []
    try:
        size = 4 << 20
        for _ in range(8):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
            try:
                sock.sendall(b" " * (3 << 20))  # 3 MiB of 4: never completes
            except OSError:
                pass  # shed and closed while sending
            stalled.append(sock)
        answers = shed_answers(stalled, 7)  # their answers, however long the server took
        shed = [a for a in answers if a.startswith(b"HTTP/1.1 503 ") and b"\r\n\r\n" in a]
        assert len(shed) >= 7, answers
        assert all(b"Retry-After: 1\r\n" in a for a in shed)
        assert request(port, "POST", "/filter", BODY)[0] == 200  # a small one is answered meanwhile
        for sock in stalled:
            sock.close()
        big = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None, "NodeNames": NAMES,
                            "pad": "x" * (3 << 20)})
        # fits again once the server has seen them go (shed until then), not after a clock
        deadline = time.monotonic() + 30
        while (status := status_or_shed(port, big)) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == 200
        metrics = request(port, "GET", "/metrics")[1].decode()
        assert 'extender_requests_shed_total{listener="verbs"}' in metrics
    finally:
        for sock in stalled:
            sock.close()
        stop(proc)
