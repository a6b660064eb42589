"""perf/replay.py, the ceiling mode's front for the extender: it must replay the real
answer's bytes for a workload's later pods, ask the extender again every `refresh`
requests of a key, forward every other verb, and answer a failed upstream with a 502
while it keeps serving. Otherwise the ceiling it measures is not the one it claims."""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from perf.replay import Replay, serve


class Upstream(http.server.BaseHTTPRequestHandler):
    """Answers with the path and the number of calls so far: each answer is unique."""

    calls: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        Upstream.calls.append(self.path)
        if self.path.endswith("/broken"):
            self.connection.close()  # no answer at all
            return
        body = json.dumps({"path": self.path, "call": len(Upstream.calls)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def front() -> Iterator[http.client.HTTPConnection]:
    Upstream.calls = []
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve, args=(Replay(upstream.server_address[1], refresh=3), server),
                     daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.getsockname()[1], timeout=10)
    yield conn
    conn.close()
    server.close()
    upstream.shutdown()


def post(conn: http.client.HTTPConnection, verb: str, pod: str) -> tuple[int, bytes]:
    body = json.dumps({"Pod": {"metadata": {"name": pod, "namespace": "perf"}},
                       "NodeNames": [f"node-{i}" for i in range(2000)]}).encode()  # > one recv
    conn.request("POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def test_a_workloads_later_pods_get_the_kept_answer_refreshed_every_n(front: http.client.HTTPConnection) -> None:
    answers = [post(front, "filter", f"sp-hard-spread-{800_000 + i:06d}") for i in range(7)]
    assert [a[0] for a in answers] == [200] * 7
    calls = [json.loads(a[1])["call"] for a in answers]
    assert calls == [1, 1, 1, 2, 2, 2, 3]  # asked at requests 1, 4 and 7 of the key
    assert len(Upstream.calls) == 3


def test_keys_are_verb_and_workload_and_other_verbs_always_go_through(front: http.client.HTTPConnection) -> None:
    first = json.loads(post(front, "filter", "sp-soft-spread-800000")[1])
    other = json.loads(post(front, "filter", "sp-node-affinity-800000")[1])
    scores = json.loads(post(front, "prioritize", "sp-soft-spread-800000")[1])
    assert (first["call"], other["call"], scores["call"]) == (1, 2, 3)
    assert scores["path"] == "/scheduler/prioritize"
    binds = [json.loads(post(front, "bind", "sp-soft-spread-800000")[1])["call"] for _ in range(2)]
    assert binds == [4, 5]


def test_a_failed_upstream_is_a_502_and_the_front_keeps_serving(front: http.client.HTTPConnection) -> None:
    status, body = post(front, "broken", "sp-soft-spread-800000")
    assert status == 502 and json.loads(body)["Error"].startswith("replay: ")
    assert post(front, "filter", "sp-soft-spread-800001")[0] == 200
