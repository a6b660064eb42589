"""`GET /explain/{ns}/{pod}` and `POST /explain` on the side listener, against the live
state (the API-server double, list/watch) and in file mode through a real server."""

from __future__ import annotations

import http.client
import socket
import time

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from extender import metrics
from extender.config import Config, build_config
from extender.engine import Extender
from extender.explain import explain, static_extender
from extender.server.app import health_routes
from extender.server.explain_routes import ExplainRoutes
from extender.server.listener import Listener
from extender.state import ClusterSnapshot, load_objects
from testing.apiserver import FakeApiServer
from testing.live import free_port, start, stop
from tests.state.live_truth import start_live, synced_live

SLA = "node.example.com/sla"
TOKEN = "t-reader"  # a user the API double lets read every pod (the endpoint asks it)


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json",
                                                       "Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def get(port: int, path: str) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        return response.status, orjson.loads(response.read()), dict(response.getheaders())
    finally:
        conn.close()


def post(port: int, path: str, body: bytes) -> tuple[int, dict]:
    code, data = request(port, "POST", path, body)
    return code, orjson.loads(data)


def reader(api: FakeApiServer) -> None:
    reviews = api.reviews
    reviews.token(TOKEN, "reader")
    reviews.grant("reader", "get", "pods")
    reviews.grant("reader", "list", "pods")


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.2) as server:
        server.load(load_objects(EXAMPLES / "cluster.yaml"))
        server.create("pods", example_pod("sla-gt"))  # pending: no nodeName
        reader(server)
        yield server


@pytest.fixture
def live(api, tmp_path):
    with synced_live(api, tmp_path) as source:
        yield source


def serve(source, **kw) -> tuple[Listener, ExplainRoutes]:
    engine = Extender(Config(explain_endpoint=True), source)
    routes = ExplainRoutes(engine, kw.pop("enabled", True), kw.pop("rate", 100.0), kw.pop("burst", 100), **kw)
    return Listener("127.0.0.1:0", health_routes(engine), dispatch=routes).start(), routes


@pytest.fixture
def listener(live):
    server, _ = serve(live)
    try:
        yield server
    finally:
        server.stop()


def wait_version(port: int, path: str, at_least: int, timeout: float = 20.0) -> dict:
    """The answer once the live state has caught up with resourceVersion `at_least`."""
    deadline = time.monotonic() + timeout
    while True:
        code, body, _ = get(port, path)
        assert code == 200, body
        if int(body["state"]["resourceVersion"]) >= at_least or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_a_pending_pod_is_explained_from_the_live_state(api, listener):
    body = wait_version(listener.port, "/explain/default/sla-gt?nodes=all", api.resource_version)
    state = body["state"]
    assert state["mode"] == "live" and state["ready"] is True
    assert state["resourceVersion"] == str(api.resource_version)
    assert set(state["resourceVersions"]) >= {"Node", "Pod"}
    assert state["objects"]["nodes"] == len(api.objects("nodes"))
    assert 0 <= state["ageSeconds"] < 30
    assert body["view"] == "all"
    # exactly what `extender explain` says on a dump of the same truth
    offline = explain(static_extender(Config(), ClusterSnapshot.from_objects(api.all_objects())),
                      [api.get("pods", "sla-gt", "default")], None)
    assert body["results"] == offline["results"]
    result = body["results"][0]
    assert result["filter"]["NodeNames"] == ["od-a1", "od-b1", "spot-a1", "spot-b1"]
    spot = result["nodes"]["spot-c1"]["plugins"]["TaintToleration"]["reasons"]
    assert "taint value 500 is not greater than 750" in spot[2]


def test_the_answer_follows_the_cluster(api, listener):
    wait_version(listener.port, "/explain/default/sla-gt", api.resource_version)
    node = api.get("nodes", "spot-a1")
    node["spec"]["taints"] = [{"key": SLA, "value": "600", "effect": "NoSchedule"}]
    api.update("nodes", node)
    body = wait_version(listener.port, "/explain/default/sla-gt", api.resource_version)
    assert body["state"]["resourceVersion"] == str(api.resource_version)
    summary = body["results"][0]["summary"]
    assert summary["feasible"] == 3
    groups = [g for e in summary["reasons"] for g in e["groups"] if "spot-a1" in g["examples"]]
    assert groups and "taint value 600 is not greater than 750" in groups[0]["details"][1]


