"""Hostile pods (issue #12): with several pods whose CEL tolerations sit at the cost
limit in flight at once, a cheap pod's `/filter` and `/prioritize` and `/healthz` are
answered while every hostile request is still being worked on, with the default
`inline` worker and with `pool` on fewer threads than hostile callers.

The hostile expressions need ~1,000,000 cost units per taint (most of a second each,
three distinct taints, one expensive evaluation at a time), so none can be answered before the request deadline; the
test asserts order (cheap answers first, every hostile one still open), not
milliseconds, and that each hostile request ends in an answer: an `Error` naming the
deadline, or a verdict on a machine fast enough to finish.
"""

from __future__ import annotations

import http.client
import re
import threading
import time

import orjson
import pytest

from perf.hostile import hostile_expression
from testing.live import free_port, request, start, stop

HOSTILE = 6
TAINTS = [("dedicated", "gpu"), ("zone", "a"), ("example.com/kernel", "5.15.0")]
NODES = [f"node-{i}" for i in range(len(TAINTS))]


def cluster() -> dict:
    items = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
              "spec": {"taints": [{"key": key, "value": value, "effect": "NoSchedule"}]},
              "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}
             for name, (key, value) in zip(NODES, TAINTS, strict=True)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def body(name: str, expression: str) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": name},
           "spec": {"containers": [{"name": "c", "image": "x"}],
                    "tolerations": [{"expression": expression}]}}
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": NODES})


def at_cost_limit(n: int) -> str:
    """Admitted (566,011 units estimated) and runs for about a second of CPU per taint
    (perf/hostile.py's expression)."""
    return hostile_expression(n)


def compiled(metrics_port: int) -> float:
    """Expressions compiled so far (program-cache misses)."""
    text = request(metrics_port, "GET", "/metrics")[1].decode()
    match = re.search(r'^extender_cel_program_cache_requests_total\{result="miss"\} (\S+)$',
                      text, re.M)
    return float(match.group(1)) if match else 0.0


@pytest.fixture(params=["inline", "pool"])
def server(request, tmp_path):
    path = tmp_path / "cluster.json"
    path.write_bytes(orjson.dumps(cluster()))
    metrics_port = free_port()
    # a 10 s deadline: room for the compiles and the cheap requests on a slow machine
    # before the first hostile request may end
    port, proc = start(path, "--worker-class", request.param, "--threads", "2",
                       "--inflight-wait", "0", "--request-deadline", "10", "--log-level", "warning",
                       "--metrics-listen", f"127.0.0.1:{metrics_port}")
    yield port, metrics_port
    stop(proc)


def test_cheap_requests_are_answered_while_hostile_ones_are_in_flight(server):
    port, metrics_port = server
    cheap = body("cheap", "taint.key.startsWith('zone')")
    status, answer = request(port, "POST", "/filter", cheap)  # compiled and memoised
    assert status == 200 and orjson.loads(answer)["NodeNames"] == ["node-1"]
    before = compiled(metrics_port)

    answers: list[tuple[int, dict] | None] = [None] * HOSTILE
    done = [threading.Event() for _ in range(HOSTILE)]
    sent = threading.Barrier(HOSTILE + 1)

    def hostile(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            # two of them on gunicorn's parser path (a Connection header, a chunked body),
            # which must be handed on intact to the thread that finally answers them
            headers = {"Content-Type": "application/json"}
            if i == 0:
                headers["Connection"] = "keep-alive"
            payload = body(f"hostile-{i}", at_cost_limit(i))
            if i == 1:
                conn.request("POST", "/filter", body=iter([payload[:100], payload[100:]]),
                             headers=headers, encode_chunked=True)
            else:
                conn.request("POST", "/filter", body=payload, headers=headers)
            sent.wait()
            response = conn.getresponse()
            answers[i] = response.status, orjson.loads(response.read())
        finally:
            done[i].set()
            conn.close()

    threads = [threading.Thread(target=hostile, args=(i,)) for i in range(HOSTILE)]
    for thread in threads:
        thread.start()
    sent.wait()
    # every hostile expression has reached the server and been compiled: from here on
    # they all wait for, or run in, the expensive lane
    wait_until = time.monotonic() + 60
    while compiled(metrics_port) < before + HOSTILE:
        assert time.monotonic() < wait_until, "the hostile requests were never compiled"
        assert not any(e.is_set() for e in done), (
            "a hostile request was answered before the others reached the server: "
            "they are being worked through one after another")
        time.sleep(0.05)

    status, answer = request(port, "POST", "/filter", cheap)  # memoised: on the loop
    assert status == 200 and orjson.loads(answer)["NodeNames"] == ["node-1"]
    fresh = body("fresh", "taint.key == 'dedicated' && taint.value == 'gpu'")  # compiled now
    status, answer = request(port, "POST", "/filter", fresh)
    assert status == 200 and orjson.loads(answer)["NodeNames"] == ["node-0"]
    status, answer = request(port, "POST", "/prioritize", cheap)
    assert status == 200 and orjson.loads(answer) == []  # slim: the three nodes score alike
    assert request(port, "GET", "/healthz") == (200, b"ok")
    still_open = [i for i, e in enumerate(done) if not e.is_set()]
    assert still_open == list(range(HOSTILE)), "a cheap request waited for a hostile one"

    for thread in threads:
        thread.join(timeout=120)
    for status_answer in answers:
        assert status_answer is not None, "a hostile request got no answer"
        status, result = status_answer
        assert status == 200
        error = result.get("Error") or ""
        # out of time: an Error, never a verdict made up from a partial evaluation
        assert "deadline" in error or (not error and result["NodeNames"] == NODES), result
