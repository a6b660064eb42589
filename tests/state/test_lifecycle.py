"""The live state when something fails (issue #22): no verdict before every kind has
listed once or after the state went stale, silent watch streams found and resumed
without false alarms on a quiet cluster, keep-alive on the client's sockets."""

from __future__ import annotations

import socket
import time

import orjson
import pytest
from live_truth import start_live

from extender import metrics
from extender.config import Config
from extender.server.app import create_app
from extender.state.watchdog import Watchdog
from testing.apiserver import FakeApiServer
from testing.client import Client

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
SPREAD = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": "web"}}}]


def node(name: str, zone: str) -> dict:
    return {"metadata": {"name": name, "labels": {HOST: name, ZONE: zone}}}


def web(name: str, node_name: str = "") -> dict:
    return {"metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}, "uid": f"uid-{name}"},
            "spec": {"nodeName": node_name, "containers": [{"name": "c"}], "topologySpreadConstraints": SPREAD}}


def cluster(api: FakeApiServer) -> None:
    """Six web pods in zone a, none in zone b: a hard zone spread rules zone a out."""
    for name, zone in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        api.create("nodes", node(name, zone))
    for i in range(6):
        api.create("pods", web(f"w{i}", "a1" if i % 2 else "a2"))


def unready_count(verb: str, reason: str) -> float:
    return metrics.UNREADY_ANSWERS_TOTAL.labels(verb, reason)._value.get()


def call(client, verb: str, body: dict) -> tuple[int, dict]:
    response = client.post(f"/scheduler/{verb}", data=orjson.dumps(body), content_type="application/json")
    return response.status_code, orjson.loads(response.data)


def wait_until(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=3600) as server:  # bookmarks as rare as a real server's
        cluster(server)
        yield server


def test_no_verdict_before_every_kind_has_listed_once(api, tmp_path, caplog):
    """Right after a (re)start the pods are not listed yet: filter would offer zone a.
    Every verb refuses instead (filter/bind: Error; prioritize/preempt: 503)."""
    api.faults.fail_requests, api.faults.fail_match = 10**6, "/api/v1/pods?"
    source = start_live(api, tmp_path)
    try:
        wait_until(lambda: source.reflectors["Node"].synced.is_set())
        client = Client(create_app(Config(), source=source))
        args = {"Pod": web("new"), "NodeNames": ["a1", "a2", "b1"]}
        code, answer = call(client, "filter", args)
        assert code == 200 and answer["NodeNames"] is None, answer  # not a verdict offering zone a
        before = {v: unready_count(v, "not_synced") for v in ("prioritize", "preempt", "bind")}
        assert answer["Error"].startswith("cluster state not synced yet: initial list pending for Pod")
        assert call(client, "prioritize", args)[0] == 503
        code, answer = call(client, "preempt", {"Pod": web("new"), "NodeNameToMetaVictims": {}})
        assert code == 503 and "not synced" in answer["error"]
        code, answer = call(client, "bind", {"PodName": "new", "PodNamespace": "shop", "Node": "b1"})
        assert code == 200 and "not synced" in answer["Error"]
        assert api.get("pods", "new", "shop") is None  # nothing was bound (the pod does not even exist)
        for verb, n in before.items():
            assert unready_count(verb, "not_synced") == n + 1, verb
        assert unready_count("filter", "not_synced") >= 1
        assert any("cannot give a verdict; answering Error" in r.getMessage() for r in caplog.records)
        api.faults.fail_requests = 0
        assert source.wait_synced(20)
        code, answer = call(client, "filter", args)
        assert answer["Error"] == "" and answer["NodeNames"] == ["b1"]
    finally:
        source.stop()


