"""The store: O(object) events, no-op updates dropped, layers shared, assumed pods."""

from __future__ import annotations

import time

import orjson
import pytest

from extender.config import Config
from extender.engine import Extender
from extender.model.parse import ModelError, existing_pod_from_dict
from extender.state import ClusterSnapshot, ClusterSource, Reads, StaticSource, Store
from extender.state.podindex import NamespacePods


def node(name: str, zone: str = "a", taints=(), unschedulable=False, **extra) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}, **extra},
        "spec": {"taints": list(taints), "unschedulable": unschedulable}}


def pod(name: str, node_name: str = "", ns: str = "ns", app: str = "web", **status) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {"nodeName": node_name}, "status": status}


@pytest.fixture
def store() -> Store:
    s = Store()
    for i in range(4):
        s.upsert("Node", node(f"n{i}", zone="ab"[i % 2]))
    for i in range(6):
        s.upsert("Pod", pod(f"p{i}", f"n{i % 4}"))
    s.upsert("Service", {"kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
                         "spec": {"selector": {"app": "web"}}})
    return s


def test_updates_that_change_nothing_read_are_dropped(store):
    before = store.snapshot()
    heartbeat = node("n0", zone="a")
    heartbeat["status"] = {"conditions": [{"type": "Ready", "lastHeartbeatTime": "now"}]}
    heartbeat["metadata"]["resourceVersion"] = "999"
    assert store.upsert("Node", heartbeat) is False
    noisy = pod("p0", "n0", podIP="10.0.0.1", conditions=[{"type": "Ready"}])
    assert store.upsert("Pod", noisy) is False
    scaled = {"kind": "Service", "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "5"},
              "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
    assert store.upsert("Service", scaled) is False
    assert store.snapshot() is before  # nothing published, every memo kept


def test_a_pod_event_keeps_the_node_layer_and_its_memos(store):
    before = store.snapshot()
    calls = []
    before.memo("answer", lambda: calls.append(1) or "computed", Reads.NODES)
    assert store.upsert("Pod", pod("new", "n1"))
    after = store.snapshot()
    assert after is not before and after.nodes is before.nodes
    assert after.memo("answer", lambda: calls.append(1) or "again", Reads.NODES) == "computed"
    assert calls == [1]
    assert after.pod_layer.version != before.pod_layer.version
    # the old snapshot is untouched: a request holding it sees one consistent state
    assert before.pod_layer.get("ns", "new") is None and after.pod_layer.get("ns", "new")


def test_only_the_touched_namespace_bucket_is_replaced(store):
    store.upsert("Pod", pod("other", "n0", ns="other"))
    before = store.snapshot()
    store.upsert("Pod", pod("p9", "n2"))
    after = store.snapshot()
    assert after.pod_layer.namespaces["other"] is before.pod_layer.namespaces["other"]
    assert after.pod_layer.namespaces["ns"] is not before.pod_layer.namespaces["ns"]


def test_a_node_event_replaces_the_node_layer(store):
    before = store.snapshot()
    assert store.upsert("Node", node("n0", taints=[{"key": "k", "effect": "NoSchedule"}]))
    after = store.snapshot()
    assert after.nodes is not before.nodes and after.nodes.version > before.nodes.version
    assert after.pod_layer is before.pod_layer
    assert after.nodes.by_name["n0"].taints[0].key == "k"


def test_counts_follow_binds_deletes_and_terminating_pods(store):
    from extender.plugins.podtopologyspread.index import spread_index
    from extender.plugins.podtopologyspread.selector import from_map

    selector = from_map({"app": "web"})
    def counts() -> dict[str, int]:
        index = spread_index(store.snapshot())
        return {n.name: int(v) for n, v in zip(index.nodes.nodes, index.own_counts("ns", selector), strict=True) if v}

    assert counts() == {"n0": 2, "n1": 2, "n2": 1, "n3": 1}
    store.upsert("Pod", pod("pending"))
    store.upsert("Pod", pod("pending", "n3"))  # bound
    store.delete("Pod", "ns", "p0")
    terminating = pod("p1", "n1")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    store.upsert("Pod", terminating)
    store.upsert("Pod", pod("p2", "n2", phase="Succeeded"))
    assert counts() == {"n0": 1, "n1": 1, "n3": 2}


def test_answers_match_a_snapshot_built_from_scratch(store):
    """The incrementally maintained state answers exactly as a fresh build does."""
    from conftest import example_pod

    for i in range(40):
        store.upsert("Pod", pod(f"x{i}", f"n{i % 3}", app="web" if i % 2 else "db"))
        if i % 5 == 0:
            store.delete("Pod", "ns", f"x{i - 1}")
    objects = [n for n in _nodes(store)] + [p for p in _pods(store)]
    fresh = ClusterSnapshot.from_objects(objects + store.snapshot().workloads["Service"])
    class Incremental(ClusterSource):  # the store's current snapshot, as the live source serves it
        def snapshot(self):
            return store.snapshot()

    live = Extender(Config(), Incremental())
    scratch = Extender(Config(), StaticSource(fresh))

    from extender.api.wire import decode_args

    for name in ("plain", "spread-spot"):
        raw = example_pod(name)
        raw["metadata"]["namespace"] = "ns"
        raw["metadata"].setdefault("labels", {})["app"] = "web"
        args = decode_args(orjson.dumps({"Pod": raw, "NodeNames": ["n0", "n1", "n2", "n3", "ghost"]}))
        assert orjson.loads(live.filter(args)) == orjson.loads(scratch.filter(args))
        assert orjson.loads(live.prioritize(args)) == orjson.loads(scratch.prioritize(args))


def _nodes(store: Store) -> list[dict]:
    return [{"kind": "Node", "metadata": {"name": n.name, "labels": dict(n.labels)},
             "spec": {"taints": [t._asdict() for t in n.taints], "unschedulable": n.unschedulable}}
            for n in store.snapshot().nodes.nodes]


def _pods(store: Store) -> list[dict]:
    return [{"kind": "Pod", "metadata": {"name": p.name, "namespace": p.namespace, "labels": dict(p.labels)},
             "spec": {"nodeName": p.node_name}, "status": {"phase": p.phase}}
            for p in store.snapshot().pods]


def test_replace_is_a_relist(store):
    changed, rejected = store.replace("Node", [node("n0", zone="a"), node("n9"),
                                               {"kind": "Node", "metadata": {"name": "bad"},
                                                "spec": {"taints": "oops"}}])
    assert rejected == 1
    assert store.snapshot().nodes.names == {"n0", "n9"}
    assert changed == 4  # n1, n2, n3 gone; n9 added; n0 unchanged
    store.replace("Pod", [pod("p0", "n0")])
    assert [p.name for p in store.snapshot().pods] == ["p0"]


def test_bad_objects_raise_model_errors(store):
    with pytest.raises(ModelError):
        store.upsert("Node", {"metadata": {"name": "x"}, "spec": {"unschedulable": "yes"}})
    with pytest.raises(ModelError):
        store.upsert("Pod", {"metadata": {}})
    with pytest.raises(ModelError):
        store.upsert("Secret", {"metadata": {"name": "s"}})


def test_namespace_buckets_stay_flat_under_churn():
    """Freed ids are reused: 10,000 create/delete cycles leave a small bucket."""
    s = Store()
    s.upsert("Node", node("n0"))
    for i in range(10_000):
        s.upsert("Pod", pod(f"p{i}", "n0"))
        if i >= 10:
            s.delete("Pod", "ns", f"p{i - 10}")
        s.snapshot()
    bucket: NamespacePods = s.snapshot().pod_layer.namespaces["ns"]
    assert len(bucket) == 10 and len(bucket.all_ids) == 10
    assert bucket._top <= 11 and len(bucket.node_codes) <= 16
    assert list(bucket.by_label["app"].keys()) == ["web"]


def test_assumed_pods_overlay():
    s = Store()
    s.upsert("Node", node("n0"))
    s.upsert("Pod", pod("p", ""))  # pending, as the watch shows it
    p = existing_pod_from_dict(pod("p", ""))
    s.assume(p, "n0")
    assert s.snapshot().pod_layer.get("ns", "p").node_name == "n0"
    assert s.assumed() == {("ns", "p"): "n0"}
    # an unrelated watch update of the still-pending pod does not undo the assumption
    assert s.upsert("Pod", pod("p", "", phase="Pending")) is False
    assert s.snapshot().pod_layer.get("ns", "p").node_name == "n0"
    # the bind fails: forget restores what the watch last said
    assert s.forget("ns", "p")
    assert s.snapshot().pod_layer.get("ns", "p").node_name == ""
    assert s.assumed() == {}
    # assume again; the watch confirms the bind
    s.assume(p, "n0")
    s.upsert("Pod", pod("p", "n0"))
    assert s.assumed() == {} and s.snapshot().pod_layer.get("ns", "p").node_name == "n0"


def _bound_assumption(s: Store, name: str = "p", uid: str = "") -> None:
    """`bind` as the verb does it: assume before the call, `bound` once it succeeded."""
    raw = pod(name, "")
    raw["metadata"]["uid"] = uid
    s.assume(existing_pod_from_dict(raw), "n0")
    s.bound("ns", name)


def test_a_successful_binding_is_never_expired_by_a_timer(monkeypatch):
    """Upstream never expires an assumed pod whose binding succeeded: with the watch
    broken, the assumption is the only truth (the old 30 s --assume-ttl dropped it)."""
    s = Store()
    s.upsert("Node", node("n0"))
    _bound_assumption(s, "never-seen")
    later = time.monotonic() + 3600
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert s.snapshot().pod_layer.get("ns", "never-seen").node_name == "n0"
    assert s.assumed() == {("ns", "never-seen"): "n0"}


@pytest.mark.parametrize("observation", ["bound here", "bound elsewhere", "deleted", "recreated"])
def test_a_successful_binding_ends_when_the_state_shows_the_pod(observation):
    s = Store()
    s.upsert("Node", node("n0"))
    s.upsert("Node", node("n1"))
    s.upsert("Pod", {**pod("p", ""), "metadata": {**pod("p", "")["metadata"], "uid": "u1"}})
    _bound_assumption(s, "p", uid="u1")
    watched = pod("p", "")
    watched["metadata"]["uid"] = "u1"
    if observation == "bound here":
        watched["spec"]["nodeName"] = "n0"
        s.upsert("Pod", watched)
    elif observation == "bound elsewhere":
        watched["spec"]["nodeName"] = "n1"
        s.upsert("Pod", watched)
    elif observation == "deleted":
        s.delete("Pod", "ns", "p")
    else:  # deleted and created again under the same name: not the pod we bound
        watched["metadata"]["uid"] = "u2"
        s.upsert("Pod", watched)
    assert s.assumed() == {}
    held = s.snapshot().pod_layer.get("ns", "p")
    want = {"bound here": "n0", "bound elsewhere": "n1", "deleted": None, "recreated": ""}[observation]
    assert (held.node_name if held is not None else None) == want


def test_a_relist_ends_a_successful_binding_only_if_it_started_after_it():
    s = Store()
    s.upsert("Node", node("n0"))
    # a list that started before the binding succeeded may not show the pod yet: kept
    before = iter([node("n0")])
    pods_before = iter(())

    def listed_before():
        yield from pods_before
        _bound_assumption(s, "late")  # the binding succeeds while the list is read

    s.replace("Node", before)
    s.replace("Pod", listed_before())
    assert s.assumed() == {("ns", "late"): "n0"}
    # a list that started after it succeeded and does not show the pod: it is gone
    s.replace("Pod", iter(()))
    assert s.assumed() == {}
    assert s.snapshot().pod_layer.get("ns", "late") is None


def test_a_binding_still_in_flight_survives_a_relist_and_a_failed_one_is_forgotten():
    s = Store()
    s.upsert("Node", node("n0"))
    s.assume(existing_pod_from_dict(pod("p", "")), "n0")  # the call is out
    s.replace("Pod", iter(()))
    assert s.assumed() == {("ns", "p"): "n0"}
    assert s.forget("ns", "p")
    assert s.snapshot().pod_layer.get("ns", "p") is None and s.assumed() == {}


def test_replaced_state_is_freed_by_reference_counting(tmp_path):
    """No reference cycles and no gc.freeze: with the cyclic collector off, a reloaded
    file's previous snapshot and node layer are freed as soon as nobody reads them."""
    import gc
    import weakref

    from conftest import EXAMPLES, example_pod

    from extender.api.wire import decode_args
    from extender.state import FileSource, load_objects

    objects = load_objects(EXAMPLES / "cluster.yaml")
    path = tmp_path / "cluster.json"
    path.write_bytes(orjson.dumps({"kind": "List", "items": objects}))
    gc.collect()
    gc.disable()
    try:
        source = FileSource(path, poll_seconds=0, last_good=False)
        engine = Extender(Config(), source)
        names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
        for pod_name in ("plain", "spread-spot", "cel-rack-regex"):
            body = orjson.dumps({"Pod": example_pod(pod_name), "NodeNames": names})
            engine.filter(decode_args(body))
            engine.prioritize(decode_args(body))
        old = weakref.ref(source.snapshot())
        old_nodes = weakref.ref(source.snapshot().nodes)
        for obj in objects:
            if obj["kind"] == "Node":
                obj["metadata"]["labels"]["reloaded"] = "yes"
        path.write_bytes(orjson.dumps({"kind": "List", "items": objects}))
        assert source.reload("test")
        engine.filter(decode_args(orjson.dumps({"Pod": example_pod("plain"), "NodeNames": names})))
        assert old() is None, gc.get_referrers(old())
        assert old_nodes() is None
    finally:
        gc.enable()


def test_memory_stays_flat_under_churn():
    """Thousands of pod and node events through the store, readers holding snapshots
    in between: what stays allocated does not grow with the number of events."""
    import gc
    import tracemalloc

    s = Store()
    for i in range(50):
        s.upsert("Node", node(f"n{i}", zone="abc"[i % 3]))
    for i in range(500):
        s.upsert("Pod", pod(f"p{i}", f"n{i % 50}", app=f"a{i % 7}"))
    s.snapshot()

    def churn(rounds: int) -> None:
        for r in range(rounds):
            i = r % 500
            s.delete("Pod", "ns", f"p{i}")
            s.upsert("Pod", pod(f"p{i}", f"n{(i + r) % 50}", app=f"a{r % 7}"))
            if r % 50 == 0:
                s.upsert("Node", node(f"n{r % 50}", zone="abc"[r % 3], taints=[{"key": str(r % 3), "effect": "NoSchedule"}]))
            s.snapshot().memo(("k", r % 5), lambda: frozenset(range(100)), Reads.NODES)

    churn(2_000)  # warm up: caches and free lists reach their working size
    gc.collect()
    tracemalloc.start()
    try:
        churn(2_000)
        gc.collect()
        first = tracemalloc.get_traced_memory()[0]
        churn(10_000)
        gc.collect()
        second = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert second - first < 200_000, (first, second)
