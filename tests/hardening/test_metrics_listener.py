"""`--metrics-listen`: health, readiness and metrics on their own listener, answering
while verbs are busy and while clients misbehave on either port."""

from __future__ import annotations

import socket
import threading
import time

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from extender.server.listener import Listener
from perf.attacks import closed
from testing.live import NAMES, free_port, request, start, stop

BODY = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None, "NodeNames": NAMES})


def test_routes_404_and_head():
    listener = Listener("127.0.0.1:0", {"/healthz": lambda: (200, "text/plain", b"ok")}).start()
    try:
        assert request(listener.port, "GET", "/healthz") == (200, b"ok")
        assert request(listener.port, "GET", "/healthz?verbose=1") == (200, b"ok")
        status, body = request(listener.port, "GET", "/nope")
        assert status == 404 and orjson.loads(body) == {"error": "not found"}
        assert request(listener.port, "POST", "/healthz", b"{}")[0] == 405  # GET only
        assert request(listener.port, "POST", "/nope", b"{}")[0] == 404
    finally:
        listener.stop()


def test_a_failing_route_answers_500_json():
    def broken():
        raise RuntimeError("boom")

    listener = Listener("127.0.0.1:0", {"/metrics": broken}).start()
    try:
        status, body = request(listener.port, "GET", "/metrics")
        assert status == 500 and orjson.loads(body) == {"error": "internal error"}
    finally:
        listener.stop()


def test_stalled_and_excess_connections_do_not_stop_probes():
    listener = Listener("127.0.0.1:0", {"/healthz": lambda: (200, "text/plain", b"ok")},
                        timeout=1.0, max_connections=8).start()
    stalled = []
    try:
        for _ in range(20):  # more than the cap: the extra ones are closed on accept
            sock = socket.create_connection(("127.0.0.1", listener.port))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # never finished
            stalled.append(sock)
        # the stalled ones time out (or are closed on accept) and free their slots: the
        # server's closes, not a clock (when they come is bounded in test_listener_attacks)
        deadline = time.monotonic() + 30
        while not all(closed(sock) for sock in stalled):
            assert time.monotonic() < deadline, "stalled connections still open after 30 s"
            time.sleep(0.05)
        assert request(listener.port, "GET", "/healthz") == (200, b"ok")  # "answers", not "is fast"
    finally:
        for sock in stalled:
            sock.close()
        listener.stop()


@pytest.mark.gunicorn
@pytest.mark.parametrize("worker_class", ["inline", "pool"])
def test_probes_answer_while_verbs_are_busy(worker_class):
    metrics_port = free_port()
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", worker_class,
                       "--metrics-listen", f"127.0.0.1:{metrics_port}", "--log-level", "warning")
    stop_load = threading.Event()
    errors: list[str] = []
    filtered = [0]  # filters answered so far (six writers: += on a list item is not atomic)
    lock = threading.Lock()

    def load() -> None:
        while not stop_load.is_set():
            try:
                status, _ = request(port, "POST", "/filter", BODY)
                if status != 200:
                    errors.append(str(status))
                with lock:
                    filtered[0] += 1
            except OSError as exc:
                errors.append(repr(exc))

    def probe(path: str) -> None:
        status, body = request(metrics_port, "GET", path)  # its timeout is a hang guard, not a verdict
        assert status == 200, (path, body)

    workers = [threading.Thread(target=load) for _ in range(6)]
    try:
        # "answers", not "is fast": every probe answered while the verbs were busy (filters
        # answered before the first probe and after the last), whatever this machine's speed
        for t in workers:
            t.start()
        while filtered[0] < 6 and not errors:
            time.sleep(0.01)
        before = filtered[0]
        for _ in range(30):
            for path in ("/healthz", "/readyz", "/metrics"):
                probe(path)
            time.sleep(0.02)
        during = filtered[0] - before
        assert during > 0, "the verbs were idle while the probes ran: the test proved nothing"
        assert b"extender_http_requests_total" in request(metrics_port, "GET", "/metrics")[1]
        assert request(port, "GET", "/healthz") == (200, b"ok")  # the main port serves them too
    finally:
        stop_load.set()
        for t in workers:
            t.join()
        stop(proc)
    assert errors == []


def test_an_unusable_metrics_address_is_a_clear_start_up_error(capsys):
    from extender.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--listen", f"127.0.0.1:{free_port()}",
                     "--metrics-listen", f"127.0.0.1:{port}"])
    assert code == 2
    assert "--metrics-listen: cannot listen on" in capsys.readouterr().err
