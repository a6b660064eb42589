"""`POST /whatif` on the side listener against the live state (the API-server double):
off by default, authenticated and authorized like /drift (list pods and nodes,
cluster-wide), precise 400/413/429 answers, never a 500; the verbs' answers during a
what-if byte-identical to those without it; `kubectl extender what-if` through it."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading

import orjson
import pytest
from objects import SLA, node, pod, taint

from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.drift import attach_tracker, drift_for
from extender.engine import Extender
from extender.ratelimit import TokenBucket
from extender.server.app import health_routes
from extender.server.explain_routes import ExplainRoutes
from extender.server.listener import Listener
from extender.server.whatif_routes import SideRoutes, WhatIfRoutes
from extender.state.store import Store
from extender.whatif import MAX_CHANGES
from testing.apiserver import FakeApiServer
from tests.state.live_truth import start_live

pytestmark = pytest.mark.xdist_group("drift/test_whatif_endpoint")

GT_750 = {"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}
CONFIG = Config(explain_endpoint=True, drift_endpoint=True, whatif_endpoint=True, inflight_wait=0)
TOKEN = "t-admin"  # may list pods and nodes everywhere
PODS_ONLY = "t-pods"  # may list pods, not nodes
TEAM = "t-team"  # may list pods and nodes in namespace team only
LOWER = {"changes": [{"selector": "pool=spot", "taint": f"{SLA}=500:NoSchedule"}]}


def objects() -> list[dict]:
    return [node("n1", [taint(SLA, "900")], pool="spot"), node("n2", [taint(SLA, "900")], pool="spot"),
            node("n3", pool="od"),
            pod("gt", "n1", tolerations=[GT_750]), pod("gt-pending", "", tolerations=[GT_750],
                                                       node_selector={"pool": "spot"}),
            pod("tolerant", "n2", tolerations=[{"operator": "Exists"}])]


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.2) as server:
        server.load(objects())
        for token, user in ((TOKEN, "admin"), (PODS_ONLY, "pods"), (TEAM, "team")):
            server.reviews.token(token, user)
        server.reviews.grant("admin", "list", "pods")
        server.reviews.grant("admin", "list", "nodes")
        server.reviews.grant("pods", "list", "pods")
        server.reviews.grant("team", "list", "pods", namespace="team")
        yield server


@pytest.fixture
def served(api, tmp_path):
    store = Store()
    attach_tracker(store, CONFIG)
    source = start_live(api, tmp_path, store=store)
    assert source.wait_synced(20)
    engine = Extender(CONFIG, source)
    engine.drift = drift_for(engine)
    explain = ExplainRoutes(engine, True, 100.0, 100, drift=engine.drift, drift_enabled=True)
    whatif = WhatIfRoutes(engine, True, engine.drift, 100.0, 100)
    listener = Listener("127.0.0.1:0", health_routes(engine), dispatch=SideRoutes(explain, whatif)).start()
    try:
        yield api, engine, whatif, listener
    finally:
        listener.stop()
        source.stop()


def request(port: int, method: str, path: str, body: bytes | None = None,
            token: str | None = TOKEN) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def whatif(port: int, body: dict, token: str | None = TOKEN) -> tuple[int, dict]:
    code, data = request(port, "POST", "/whatif", json.dumps(body).encode(), token)
    return code, orjson.loads(data)


def test_a_lowered_sla_before_it_is_made(served):
    _, _, _, listener = served
    code, answer = whatif(listener.port, LOWER)
    assert code == 200, answer
    assert answer["changes"] == [{"change": f"taint {SLA}=500:NoSchedule", "selector": "pool=spot", "selected": 2}]
    pods = {(p["namespace"], p["name"]): p for p in answer["running"]["pods"]}
    assert list(pods) == [("default", "gt")]
    assert pods[("default", "gt")]["severity"] == "required"
    assert "taint value 500 is not greater than 750" in pods[("default", "gt")]["after"][0]["details"][1]
    [pending] = answer["pending"]["pods"]
    assert (pending["name"], pending["feasible"], pending["lost"]) == ("gt-pending", {"before": 2, "after": 0}, 2)
    assert pending["reasons"][0]["reason"] == "node(s) had untolerated taint(s)"
    assert answer["state"]["mode"] == "live"


def test_the_verbs_answer_the_same_bytes_during_and_after_a_what_if(served):
    """The hypothetical state is a private layer: a filter and a prioritize asked before,
    during (another thread computing what-ifs) and after answer identical bytes, and the
    live state's snapshot is the same object."""
    _, engine, _, listener = served
    raw = objects()[4]
    names = ["n1", "n2", "n3"]
    before_snapshot = engine.source.snapshot()
    verbs = (lambda: engine.filter(ExtenderArgs(raw, None, names)),
             lambda: engine.prioritize(ExtenderArgs(raw, None, names)))
    before = [verb() for verb in verbs]
    answers: list[int] = []

    def ask() -> None:
        for body in (LOWER, {"changes": [{"nodes": ["n1", "n2"], "remove": True}]},
                     {"changes": [{"nodes": ["n1"], "label": "pool-"}, {"nodes": ["n2"], "cordon": True}]}):
            answers.append(whatif(listener.port, body)[0])

    thread = threading.Thread(target=ask)
    thread.start()
    during = []
    while thread.is_alive():
        during.append([verb() for verb in verbs])
    thread.join()
    assert answers == [200, 200, 200]
    assert all(d == before for d in during) and during
    assert [verb() for verb in verbs] == before
    assert engine.source.snapshot() is before_snapshot
    assert orjson.loads(before[0])["NodeNames"] == ["n1", "n2"]


