"""HTTP behaviour of the verbs' port (served in-process): wire format, errors, limits."""

from __future__ import annotations

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from extender.config import Config
from extender.engine.extender import ERR_UNKNOWN_NODE
from extender.server.app import create_app
from testing.client import Client


@pytest.fixture(scope="module")
def client():
    config = Config(cluster=str(EXAMPLES / "cluster.yaml"), max_body_bytes=200_000, reload_interval=0)
    return Client(create_app(config))


ALL = ["od-a1", "od-a2", "od-b1", "od-b2", "od-c1", "od-c2", "spot-a1", "spot-b1", "spot-c1", "dev-a1"]


def post(client, verb: str, body) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    response = client.post(f"/{verb}", data=data, content_type="application/json")
    return response.status_code, orjson.loads(response.data)


def test_filter_node_names_mode_answers_with_names_and_upstream_messages(client):
    code, result = post(client, "filter", {"Pod": example_pod("sla-gt"), "Nodes": None, "NodeNames": ALL})
    assert code == 200
    assert list(result) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
    assert result["Nodes"] is None
    assert result["NodeNames"] == ["od-a1", "od-b1", "spot-a1", "spot-b1"]
    # slim answers (the default): a node fits, so no failing node is listed
    assert result["FailedAndUnresolvableNodes"] == {} and result["FailedNodes"] == {}
    assert result["Error"] == ""
    code, result = post(client, "filter", {"Pod": example_pod("sla-gt"), "NodeNames": ["spot-c1", "od-c2"]})
    assert code == 200 and result["NodeNames"] == []  # nothing fits: every failing node, with upstream's message
    assert result["FailedAndUnresolvableNodes"] == {"spot-c1": "node(s) had untolerated taint(s)",
                                                    "od-c2": "node(s) were unschedulable"}
    assert result["FailedNodes"] == {}


def test_filter_nodes_mode_echoes_the_request_objects(client, example_objects):
    nodes = [o for o in example_objects if o["kind"] == "Node"]
    code, result = post(client, "filter", {"Pod": example_pod("plain"), "Nodes": {"metadata": {}, "items": nodes}})
    assert code == 200
    assert result["NodeNames"] is None
    names = [n["metadata"]["name"] for n in result["Nodes"]["items"]]
    assert names == ["od-a1", "od-b1"]
    assert result["Nodes"]["items"][0] == nodes[0]


def test_lower_case_keys_are_accepted(client):
    code, result = post(client, "filter", {"pod": example_pod("plain"), "nodenames": ["od-a1", "od-a2"]})
    assert code == 200
    assert result["NodeNames"] == ["od-a1"]


def test_unknown_node_is_unschedulable_and_retryable_not_a_crash(client):
    code, result = post(client, "filter", {"Pod": example_pod("plain"), "NodeNames": ["od-a2", "ghost"]})
    assert code == 200
    assert result["NodeNames"] == []  # od-a2's kernel taint: nothing fits, so the maps are full
    assert result["FailedNodes"] == {"ghost": ERR_UNKNOWN_NODE}
    assert list(result["FailedAndUnresolvableNodes"]) == ["od-a2"]


def test_prioritize_returns_host_priority_list(client):
    code, result = post(client, "prioritize", {"Pod": example_pod("plain"), "NodeNames": ["od-a1", "od-b1"]})
    assert code == 200
    # od-b1 has one PreferNoSchedule taint the pod does not tolerate: TaintToleration 0 vs 100,
    # weight 3, in-tree score mode (default): 3 * 100 / 10 = 30 and 0; slim answers (the
    # default) leave out the hosts at the most common score, the lowest of equals, shifted to 0.
    assert result == [{"Host": "od-a1", "Score": 30}]


@pytest.mark.parametrize(
    "body, fragment",
    [(b"{not json", "malformed JSON"), (b"", "empty"), (b"   ", "empty")],
)
def test_malformed_json_is_400_with_a_json_error(client, body, fragment):
    code, result = post(client, "filter", body)
    assert code == 400
    assert fragment in result["error"]


