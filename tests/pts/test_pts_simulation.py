"""Scheduling simulation through the whole engine: filter -> prioritize -> bind the pod
to the best node -> add it to the cluster state, for 2,000 pods (`make test`: 600, ten
rounds over the 60 usable hosts; each pod rebuilds the snapshot) with maxSkew 1
DoNotSchedule on zone and on hostname. Zone-c has two extra nodes with an untolerated
NoSchedule taint; the hostname constraint honours taints, so they are neither candidates
nor hostname domains (every zone keeps 20 usable hosts: with unequal usable hosts per
zone the two constraints can genuinely deadlock, upstream too). At the end no hard
constraint may be violated."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from pts_harness import FakeCel, node_obj

from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.engine import Extender
from extender.model import Pod
from extender.state import ClusterSnapshot, StaticSource
from testing.scores import best_hosts

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
PODS = 2000
ZONES = {"zone-a": 20, "zone-b": 20, "zone-c": 22}  # zone-c: 20 usable + 2 tainted
TAINTED = {"c-20", "c-21"}


def incoming(i: int) -> dict:
    sel = {"matchLabels": {"app": "sim"}}
    return {
        "metadata": {"name": f"sim-{i}", "namespace": "default", "labels": {"app": "sim"}},
        "spec": {"topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel},
            {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel,
             "nodeTaintsPolicy": "Honor"},
            {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": sel},
        ]},
    }


@pytest.mark.parametrize("count", [600, pytest.param(PODS, marks=pytest.mark.long)])
def test_two_thousand_pods_never_violate_hard_constraints(count: int) -> None:
    objs = []
    for zone, n in ZONES.items():
        for i in range(n):
            name = f"{zone[-1]}-{i}"
            taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if name in TAINTED else []
            objs.append(node_obj(name, {ZONE: zone, HOST: name}, taints))
    snapshot = ClusterSnapshot.from_objects(objs)
    nodes = snapshot.nodes.nodes
    names = [n.name for n in nodes]
    zone_of = {n.name: n.labels[ZONE] for n in nodes}
    source = StaticSource(snapshot)
    ext = Extender(Config(), source, cel=FakeCel())  # slim answers: an absent host scores 0
    pods: list[Pod] = []
    for i in range(count):
        raw = incoming(i)
        result = orjson.loads(ext.filter(ExtenderArgs(raw, None, names)))
        feasible = result["NodeNames"]
        assert feasible, f"pod {i}: no feasible node: {result}"
        assert not TAINTED & set(feasible)
        scores = orjson.loads(ext.prioritize(ExtenderArgs(raw, None, feasible)))
        best = best_hosts(feasible, scores)[0]
        pods.append(Pod("default", f"sim-{i}", labels={"app": "sim"}, node_name=best, phase="Running"))
        source.set(ClusterSnapshot(nodes, pods, snapshot.workloads, generation=i + 1))

    per_zone = Counter(zone_of[p.node_name] for p in pods)
    per_host = Counter(p.node_name for p in pods)
    assert sum(per_zone.values()) == count
    assert max(per_zone.values()) - min(per_zone.values()) <= 1
    eligible_hosts = [n for n in names if n not in TAINTED]
    counts = [per_host.get(n, 0) for n in eligible_hosts]
    assert max(counts) - min(counts) <= 1
    assert not TAINTED & set(per_host)
