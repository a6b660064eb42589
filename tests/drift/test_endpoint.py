"""`GET /drift` on the side listener against the live state (the API-server double),
behind `/explain`'s gate and its authentication (a TokenReview, then a
SubjectAccessReview for `list` on pods in the namespace asked, or in all), and
`kubectl extender drift` printing it."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time

import orjson
import pytest
from objects import SLA, TOLERATIONS, node, pod, taint

from extender.config import Config
from extender.drift import drift_for
from extender.drift.report import MAX_LIMIT
from extender.engine import Extender
from extender.server.app import health_routes
from extender.server.auth import LoopbackOnly
from extender.server.explain_routes import ExplainRoutes, Refused
from extender.server.listener import Listener
from extender.state.live import LiveSource
from extender.state.store import Store
from testing.apiserver import FakeApiServer
from tests.server.test_explain_endpoint import _schema
from tests.state.live_truth import start_live

GT_750 = {"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}
CONFIG = Config(explain_endpoint=True, drift_endpoint=True)
TOKEN = "t-viewer"  # allowed to list pods in every namespace
TEAM_TOKEN = "t-team"  # allowed to list pods in namespace team only
DEADLINE = 30.0  # seconds; the drift thread settles ~50 ms after an event on an idle machine


def objects() -> list[dict]:
    return [node("n1", [taint(SLA, "900")]), node("n2", [taint(SLA, "900")]),
            pod("gt", "n1", tolerations=[GT_750]),
            pod("cel", "n2", namespace="team", annotations={TOLERATIONS: [
                {"expression": f"taint.key == '{SLA}' && int(taint.value) > 800"}]}),
            pod("tolerant", "n1", tolerations=[{"operator": "Exists"}])]


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.2) as server:
        server.load(objects())
        server.reviews.token(TOKEN, "viewer")
        server.reviews.grant("viewer", "list", "pods")
        server.reviews.grant("viewer", "get", "pods")
        server.reviews.token(TEAM_TOKEN, "team-lead")
        server.reviews.grant("team-lead", "list", "pods", namespace="team")
        yield server


def start(api, tmp_path, config: Config = CONFIG, **routes_kw):
    from extender.drift import attach_tracker

    store = Store()
    attach_tracker(store, config)
    source = start_live(api, tmp_path, store=store)
    assert source.wait_synced(20)
    engine = Extender(config, source)
    engine.drift = drift_for(engine)
    engine.drift.start()
    routes = ExplainRoutes(engine, config.explain_endpoint, 100.0, 100, drift=engine.drift,
                           drift_enabled=routes_kw.pop("drift_enabled", config.drift_endpoint))
    listener = Listener("127.0.0.1:0", health_routes(engine), dispatch=routes).start()
    return source, engine, routes, listener


@pytest.fixture
def served(api, tmp_path):
    source, engine, routes, listener = start(api, tmp_path)
    try:
        yield api, engine, routes, listener
    finally:
        listener.stop()
        engine.drift.stop()
        source.stop()


def request(port: int, method: str, path: str, body: bytes | None = None,
            token: str | None = TOKEN) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def drift(port: int, query: str = "") -> dict:
    code, body = request(port, "GET", "/drift" + query)
    assert code == 200, body
    return orjson.loads(body)


def wait_for(port: int, check, query: str = "") -> dict:
    """The report once `check(report)` holds (a deadline, not a measurement)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        report = drift(port, query)
        if check(report):
            return report
        assert time.monotonic() < deadline, report
        time.sleep(0.02)


def names(report: dict) -> set[str]:
    return {f"{p['namespace']}/{p['name']}" for p in report["pods"]}


def retaint(api, name: str, value: str) -> None:
    obj = api.get("nodes", name)
    obj["spec"]["taints"] = [taint(SLA, value)]
    api.update("nodes", obj)


def test_a_lowered_sla_shows_in_drift_and_clears_when_reverted(served):
    import jsonschema

    api, engine, _, listener = served
    report = wait_for(listener.port, lambda r: r["drift"]["trackedPods"] == 3)
    assert report["pods"] == [] and report["spread"] == {"enabled": False}
    assert report["state"]["mode"] == "live"
    retaint(api, "n1", "500")
    retaint(api, "n2", "700")
    report = wait_for(listener.port, lambda r: len(r["pods"]) == 2)
    jsonschema.validate(report, _schema("DriftReport"))
    assert names(report) == {"default/gt", "team/cel"}
    gt = next(p for p in report["pods"] if p["name"] == "gt")
    assert gt["node"] == "n1" and gt["uid"] == api.get("pods", "gt", "default")["metadata"]["uid"]
    assert gt["violations"] == [{"plugin": "TaintToleration", "severity": "required",
                                 "reason": "node(s) had untolerated taint(s)", "details": [
                                     f"taint {SLA}=500:NoSchedule is not tolerated",
                                     f"toleration[0] {SLA} Gt '750' (NoSchedule): does not tolerate: "
                                     "taint value 500 is not greater than 750"]}]
    assert report["totals"] == [{"plugin": "TaintToleration", "reason": "node(s) had untolerated taint(s)",
                                 "severity": "required", "pods": 2}]
    assert names(drift(listener.port, "?namespace=team")) == {"team/cel"}
    assert drift(listener.port, "?severity=preferred")["pods"] == []
    cut = drift(listener.port, "?limit=1")
    assert len(cut["pods"]) == 1 and cut["omittedPods"] == 1
    retaint(api, "n1", "900")
    retaint(api, "n2", "900")
    wait_for(listener.port, lambda r: r["pods"] == [])


