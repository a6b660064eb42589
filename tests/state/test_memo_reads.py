"""One memo call for plugins: `memo(key, compute, reads)` keeps an answer exactly as
long as what it reads stands (`Reads`)."""

from __future__ import annotations

import pytest

from extender.state import NodeSet, Reads, Store


def _node(name: str, zone: str = "a") -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "spec": {}}


def _pod(name: str, node_name: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"nodeName": node_name}, "status": {}}


def _volume(name: str) -> dict:
    return {"kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "storageClassName": "fast"}, "status": {"phase": "Available"}}


@pytest.fixture
def store() -> Store:
    s = Store()
    for i in range(8):  # a change to fewer than a quarter of the nodes evolves the layer
        s.upsert("Node", _node(f"n{i}"))
    s.upsert("Pod", _pod("p0", "n0"))
    s.upsert("PersistentVolume", _volume("v0"))
    return s


def _remember(snapshot, reads: Reads) -> None:
    snapshot.memo(("answer", reads), lambda: "first", reads)


def _kept(snapshot, reads: Reads) -> bool:
    return snapshot.memo(("answer", reads), lambda: "again", reads) == "first"


def test_a_pod_event_keeps_what_reads_nodes_or_volumes_and_drops_what_reads_pods(store):
    before = store.snapshot()
    for reads in (Reads.TAINTS, Reads.NODES, Reads.PODS, Reads.VOLUMES):
        _remember(before, reads)
    assert store.upsert("Pod", _pod("p1", "n1"))
    after = store.snapshot()
    assert {r: _kept(after, r) for r in (Reads.TAINTS, Reads.NODES, Reads.PODS, Reads.VOLUMES)} == {
        Reads.TAINTS: True, Reads.NODES: True, Reads.PODS: False, Reads.VOLUMES: True}


def test_a_volume_event_drops_what_reads_volumes_only(store):
    before = store.snapshot()
    for reads in (Reads.NODES, Reads.VOLUMES):
        _remember(before, reads)
    assert store.upsert("PersistentVolume", _volume("v1"))
    after = store.snapshot()
    assert _kept(after, Reads.NODES) and not _kept(after, Reads.VOLUMES)


def test_a_relabel_keeps_what_reads_taints_only(store):
    before = store.snapshot()
    for reads in (Reads.TAINTS, Reads.NODES):
        _remember(before, reads)
    assert store.upsert("Node", _node("n2", zone="b"))
    after = store.snapshot()
    assert _kept(after, Reads.TAINTS) and not _kept(after, Reads.NODES)


def test_a_candidate_set_keeps_its_own_answers_and_shares_the_node_layers(store):
    universe = store.snapshot().nodes
    first, second = NodeSet(None, universe, ["n0", "n1"]), NodeSet(None, universe, ["n0", "n1"])
    first.memo("seeded", lambda: "first", Reads.CANDIDATES)
    first.memo("mask", lambda: "first", Reads.NODES)
    assert second.memo("seeded", lambda: "again", Reads.CANDIDATES) == "again"
    assert second.memo("mask", lambda: "again", Reads.NODES) == "first"
    assert store.snapshot().memo("mask", lambda: "again", Reads.NODES) == "first"


def test_a_node_layer_refuses_answers_that_read_pods(store):
    with pytest.raises(ValueError, match="reads nodes or taints"):
        store.snapshot().nodes.memo("k", lambda: 1, Reads.PODS)


def test_none_is_never_kept(store):
    snapshot = store.snapshot()
    calls = []
    for _ in range(2):
        assert snapshot.memo("none", lambda: calls.append(1), Reads.PODS) is None
    assert calls == [1, 1]
