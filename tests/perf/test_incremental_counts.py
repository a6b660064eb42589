"""PodTopologySpread's per-selector counts are carried from bucket to bucket and patched
as pods come and go; after every event they equal counts from a freshly built state."""

from __future__ import annotations

import random

from extender.plugins.podtopologyspread.index import spread_index
from extender.plugins.podtopologyspread.selector import LabelSelector, Requirement
from extender.state import Store
from extender.state.podindex import node_code

ZONE = "topology.kubernetes.io/zone"
SELECTORS = [
    LabelSelector((Requirement("app", "In", ("a",)),)),
    LabelSelector((Requirement("app", "In", ("a", "b")), Requirement("tier", "Exists"))),
    LabelSelector((Requirement("app", "NotIn", ("c",)),)),
    LabelSelector((Requirement("tier", "DoesNotExist"),)),
    LabelSelector(()),
]


def _node(i: int, zone: str) -> dict:
    return {"kind": "Node", "metadata": {"name": f"n{i}", "labels": {ZONE: zone}}}


def _pod(rng: random.Random, name: str, nodes: int) -> dict:
    labels = {"app": rng.choice("abc")}
    if rng.random() < 0.5:
        labels["tier"] = "web"
    phase = rng.choice(["Running", "Running", "Running", "Succeeded"])
    node = f"n{rng.randrange(nodes)}" if rng.random() < 0.8 else ""
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def _counts(store: Store, eligible: frozenset[str]) -> list:
    index = spread_index(store.snapshot())
    out = []
    universe = index.nodes
    for sel in SELECTORS:
        per_node = {n.name: int(v) for n, v in zip(universe.nodes, index.own_counts("ns", sel), strict=True) if v}
        out.append(per_node)
        zones: dict[str, int] = {}
        for name, n in per_node.items():
            if name in eligible:
                zone = universe.by_name[name].labels.get(ZONE, "")
                zones[zone] = zones.get(zone, 0) + n
        out.append(zones)
    return out


def test_carried_counts_equal_fresh_counts_through_random_churn():
    rng = random.Random(13)
    nodes = 12
    live = Store()
    objects: dict[str, dict] = {}
    for i in range(nodes):
        live.upsert("Node", _node(i, "abc"[i % 3]))
    names = {f"n{i}" for i in range(nodes)}
    eligible = frozenset(names - {"n0", "n5"})
    for step in range(400):
        name = f"p{rng.randrange(60)}"
        if name in objects and rng.random() < 0.3:
            live.delete("Pod", "ns", name)
            del objects[name]
        else:
            objects[name] = _pod(rng, name, nodes)
            live.upsert("Pod", objects[name])
        if step % 50 == 49:  # a node changes zone: a new node layer, domain entries re-keyed
            i = rng.randrange(nodes)
            live.upsert("Node", _node(i, rng.choice("abcd")))
        got = _counts(live, eligible)  # warms the memo the next bucket carries
        fresh = Store()
        for node in live.snapshot().nodes.nodes:
            fresh.upsert("Node", _node(int(node.name[1:]), node.labels[ZONE]))
        for obj in objects.values():
            fresh.upsert("Pod", obj)
        assert got == _counts(fresh, eligible), step


def test_a_bind_patches_the_carried_counts_instead_of_recounting():
    live = Store()
    for i in range(3):
        live.upsert("Node", _node(i, "abc"[i]))
    pod = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
           "spec": {"nodeName": ""}, "status": {"phase": "Pending"}}
    live.upsert("Pod", pod)
    before = spread_index(live.snapshot())
    assert not before.own_counts("ns", SELECTORS[0]).any()
    live.upsert("Pod", {**pod, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    bucket = live.snapshot().pod_layer.namespaces["ns"]
    carried = bucket._code_memo.get(SELECTORS[0])  # patched at the event, before any request asked
    assert carried.sum() == 1 and carried[node_code("n1")] == 1
