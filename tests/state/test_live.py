"""The live source against the API-server double: churn and faults, and after each the
state equals the truth object by object and /filter answers as a fresh file would."""

from __future__ import annotations

import random
import time

import pytest
from conftest import EXAMPLES
from live_truth import assert_filter_matches_fresh_file, start_live, synced_live, wait_converged

from extender import metrics
from extender.state import load_objects
from testing.apiserver import FakeApiServer, plural_of


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.2) as server:
        server.load(load_objects(EXAMPLES / "cluster.yaml"))
        yield server


@pytest.fixture
def live(api, tmp_path):
    with synced_live(api, tmp_path) as source:
        yield source


def counter(metric, *labels) -> float:
    return metric.labels(*labels)._value.get()


def test_initial_sync_pages_and_matches_the_truth(api, live, tmp_path):
    assert live.ready()
    wait_converged(live, api)
    assert any("limit=4" in r and "continue=" in r for r in api.requests), "lists are paginated"
    assert any("watch=true" in r and "allowWatchBookmarks=true" in r for r in api.requests)
    assert_filter_matches_fresh_file(live, api, tmp_path)


def _churn(api: FakeApiServer, rng: random.Random, serial: list[int]) -> None:
    """One random change of the kinds the issue names."""
    nodes = api.objects("nodes")
    pods = api.objects("pods")
    op = rng.choice(["add-node", "remove-node", "relabel", "taint", "cordon", "create-pod", "bind",
                     "delete-pod", "terminate", "succeed", "service", "replicaset", "heartbeat"])
    serial[0] += 1
    n = serial[0]
    if op == "add-node" or (not nodes and op in ("remove-node", "relabel", "taint", "cordon")):
        zone = rng.choice("abc")
        api.create("nodes", {"metadata": {"name": f"churn-{n}", "labels": {
            "kubernetes.io/hostname": f"churn-{n}", "topology.kubernetes.io/zone": f"zone-{zone}"}}})
    elif op == "remove-node":
        api.delete("nodes", rng.choice(nodes)["metadata"]["name"])
    elif op in ("relabel", "taint", "cordon", "heartbeat"):
        obj = rng.choice(nodes)
        if op == "relabel":
            obj["metadata"].setdefault("labels", {})["topology.kubernetes.io/zone"] = f"zone-{rng.choice('abcd')}"
        elif op == "taint":
            obj.setdefault("spec", {}).setdefault("taints", []).append(
                {"key": f"churn-{n}", "value": "x", "effect": rng.choice(["NoSchedule", "PreferNoSchedule"])})
        elif op == "cordon":
            spec = obj.setdefault("spec", {})
            spec["unschedulable"] = not spec.get("unschedulable", False)
        else:
            obj["status"] = {"conditions": [{"type": "Ready", "lastHeartbeatTime": str(n)}]}
        api.update("nodes", obj)
    elif op == "create-pod" or not pods:
        node = rng.choice(nodes)["metadata"]["name"] if nodes and rng.random() < 0.5 else ""
        api.create("pods", {"metadata": {"name": f"churn-{n}", "namespace": rng.choice(["shop", "default"]),
                                         "labels": {"app": rng.choice(["web", "api", "batch"])}},
                            "spec": {"nodeName": node, "containers": [{"name": "c"}]}})
    elif op == "bind":
        pending = [p for p in pods if not p["spec"].get("nodeName")]
        if pending and nodes:
            p = rng.choice(pending)
            api.bind(p["metadata"]["namespace"], p["metadata"]["name"], rng.choice(nodes)["metadata"]["name"])
    elif op == "delete-pod":
        p = rng.choice(pods)
        api.delete("pods", p["metadata"]["name"], p["metadata"]["namespace"])
    elif op == "terminate":
        p = rng.choice(pods)
        api.terminate(p["metadata"]["namespace"], p["metadata"]["name"])
    elif op == "succeed":
        p = rng.choice(pods)
        p.setdefault("status", {})["phase"] = "Succeeded"
        api.update("pods", p)
    elif op == "service":
        api.apply("services", {"metadata": {"name": "web", "namespace": "shop"},
                               "spec": {"selector": {"app": rng.choice(["web", "api"])}}})
    elif op == "replicaset":
        name = f"rs-{rng.randrange(3)}"
        if rng.random() < 0.3 and api.get("replicasets", name, "shop"):
            api.delete("replicasets", name, "shop")
        else:
            api.apply("replicasets", {"metadata": {"name": name, "namespace": "shop"}, "spec": {
                "replicas": rng.randrange(5), "selector": {"matchLabels": {"app": rng.choice(["web", "api"])}}}})