@pytest.mark.parametrize(("body", "status", "says"), [
    (b"not json", 400, "the body must be a what-if request as JSON"),
    (b"[]", 400, "the body must be a JSON object"),
    (b"{}", 400, "changes: expected a non-empty list"),
    (b'{"changes": [{"nodes": ["n1", "ghost"], "cordon": true}]}', 400,
     "changes[0].nodes: no such node(s) in the cluster state: ghost"),
    (b'{"changes": [{"nodes": ["n1"], "taint": "sla=500:Sometimes"}]}', 400,
     "changes[0].taint 'sla=500:Sometimes': effect 'Sometimes': expected one of NoSchedule, PreferNoSchedule, "
     "NoExecute"),
    (b'{"changes": [{"nodes": ["n1"], "taint": "bad key=1:NoSchedule"}]}', 400, "changes[0].taint 'bad key"),
    (b'{"changes": [{"nodes": ["n1"], "label": "pool"}]}', 400, "expected KEY=VALUE or KEY-"),
    (b'{"changes": [{"selector": "pool in (a", "cordon": true}]}', 400, "unbalanced '('"),
    (b'{"changes": [{"nodes": ["n1"], "cordon": true, "remove": true}]}', 400, "expected exactly one of"),
    (b'{"changes": [{"cordon": true}]}', 400, "expected either nodes"),
    (b'{"changes": [{"volume": "pv-x", "annotation": "a=b"}]}', 400, "no PersistentVolume 'pv-x'"),
    (b'{"changes": [{"nodes": ["n1"], "cordon": "yes"}]}', 400, "cordon: expected true"),
    (b'{"changes": [{"nodes": ["n1"], "cordon": true}], "extra": 1}', 400, "unknown field(s) extra"),
    (json.dumps({"changes": [{"nodes": ["n1"], "cordon": True}] * (MAX_CHANGES + 1)}).encode(), 413,
     f"at most {MAX_CHANGES} per request"),
])
def test_bad_requests_get_a_precise_error(served, body, status, says):
    _, _, _, listener = served
    code, data = request(listener.port, "POST", "/whatif", body)
    assert code == status, data
    assert says in orjson.loads(data)["error"]