def _schema(name: str) -> dict:
    """A component schema of docs/reference/openapi.yaml as JSON Schema (refs inlined,
    OpenAPI's `nullable` as a null type)."""
    import yaml

    doc = yaml.safe_load((EXAMPLES.parent / "docs" / "reference" / "openapi.yaml").read_text())

    def convert(node):
        if isinstance(node, list):
            return [convert(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = doc
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            return convert(target)
        out = {k: convert(v) for k, v in node.items() if k != "nullable"}
        if node.get("nullable") and "type" in out:
            out["type"] = [out["type"], "null"]
        return out

    return convert(doc["components"]["schemas"][name])


def test_answers_match_the_openapi_description(listener):
    import jsonschema

    schema = _schema("Explanation")
    for path in ("/explain/default/sla-gt", "/explain/default/sla-gt?nodes=all",
                 "/explain/shop/web-7d9f-0?examples=0"):
        code, body, _ = get(listener.port, path)
        assert code == 200, body
        jsonschema.validate(body, schema)
    code, body = post(listener.port, "/explain", orjson.dumps(example_pod("spread-spot")))
    jsonschema.validate(body, schema)


def test_summary_view_is_the_default_and_small(api, listener):
    code, body, _ = get(listener.port, "/explain/default/sla-gt?examples=1")
    assert code == 200 and body["view"] == "summary"
    result = body["results"][0]
    named = {n for e in result["summary"]["reasons"] for g in e["groups"] for n in g["examples"]}
    named |= {t["node"] for t in result["summary"]["top"]}
    assert set(result["nodes"]) == named
    assert result["omittedNodes"] == result["summary"]["candidates"] - len(named)
    assert all(len(g["examples"]) <= 1 for e in result["summary"]["reasons"] for g in e["groups"])
    code, body, _ = get(listener.port, "/explain/default/sla-gt?candidates=spot-c1,ghost&nodes=all")
    assert code == 200 and set(body["results"][0]["nodes"]) == {"spot-c1", "ghost"}


def test_post_explains_a_pod_not_created_yet(listener, api):
    pod = example_pod("cel-rack-regex")
    assert api.get("pods", pod["metadata"]["name"], "default") is None
    code, body = post(listener.port, "/explain", orjson.dumps(pod))
    assert code == 200, body
    assert body["results"][0]["pod"] == "default/cel-rack-regex"
    assert "dev-a1" in body["results"][0]["filter"]["NodeNames"]


@pytest.mark.parametrize(("method", "path", "body", "status", "says"), [
    ("GET", "/explain/default/nope", None, 404, "pod default/nope not found"),
    ("GET", "/explain/Default/x", None, 400, "invalid namespace"),
    ("GET", "/explain/default/x_y", None, 400, "invalid pod name"),
    ("GET", "/explain/default", None, 404, "expected /explain/NAMESPACE/POD"),
    ("GET", "/explain", None, 405, "use GET /explain/NAMESPACE/POD"),
    ("GET", "/explain/default/sla-gt?nodes=some", None, 400, "nodes: expected summary or all"),
    ("GET", "/explain/default/sla-gt?examples=99", None, 400, "examples: expected an integer"),
    ("POST", "/explain", b"{not json", 400, "must be a Pod as JSON"),
    ("POST", "/explain", b'{"kind": "Node"}', 400, "one Pod object"),
    ("POST", "/explain", b'{"metadata": {"name": 5}}', 422, "cannot be explained"),
    ("POST", "/explain/default/x", b"{}", 405, "use GET"),
])
def test_bad_requests_get_clear_errors(listener, method, path, body, status, says):
    code, data = request(listener.port, method, path, body)
    assert code == status, data
    assert says in orjson.loads(data)["error"]


def test_bodies_over_the_limit_are_refused_unread(listener):
    with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as sock:
        sock.sendall(b"POST /explain HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{" % (2 << 20))
        head = b""
        while b"exceeds" not in head and len(head) < 4096:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    assert head.startswith(b"HTTP/1.1 413") and b"exceeds the limit" in head


def test_rate_limited_with_retry_after(live):
    server, routes = serve(live, rate=0.01, burst=2)
    try:
        assert [get(server.port, "/explain/default/sla-gt")[0] for _ in range(2)] == [200, 200]
        code, body, headers = get(server.port, "/explain/default/sla-gt")
        assert code == 429 and "too many explanations" in body["error"]
        assert int(headers["Retry-After"]) >= 50  # 1 token per 100 s
    finally:
        server.stop()


def test_off_by_default_and_says_how_to_turn_it_on(live):
    assert build_config({}, env={}).explain_endpoint is False
    server, _ = serve(live, enabled=False)
    try:
        code, body, _ = get(server.port, "/explain/default/sla-gt")
        assert code == 404 and "--explain-endpoint=true" in body["error"]
        assert get(server.port, "/nope")[0] == 404  # other paths: the listener's own 404
    finally:
        server.stop()


def test_settings_have_env_twins_and_yaml_keys(tmp_path):
    env = {"EXTENDER_EXPLAIN_ENDPOINT": "true", "EXTENDER_EXPLAIN_RATE": "0.5",
           "EXTENDER_EXPLAIN_BURST": "2", "EXTENDER_RECORD_EVENTS": "true"}
    config = build_config({}, env=env)
    assert (config.explain_endpoint, config.explain_rate, config.explain_burst, config.record_events) == \
        (True, 0.5, 2, True)
    path = tmp_path / "c.yaml"
    path.write_text("explainEndpoint: true\nexplainRate: 3\nexplainBurst: 7\nrecordEvents: false\n")
    config = build_config({}, env={}, config_file=str(path))
    assert (config.explain_endpoint, config.explain_rate, config.explain_burst, config.record_events) == \
        (True, 3.0, 7, False)


def test_not_synced_answers_an_error_never_an_explanation(tmp_path):
    with FakeApiServer() as api:
        api.load(load_objects(EXAMPLES / "cluster.yaml"))
        reader(api)
        api.faults.fail_requests, api.faults.fail_match = 10**6, "/pods"  # pods never list
        source = start_live(api, tmp_path)
        server, _ = serve(source)
        try:
            code, body, headers = get(server.port, "/explain/default/sla-gt")
            assert code == 503 and "not synced" in body["error"] and "Pod" in body["error"]
            assert body["state"]["ready"] is False and headers["Retry-After"]
        finally:
            server.stop()
            source.stop()


def test_cel_work_is_bounded_by_the_deadline(live):
    server, _ = serve(live, deadline=1e-9)
    pod = example_pod("plain")
    pod["spec"]["tolerations"] = [{"expression": "taint.key != 'deadline-test-" + str(time.time()) + "'"}]
    try:
        code, body = post(server.port, "/explain", orjson.dumps(pod))
        assert code == 503 and "deadline" in body["error"]
    finally:
        server.stop()


def test_explanations_are_not_counted_as_scheduling(listener):
    def evaluations() -> float:
        return sum(s.value for m in metrics.PLUGIN_EVALUATION_TOTAL.collect() for s in m.samples
                   if s.name.endswith("_total"))

    before = evaluations()
    assert get(listener.port, "/explain/default/sla-gt")[0] == 200
    assert post(listener.port, "/explain", orjson.dumps(example_pod("spread-spot")))[0] == 200
    assert evaluations() == before


@pytest.mark.gunicorn
def test_file_mode_on_the_side_listener_only(tmp_path):
    metrics_port = free_port()
    port, proc = start(EXAMPLES / "cluster.yaml", "--explain-endpoint", "true",
                       "--metrics-listen", f"127.0.0.1:{metrics_port}")
    try:
        code, body, _ = get(metrics_port, "/explain/shop/web-7d9f-0")
        assert code == 200, body
        assert body["state"]["mode"] == "file" and body["state"]["objects"]["nodes"] == 10
        assert body["results"][0]["pod"] == "shop/web-7d9f-0"
        code, data = post(metrics_port, "/explain", orjson.dumps(example_pod("sla-gt")))
        assert code == 200 and data["results"][0]["summary"]["feasible"] == 4
        # the verbs' listener never serves it
        assert request(port, "GET", "/explain/shop/web-7d9f-0")[0] == 404
        assert request(port, "POST", "/explain", orjson.dumps(example_pod("sla-gt")))[0] in (404, 405)
    finally:
        stop(proc)


def test_the_verbs_own_refusal_is_used_when_the_source_has_one(example_snapshot):
    """Sources that tell the verbs to answer Error (`unready()`: before sync, when stale)
    make the endpoint refuse the same way, with the same message."""
    from extender.state import StaticSource

    class Frozen(StaticSource):
        def unready(self):
            return "stale", "watch failing longer than 60s: Pod (75s)"

    server, _ = serve(Frozen(example_snapshot))
    try:
        code, body = post(server.port, "/explain", orjson.dumps(example_pod("sla-gt")))
        assert code == 503
        assert body["error"] == "cluster state not synced or stale: watch failing longer than 60s: Pod (75s)"
    finally:
        server.stop()


def test_a_failure_inside_an_explanation_is_a_json_500(example_snapshot):
    from extender.state import StaticSource

    def broken(namespace, name):
        raise RuntimeError("boom")

    server, _ = serve(StaticSource(example_snapshot), reader=broken)
    try:
        code, data = request(server.port, "GET", "/explain/default/sla-gt")
        assert code == 500 and "the explanation failed" in orjson.loads(data)["error"]
        assert request(server.port, "GET", "/healthz")[0] == 200  # and the listener keeps serving
    finally:
        server.stop()