def test_kubectl_extender_drift_prints_the_report(served):
    api, _, _, listener = served
    retaint(api, "n1", "500")
    wait_for(listener.port, lambda r: len(r["pods"]) == 1)
    url = f"http://127.0.0.1:{listener.port}"

    def kubectl(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "kubectl_extender.cli", "drift", "--url", url,
                               "--token", TOKEN, *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    table = kubectl("-A").splitlines()
    assert table[0].split() == ["NAMESPACE", "POD", "NODE", "SEVERITY", "PLUGIN", "REASON"]
    assert table[1].split()[:5] == ["default", "gt", "n1", "required", "TaintToleration"]
    assert table[1].endswith("node(s) had untolerated taint(s)")
    assert table[2].strip() == f"taint {SLA}=500:NoSchedule is not tolerated"
    assert "taint value 500 is not greater than 750" in table[3]
    assert kubectl("-n", "default").splitlines()[0].split() == ["POD", "NODE", "SEVERITY", "PLUGIN", "REASON"]
    assert kubectl("-n", "team") == "No pods in this namespace run on a node that no longer satisfies them.\n"
    report = orjson.loads(kubectl("-A", "-o", "json"))
    assert names(report) == {"default/gt"}


@pytest.mark.parametrize(("query", "says"), [
    ("?severity=fatal", "severity: expected some of required, evicting, preferred"),
    ("?limit=0", f"limit: expected an integer 1..{MAX_LIMIT}"),
    ("?limit=x", "limit: expected an integer"),
])
def test_bad_queries_get_clear_errors(served, query, says):
    _, _, _, listener = served
    code, body = request(listener.port, "GET", "/drift" + query)
    assert code == 400 and says in orjson.loads(body)["error"]


@pytest.mark.parametrize(("method", "path", "status", "says"), [
    ("POST", "/drift", 405, "use GET /drift"),
    ("POST+body", "/drift", 405, "method not allowed"),  # refused unread
    ("GET+body", "/drift", 413, "takes no request body"),
    ("GET", "/drift/default", 404, "expected /drift"),
])
def test_other_paths_and_methods(served, method, path, status, says):
    _, _, _, listener = served
    verb, _, with_body = method.partition("+")
    code, body = request(listener.port, verb, path, b"{}" if with_body else None)
    assert code == status and says in orjson.loads(body)["error"]


def test_drift_passes_the_one_gate_explain_passes(api, tmp_path, monkeypatch):
    """Off by default, each behind its own flag, and both behind `ExplainRoutes.admit`:
    what refuses a client there refuses it on /explain and /drift alike."""
    config = Config(explain_endpoint=True, drift_report=True)
    source, engine, routes, listener = start(api, tmp_path, config)
    try:
        code, body = request(listener.port, "GET", "/drift")
        assert code == 404 and "--drift-endpoint=true" in orjson.loads(body)["error"]
        assert request(listener.port, "GET", "/explain/default/gt")[0] == 200
        routes.drift_enabled = True
        assert request(listener.port, "GET", "/drift")[0] == 200

        def refuse(path: str) -> None:
            raise Refused(401, f"not you ({path})")

        monkeypatch.setattr(routes, "admit", refuse)
        for path in ("/drift", "/explain/default/gt"):
            code, body = request(listener.port, "GET", path)
            assert (code, orjson.loads(body)["error"]) == (401, f"not you ({path})")
    finally:
        listener.stop()
        engine.drift.stop()
        source.stop()


def test_drift_answers_only_who_may_list_the_pods_it_lists(served):
    """The same users `kubectl get pods` would answer: no token 401; a token the API server
    does not know 401; a user allowed to list pods in `team` gets team's report and a 403
    for all namespaces or another one."""
    api, _, _, listener = served
    code, body = request(listener.port, "GET", "/drift", token=None)
    assert code == 401 and "bearer token is required" in orjson.loads(body)["error"]
    assert request(listener.port, "GET", "/drift", token="t-nobody")[0] == 401
    assert request(listener.port, "GET", "/drift?namespace=team", token=TEAM_TOKEN)[0] == 200
    assert request(listener.port, "GET", "/drift", token=TEAM_TOKEN)[0] == 403
    assert request(listener.port, "GET", "/drift?namespace=default", token=TEAM_TOKEN)[0] == 403
    asked = [spec["resourceAttributes"] for kind, spec in api.reviews.asked if kind == "subjectaccessreviews"]
    assert any(a.get("verb") == "list" and a.get("resource") == "pods" and a.get("namespace") == "team"
               for a in asked)


def test_no_report_while_the_state_has_not_synced(tmp_path):
    api = FakeApiServer()  # never started: every list fails
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    source = LiveSource.connect(str(kubeconfig), False)
    engine = Extender(CONFIG, source)
    engine.drift = drift_for(engine)
    routes = ExplainRoutes(engine, True, drift=engine.drift, drift_enabled=True,
                           guard=LoopbackOnly())  # the API server is down: no TokenReview either
    listener = Listener("127.0.0.1:0", health_routes(engine), dispatch=routes).start()
    try:
        code, body = request(listener.port, "GET", "/drift")
        assert code == 503 and "not synced" in orjson.loads(body)["error"]
    finally:
        listener.stop()