def test_churn_converges_and_filter_agrees(api, live, tmp_path):
    rng = random.Random(10)
    serial = [0]
    for _ in range(8):
        for _ in range(25):
            _churn(api, rng, serial)
        wait_converged(live, api)
        assert_filter_matches_fresh_file(live, api, tmp_path)


def test_heartbeats_do_not_publish_a_new_state(api, live):
    wait_converged(live, api)
    before = live.snapshot()
    dropped = counter(metrics.WATCH_EVENTS_DROPPED_TOTAL, "Node")
    for _ in range(5):
        obj = api.objects("nodes")[0]
        obj["status"] = {"conditions": [{"type": "Ready", "lastHeartbeatTime": str(time.time())}]}
        api.update("nodes", obj)
    deadline = time.monotonic() + 10
    while counter(metrics.WATCH_EVENTS_DROPPED_TOTAL, "Node") < dropped + 5:
        assert time.monotonic() < deadline, "heartbeat events never arrived"
        time.sleep(0.02)
    assert live.snapshot() is before


def test_streams_cut_mid_event_100_times(api, live, tmp_path):
    rng = random.Random(2)
    serial = [0]
    errors = sum(counter(metrics.WATCH_ERRORS_TOTAL, k, r) for k in ("Pod", "Node") for r in
                 ("ProtocolError", "IncompleteRead"))
    for i in range(100):
        api.faults.cut_events = 1
        while api.faults.cut_events:  # some changes emit no event (a bind of nothing pending)
            _churn(api, rng, serial)
            time.sleep(0.005)
        if i % 10 == 9:
            wait_converged(live, api)
    wait_converged(live, api)
    assert_filter_matches_fresh_file(live, api, tmp_path)
    assert api.faults.fired["cut_events"] == 100
    after = sum(counter(metrics.WATCH_ERRORS_TOTAL, k, r) for k in ("Pod", "Node") for r in
                ("ProtocolError", "IncompleteRead"))
    assert after > errors, "the cuts were seen as dropped streams"


def test_410_on_resume_relists(api, live, tmp_path):
    relists = sum(counter(metrics.WATCH_RELISTS_TOTAL, k) for k in ("Node", "Pod"))
    for round_ in range(3):
        api.faults.cut_events = 2  # drop the streams...
        api.create("pods", {"metadata": {"name": f"x-{round_}", "namespace": "shop"}, "spec": {}})
        api.compact()  # ...and forget the history they would resume from
        api.update("nodes", {**api.objects("nodes")[0], "spec": {"unschedulable": True, "taints": []}})
        api.delete("pods", f"x-{round_}", "shop")
        wait_converged(live, api)
    api.faults.expire_watches = 6  # every kind's next watch: 410 whatever its RV
    api.close_watches()
    api.create("nodes", {"metadata": {"name": "after-expiry"}})
    wait_converged(live, api)
    assert sum(counter(metrics.WATCH_RELISTS_TOTAL, k) for k in ("Node", "Pod")) > relists
    assert_filter_matches_fresh_file(live, api, tmp_path)


def test_500s_and_slow_responses(api, live, tmp_path):
    rng = random.Random(3)
    serial = [0]
    api.faults.fail_requests, api.faults.fail_status = 20, 500
    api.close_watches()  # every kind reconnects into the failures
    for _ in range(20):
        _churn(api, rng, serial)
    wait_converged(live, api)
    assert api.faults.fail_requests < 20
    api.faults.fail_requests = 0
    api.faults.delay_seconds = 0.3
    api.close_watches()
    for _ in range(20):
        _churn(api, rng, serial)
    wait_converged(live, api)
    api.faults.delay_seconds = 0
    assert_filter_matches_fresh_file(live, api, tmp_path)
    assert live.ready()