def test_too_many_nodes_touched_is_413(served, monkeypatch):
    _, _, _, listener = served
    from extender.whatif import changes

    monkeypatch.setattr(changes, "MAX_NODES_TOUCHED", 2)
    code, answer = whatif(listener.port, {"changes": [{"selector": "pool=spot", "cordon": True},
                                                      {"nodes": ["n3"], "cordon": True}]})
    assert code == 413 and "touch 3+ nodes, at most 2" in answer["error"]


@pytest.mark.parametrize(("method", "path", "status", "says"), [
    ("GET", "/whatif", 405, "use POST /whatif"),
    ("GET+body", "/whatif", 413, "takes no request body"),  # refused unread
    ("POST+body", "/whatif/x", 405, "method not allowed"),  # refused unread
    ("POST", "/whatif/x", 404, "expected /whatif"),
])
def test_other_paths_and_methods(served, method, path, status, says):
    _, _, _, listener = served
    verb, _, with_body = method.partition("+")
    code, body = request(listener.port, verb, path, b"{}" if with_body else None)
    assert code == status and says in orjson.loads(body)["error"]


def test_only_who_may_list_pods_and_nodes_cluster_wide(served):
    api, _, _, listener = served
    assert whatif(listener.port, LOWER, token=None)[0] == 401
    assert whatif(listener.port, LOWER, token="t-nobody")[0] == 401
    code, answer = whatif(listener.port, LOWER, token=PODS_ONLY)
    assert code == 403 and 'may not list nodes' in answer["error"]
    code, answer = whatif(listener.port, LOWER, token=TEAM)
    assert code == 403 and 'may not list pods' in answer["error"]
    asked = [spec["resourceAttributes"] for kind, spec in api.reviews.asked if kind == "subjectaccessreviews"]
    assert {"verb": "list", "resource": "nodes"} in asked and {"verb": "list", "resource": "pods"} in asked


def test_rate_limited_with_retry_after(served):
    _, _, whatif_routes, listener = served
    whatif_routes.bucket = TokenBucket(0.001, 1)
    assert whatif(listener.port, LOWER)[0] == 200
    code, data = request(listener.port, "POST", "/whatif", json.dumps(LOWER).encode())
    assert code == 429 and "too many what-ifs" in orjson.loads(data)["error"]
    assert "retry in" in orjson.loads(data)["error"]


def test_off_by_default(api, tmp_path):
    config = Config(drift_endpoint=True)
    store = Store()
    attach_tracker(store, config)
    source = start_live(api, tmp_path, store=store)
    assert source.wait_synced(20)
    engine = Extender(config, source)
    engine.drift = drift_for(engine)
    from extender.server.launcher import explain_dispatch

    listener = Listener("127.0.0.1:0", health_routes(engine), dispatch=explain_dispatch(engine)).start()
    try:
        code, body = request(listener.port, "POST", "/whatif", json.dumps(LOWER).encode())
        assert code == 404 and "--whatif-endpoint=true" in orjson.loads(body)["error"]
        assert request(listener.port, "GET", "/drift")[0] == 200
    finally:
        listener.stop()
        source.stop()


def test_kubectl_extender_what_if_prints_the_answer(served):
    _, _, _, listener = served
    url = f"http://127.0.0.1:{listener.port}"

    def kubectl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kubectl_extender.cli", "what-if", "--url", url,
                               "--token", TOKEN, *args], capture_output=True, text=True, timeout=120)

    proc = kubectl("--taint", "-l", "pool=spot", f"{SLA}=500:NoSchedule")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.split()[:5] == ["default", "gt", "n1", "required", "TaintToleration"] for line in lines), lines
    assert any("taint value 500 is not greater than 750" in line for line in lines)
    assert any(line.split()[:4] == ["default", "gt-pending", "2", "0"] for line in lines), lines
    answer = json.loads(kubectl("--taint", "n1", f"{SLA}-", "--cordon", "n3", "-o", "json").stdout)
    assert [c["change"] for c in answer["changes"]] == [f"taint {SLA}-", "cordon"]
    proc = kubectl("--taint", "ghost", f"{SLA}=1:NoSchedule")
    assert proc.returncode == 1 and "no such node(s) in the cluster state: ghost" in proc.stderr