def test_trailing_bytes_after_the_first_value_are_ignored_like_go(client):
    body = orjson.dumps({"Pod": example_pod("plain"), "NodeNames": ["od-a1"]}) + b" trailing"
    code, result = post(client, "filter", body)
    assert code == 200
    assert result["NodeNames"] == ["od-a1"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"NodeNames": ["od-a1"]}, "Pod is missing"),
        ({"Pod": None}, "Pod is missing"),
        ({"Pod": "x"}, "Pod must be an object"),
        ({"Pod": {}, "NodeNames": "od-a1"}, "NodeNames must be a list"),
        ({"Pod": {}, "Nodes": []}, "Nodes must be a NodeList"),
        ({"Pod": {"spec": {"tolerations": "x"}}, "NodeNames": []}, "pod.spec.tolerations: expected a list"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_invalid_args_are_200_with_error(client, body, fragment):
    code, result = post(client, "filter", body)
    assert code == 200
    assert fragment in result["Error"]
    assert result["NodeNames"] is None


def test_body_over_limit_is_413(client):
    big = {"Pod": example_pod("plain"), "NodeNames": ["n" * 100] * 5000}
    code, result = post(client, "filter", big)
    assert code == 413
    assert "exceeds the limit of 200000 bytes" in result["error"]


def test_verbs_under_a_url_prefix(client):
    data = orjson.dumps({"Pod": example_pod("plain"), "NodeNames": ["od-a1"]})
    response = client.post("/scheduler/filter", data=data)
    assert response.status_code == 200
    assert orjson.loads(response.data)["NodeNames"] == ["od-a1"]


def test_health_endpoints(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").data == b"ok"
    metrics = client.get("/metrics").data.decode()
    assert "scheduler_plugin_evaluation_total" in metrics


def test_deeply_nested_json_is_a_clear_400(client):
    body = b'{"Pod": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    code, result = post(client, "filter", body)
    assert code == 400
    assert "malformed JSON" in result["error"]



def test_node_names_cut_from_the_body_agree_with_a_full_decode():
    """The NodeNames fast path (array cut out by bytes, cached) and the ordinary decode
    give the same arguments; malformed or oversized arrays fall back to the full decode."""
    from extender.api import wire

    pod = example_pod("plain")
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["od-a1", "od-b1"]})
    fast = wire.decode_args(body)
    assert fast.names_key == b'["od-a1","od-b1"]'
    assert (fast.pod, fast.nodes, fast.node_names) == (pod, None, ["od-a1", "od-b1"])
    # `{` + `}` would parse, but the body is malformed JSON: a 400, not a missing Pod.
    with pytest.raises(wire.WireError) as exc:
        wire.decode_args(b'{,"NodeNames":["a"]}')
    assert exc.value.malformed
    # A nested array is not a list of strings: the ordinary path reports it.
    with pytest.raises(wire.WireError, match="NodeNames must be a list of strings"):
        wire.decode_args(orjson.dumps({"Pod": pod, "NodeNames": [["a"]]}))
    big = ["n" * 60] * (wire.MAX_CACHED_NAMES_BYTES // 60)
    args = wire.decode_args(orjson.dumps({"Pod": pod, "NodeNames": big}))
    assert args.names_key is None and args.node_names == big
    # The mark is searched from the start: one nested in the Pod, a repeated member (the
    # last wins, as in Go) or members after it all decode as a full decode does.
    head = orjson.dumps({"Pod": {**pod, "x": {"a": 1, "NodeNames": ["nested"]}}})[:-1]
    for body in (head + b',"NodeNames":["a"]}', head + b',"NodeNames":["a"],"NodeNames":["b"]}',
                 head + b',"NodeNames":["a"],"Nodes":null,"NodeNames":["c"]}',
                 b'{"NodeNames":["z"],' + head[1:] + b',"NodeNames":["d"]}'):
        got, want = wire.decode_args(body), wire._args_from(orjson.loads(body))
        assert (got.pod, got.nodes, got.node_names) == (want.pod, want.nodes, want.node_names)
        assert got.node_names[0] in "abcd"


def test_body_bytes_are_counted_per_verb_and_direction(client):
    from extender import metrics

    def count(direction: str) -> float:
        return metrics.child(metrics.HTTP_BODY_BYTES_TOTAL, "filter", direction)._value.get()

    before = count("request"), count("answer")
    body = orjson.dumps({"Pod": example_pod("plain"), "NodeNames": ["od-a1", "od-a2"]})
    response = client.post("/filter", data=body, content_type="application/json")
    assert response.status_code == 200
    assert (count("request") - before[0], count("answer") - before[1]) == (len(body), len(response.data))