def test_events_for_objects_never_listed(api, live):
    wait_converged(live, api)
    ghost = {"metadata": {"name": "ghost", "namespace": "shop", "labels": {"app": "web"}}, "spec": {"nodeName": "od-a1"}}
    api.inject_event("pods", "DELETED", ghost)  # deleting what we never had: nothing happens
    api.inject_event("services", "DELETED", {"metadata": {"name": "nope", "namespace": "x"}})
    wait_converged(live, api)
    api.inject_event("pods", "MODIFIED", ghost)  # an update of an unknown object is an add
    deadline = time.monotonic() + 10
    while live.snapshot().pod_layer.get("shop", "ghost") is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    api.create("pods", ghost)
    api.delete("pods", "ghost", "shop")
    wait_converged(live, api)


def test_unparseable_objects_are_rejected_and_counted(api, live):
    rejected = counter(metrics.WATCH_ERRORS_TOTAL, "Node", "unparseable object")
    api.create("nodes", {"metadata": {"name": "broken"}, "spec": {"taints": "not-a-list"}})
    api.create("nodes", {"metadata": {"name": "fine"}})
    deadline = time.monotonic() + 10
    while "fine" not in live.snapshot().nodes.names:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert "broken" not in live.snapshot().nodes.names
    assert counter(metrics.WATCH_ERRORS_TOTAL, "Node", "unparseable object") == rejected + 1


def test_readiness_waits_for_every_kind_and_fails_when_stale(api, tmp_path):
    api.faults.fail_requests, api.faults.fail_match = 10**6, "statefulsets"
    source = start_live(api, tmp_path, max_staleness=2.0)
    try:
        time.sleep(0.5)
        ok, why = source.readiness()
        assert not ok and "StatefulSet" in why and "not synced" in why
        api.faults.fail_requests = 0
        assert source.wait_synced(10)
        assert source.readiness() == (True, "ok")
        # every request fails from now on: after max_staleness the source is not ready
        api.faults.fail_requests, api.faults.fail_match = 10**6, ""
        api.close_watches()
        deadline = time.monotonic() + 10
        while source.ready():
            assert time.monotonic() < deadline, "never went unready"
            time.sleep(0.05)
        ok, why = source.readiness()
        assert "not confirmed by the API server within 2s" in why and "failing" in why
        api.faults.fail_requests = 0
        deadline = time.monotonic() + 10
        while not source.ready():
            assert time.monotonic() < deadline, "never recovered"
            time.sleep(0.05)
        wait_converged(source, api)
    finally:
        source.stop()


def test_readyz_and_unknown_nodes_through_the_app(api, live):
    from extender.config import Config
    from extender.server.app import create_app
    from testing.client import Client

    client = Client(create_app(Config(), source=live))
    assert client.get("/readyz").status_code == 200
    wait_converged(live, api)
    from conftest import example_pod

    unknown = counter_value = metrics.UNKNOWN_NODES_TOTAL._value.get()
    api.create("nodes", {"metadata": {"name": "brand-new"}})
    # od-a2's kernel taint: no node fits, so the answer lists every failing node
    answer = client.post("/filter", json={"Pod": example_pod("plain"), "NodeNames": ["od-a2", "not-yet"]}).json
    assert answer["FailedNodes"] == {"not-yet": "node not seen yet by the extender's cluster state "
                                                "(new node or watch lag)"}
    assert metrics.UNKNOWN_NODES_TOTAL._value.get() == unknown + 1 == counter_value + 1


def test_objects_kinds_match_the_double(api):
    assert {plural_of({"kind": k}) for k in ("Node", "Pod", "Service", "ReplicaSet", "StatefulSet",
                                               "ReplicationController")} == {
        "nodes", "pods", "services", "replicasets", "statefulsets", "replicationcontrollers"}


def test_an_expired_continue_token_restarts_the_list(api, tmp_path):
    for i in range(20):
        api.create("pods", {"metadata": {"name": f"many-{i}", "namespace": "shop"}, "spec": {}})
    api.faults.fail_requests, api.faults.fail_status, api.faults.fail_match = 1, 410, "/api/v1/pods?continue="
    source = start_live(api, tmp_path)
    try:
        assert source.wait_synced(20)
        assert api.faults.fired["fail_requests"] == 1
        wait_converged(source, api)
    finally:
        source.stop()