def test_a_frozen_stream_on_a_quiet_cluster_is_found_and_resumed(api, tmp_path):
    """The stream stays open and says nothing (no bookmarks either, as a real server
    for a minute); a node is tainted in the API. The watchdog's probe sees the event
    the stream has not delivered and resumes it: the taint is seen, and readiness never
    fails while it waits (had the probe not confirmed the kind within --max-staleness,
    the state would have gone stale: that, not a stopwatch, is the verdict)."""
    source = start_live(api, tmp_path, max_staleness=6.0, watch_seconds=(600, 600))
    try:
        assert source.wait_synced(20)
        restarts = metrics.WATCH_ERRORS_TOTAL.labels("Node", "silent")._value.get()
        api.freeze_watches()
        time.sleep(0.2)
        tainted = api.get("nodes", "b1")
        tainted["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
        api.update("nodes", tainted)
        deadline = time.monotonic() + 120  # a hang guard: the verdict is readiness, each round
        while not source.snapshot().nodes.by_name["b1"].taints:
            assert source.ready(), source.readiness()
            assert time.monotonic() < deadline, "the taint was never seen"
            time.sleep(0.02)
        assert metrics.WATCH_ERRORS_TOTAL.labels("Node", "silent")._value.get() == restarts + 1
    finally:
        source.stop()


def test_a_quiet_cluster_never_looks_stale(api, tmp_path):
    """Nothing changes and no bookmark comes for 3x --max-staleness: the probes confirm
    the state, readiness never fails and no stream is restarted. --max-staleness is 4 s:
    a quiet kind is confirmed every ~2 s (0.67 s of silence, the watchdog's tick, a 1 s
    probe), so a busy machine has 2 s of slack before a false alarm (at 2 s it had 0.7)."""
    staleness = 4.0
    source = start_live(api, tmp_path, max_staleness=staleness, watch_seconds=(600, 600))
    try:
        assert source.wait_synced(20)
        silent = sum(metrics.WATCH_ERRORS_TOTAL.labels(k, "silent")._value.get() for k in source.reflectors)
        probes = sum("timeoutSeconds=1" in r for r in api.requests)
        end = time.monotonic() + 3 * staleness
        while time.monotonic() < end:
            assert source.unready() is None, source.unready()
            time.sleep(0.05)
        assert sum("timeoutSeconds=1" in r for r in api.requests) > probes + len(source.reflectors)
        assert sum(metrics.WATCH_ERRORS_TOTAL.labels(k, "silent")._value.get() for k in source.reflectors) == silent
    finally:
        source.stop()


def test_a_hung_server_makes_the_state_stale_and_the_verbs_refuse(api, tmp_path):
    """Streams frozen and new ones hung (headers, then nothing): nothing confirms the
    state any more. Past --max-staleness /readyz fails and filter answers an Error
    rather than a verdict on the frozen state; both recover when the server does."""
    source = start_live(api, tmp_path, max_staleness=2.0, watch_seconds=(600, 600))
    try:
        assert source.wait_synced(20)
        client = Client(create_app(Config(), source=source))
        args = {"Pod": web("new"), "NodeNames": ["a1", "a2", "b1"]}
        assert call(client, "filter", args)[1]["NodeNames"] == ["b1"]
        stale = unready_count("filter", "stale")
        api.faults.hang_watches = True
        api.freeze_watches()
        wait_until(lambda: client.get("/readyz").status_code == 503, timeout=10)
        assert b"cluster state stale" in client.get("/readyz").data
        code, answer = call(client, "filter", args)
        assert code == 200 and answer["NodeNames"] is None and "cluster state stale" in answer["Error"]
        assert unready_count("filter", "stale") == stale + 1
        api.faults.hang_watches = False
        api.close_watches()  # the hung streams end; the reflectors reconnect
        wait_until(lambda: client.get("/readyz").status_code == 200, timeout=15)
        assert call(client, "filter", args)[1]["NodeNames"] == ["b1"]
    finally:
        source.stop()


def test_the_client_sockets_keep_alive_and_watch_reads_time_out(api, tmp_path):
    from extender.state.kubeapi import WATCH_READ_TIMEOUT
    from extender.state.watchdog import probe_interval

    source = start_live(api, tmp_path)
    try:
        options = source.api_client.rest_client.pool_manager.connection_pool_kw["socket_options"]
        assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
        assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in options
        assert WATCH_READ_TIMEOUT <= 120  # not the watch's timeoutSeconds + 60 (6-11 minutes)
        assert probe_interval(60.0) < 60.0 / 2 and probe_interval(2.0) < 1.0
    finally:
        source.stop()


class _Answer:
    """What a raw (`_preload_content=False`) watch response offers the probe."""

    def __init__(self, *events: dict) -> None:
        self.data = b"".join(orjson.dumps(e) + b"\n" for e in events)

    def read(self) -> bytes:
        return self.data

    def stream(self, amt=None, decode_content=False):
        yield from (line + b"\n" for line in self.data.split(b"\n") if line)  # one event a chunk

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


def _reflector(answer):
    from extender.state.reflector import Reflector
    from extender.state.store import Store

    calls: list[dict] = []

    def lister(**kw):
        calls.append(kw)
        if isinstance(answer, Exception):
            raise answer
        return answer

    reflector = Reflector("Node", lister, Store())
    reflector.resource_version = "100"
    reflector.confirmed_at -= 30  # last confirmed half a minute ago
    return reflector, calls


def test_probe_outcomes():
    """Nothing after the stream's resourceVersion confirms the state; a newer event the
    stream has not delivered ends it (resumed by the loop); 410 asks for a relist; no
    answer confirms nothing."""
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "180"}}}
    reflector, calls = _reflector(_Answer(bookmark))
    assert Watchdog(reflector).probe() == "current" and reflector.unconfirmed_for() < 1
    assert calls[0]["resource_version"] == "100" and calls[0]["timeout_seconds"] == 1 and calls[0]["watch"]
    modified = {"type": "MODIFIED", "object": {"metadata": {"name": "n", "resourceVersion": "150"}}}
    reflector, _ = _reflector(_Answer(modified))
    assert Watchdog(reflector).probe() == "restarted" and reflector._restart == "silent"
    reflector, _ = _reflector(_Answer(modified))
    reflector.resource_version = "150"  # the stream delivered it meanwhile
    assert Watchdog(reflector).probe() == "delivered" and reflector._restart is None
    gone = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
    reflector, _ = _reflector(_Answer(gone))
    assert Watchdog(reflector).probe() == "relist" and reflector._relist
    reflector, _ = _reflector(TimeoutError("no answer"))
    assert Watchdog(reflector).probe() == "failed" and reflector.unconfirmed_for() >= 30 and reflector.failing_since
