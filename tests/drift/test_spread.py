"""The opt-in topology spread report against PodTopologySpread's reference Filter run
for each running pod on its own node, with the pod taken out of the state (what a
pending copy of it would be told), on random clusters."""

from __future__ import annotations

import random

import pytest
from objects import Cluster, node, pod, taint

from extender.api.candidates import resolve
from extender.config import Config
from extender.drift.spread import minimum_stats
from extender.engine import Extender
from extender.explain import snapshot_without
from extender.state import StaticSource
from extender.validation.pod import pod_from_dict

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
SPREAD = Config(drift_topology_spread=True)


def constraint(key: str, max_skew: int = 1, **fields) -> dict:
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}, **fields}


def reference(cluster: Cluster) -> dict:
    snapshot = cluster.store.snapshot()
    engine = Extender(cluster.config, StaticSource(snapshot), fast=False)
    out = {}
    for raw in cluster.pods():
        name = raw["spec"].get("nodeName")
        if not name or name not in snapshot.nodes.by_name or raw["status"]["phase"] == "Succeeded":
            continue
        pod = pod_from_dict(raw, gates=cluster.config.feature_gates)
        snap = snapshot_without(snapshot, pod)
        outcome = engine.run_filter(engine.new_state(snap, explain=True), pod, resolve(snap, [name]), run_all=True)
        status = outcome.per_plugin.get("PodTopologySpread", {}).get(name)
        if status is not None and not status.is_success and status.code.value != "Error":
            out[(pod.namespace, pod.name)] = (status.reasons[0], status.details)
    return out


def mine(cluster: Cluster) -> dict:
    cluster.tracker.settle()
    assert cluster.tracker.run_spread(interval=0)
    return {key: (v.reason, v.details) for key, (_, (v,)) in cluster.tracker.spread.drifted.items()}


def test_a_zone_emptied_under_running_pods_is_drift():
    web = {"app": "web"}
    cluster = Cluster(SPREAD, [
        node("a1", **{ZONE: "a"}), node("b1", **{ZONE: "b"}), node("c1", **{ZONE: "c"}),
        *(pod(f"web-{i}", f"{'abc'[i % 3]}1", labels=web, spread=[constraint(ZONE)]) for i in range(6)),
    ])
    assert mine(cluster) == {}
    cluster.put(node("c1", **{ZONE: "a"}))  # c1 moves to zone a: a has 4, b 2
    found = mine(cluster)
    assert set(found) == {(("default", f"web-{i}")) for i in (0, 2, 3, 5)}
    reason, details = found[("default", "web-0")]
    assert reason == "node(s) didn't match pod topology spread constraints"
    assert "domain topology.kubernetes.io/zone=a: count 3 + self 1 - minimum 2 = skew 2 > maxSkew 1" in details[0]
    assert found == reference(cluster)
    cluster.put(node("c1", **{ZONE: "c"}))
    assert mine(cluster) == {}


def test_a_removed_topology_label_is_drift():
    cluster = Cluster(SPREAD, [node("a1", **{ZONE: "a"}), pod("web-0", "a1", labels={"app": "web"},
                                                              spread=[constraint(ZONE)])])
    assert mine(cluster) == {}
    cluster.put(node("a1"))
    assert mine(cluster) == {("default", "web-0"): (
        "node(s) didn't match pod topology spread constraints (missing required label)",
        ("constraint 0 (topologyKey topology.kubernetes.io/zone, maxSkew 1, selector app=web): node has no "
         "label 'topology.kubernetes.io/zone'",))} == reference(cluster)


def test_minimum_stats():
    assert minimum_stats({}) == (2**62, 0, 2**62)
    assert minimum_stats({"a": 3, "b": 1, "c": 1, "d": 2}) == (1, 2, 2)
    assert minimum_stats({"a": 5}) == (5, 1, 2**62)


def random_cluster(rng: random.Random) -> list[dict]:
    objects = []
    for i in range(rng.randint(2, 7)):
        labels = {}
        if rng.random() < 0.9:
            labels[ZONE] = rng.choice("abc")
        taints = [taint("spot", "yes")] if rng.random() < 0.2 else []
        objects.append(node(f"n{i}", taints, **labels, pool=rng.choice("xy")))
    names = [o["metadata"]["name"] for o in objects]
    for i in range(rng.randint(1, 14)):
        fields = {}
        if rng.random() < 0.3:
            fields["nodeTaintsPolicy"] = "Honor"
        if rng.random() < 0.2:
            fields["minDomains"] = rng.randint(1, 4)
        constraints = [constraint(rng.choice([ZONE, HOST]), rng.randint(1, 2), **fields)]
        if rng.random() < 0.3:
            constraints.append(constraint(HOST, rng.randint(1, 3)))
        labels = {"app": rng.choice(["web", "web", "db"])}
        tolerations = [{"key": "spot", "operator": "Exists"}] if rng.random() < 0.5 else None
        objects.append(pod(f"p{i}", rng.choice(names), labels=labels, tolerations=tolerations,
                           spread=constraints if rng.random() < 0.8 else None,
                           node_selector={"pool": "x"} if rng.random() < 0.2 else None,
                           phase=rng.choice(["Running"] * 5 + ["Succeeded"])))
    return objects


@pytest.mark.parametrize("seed", range(60))
def test_the_spread_report_equals_the_reference_filter(seed):
    cluster = Cluster(SPREAD, random_cluster(random.Random(seed)))
    assert mine(cluster) == reference(cluster)


def test_the_spread_report_waits_ten_times_its_last_run():
    cluster = Cluster(SPREAD, [node("a1", **{ZONE: "a"}), pod("web-0", "a1", labels={"app": "web"},
                                                              spread=[constraint(ZONE)])])
    tracker = cluster.tracker
    tracker.settle()
    assert tracker.run_spread(interval=0)
    assert not tracker.run_spread()  # nothing changed
    cluster.put(node("a1"))
    tracker.settle()
    assert not tracker.run_spread()  # changed, but within 5 s of the last run
    tracker.spread.ran_at -= 6
    tracker.spread.seconds = 1.0  # a 1 s run: the next waits 10 s
    assert not tracker.run_spread()
    tracker.spread.ran_at -= 5
    assert tracker.run_spread()
    assert ("default", "web-0") in tracker.spread.drifted
