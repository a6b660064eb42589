"""Preemption through kube-scheduler's DefaultPreemption and the extender's `preempt`.

Every node is full, so the in-tree NodeResourcesFit rejects them all before the
extender's `filter` is asked: DefaultPreemption then finds victims on every node, and
only the extender's `preempt` can drop the nodes the preemptor would still not tolerate.
The preemptor tolerates the dedicated nodes through an extended toleration (a CEL
expression in the annotation channel); the same scenario on the same real scheduler
running its in-tree plugins, with an equivalent Equal toleration, must evict exactly the
same victims."""

from __future__ import annotations

import pytest

from testing.harness import PREFIX, SCHEDULER_NAME, node, pod

DEDICATED = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
OTHER = {"key": "dedicated", "value": "other", "effect": "NoSchedule"}
CEL = "taint.key == 'dedicated' && taint.value == 'batch'"
ORACLES = {CEL: lambda key, value, effect: key == "dedicated" and value == "batch"}


def filler(name: str, on: str, priority: int, cpu: str = "1") -> dict:
    return pod(name, {"app": "filler"}, cpu=cpu, memory="64Mi", priority=priority, node_name=on)


def preemptor(extended: bool) -> dict:
    """Tolerates `dedicated=batch` through CEL (extended) or an Equal toleration (in-tree)."""
    if extended:
        return pod("preemptor", {"app": "batch"}, cpu="500m", priority=1000,
                   annotations={f"{PREFIX}/tolerations": [{"expression": CEL}]})
    return pod("preemptor", {"app": "batch"}, cpu="500m", priority=1000,
               tolerations=[{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}])


def full_cluster() -> list[dict]:
    """1-cpu nodes, all full. d2 is the cheapest place the preemptor may go (its
    lowest victim has priority 50; reprieving the priority-200 pod still leaves room);
    u1's victim is cheaper still, but its taint is not tolerated; d3's pod outranks the
    preemptor."""
    return [
        node("d1", cpu="1", taints=[DEDICATED]), filler("f-d1", "d1", 100),
        node("d2", cpu="1", taints=[DEDICATED]), filler("f-d2-low", "d2", 50, "500m"),
        filler("f-d2-high", "d2", 200, "500m"),
        node("d3", cpu="1", taints=[DEDICATED]), filler("f-d3", "d3", 2000),
        node("u1", cpu="1", taints=[OTHER]), filler("f-u1", "u1", 1),
    ]


@pytest.mark.parametrize("extended", [True, False], ids=["extender", "in-tree"])
def test_victims_are_exactly_those_of_the_in_tree_plugins(start_cluster, extended):
    cluster = start_cluster(full_cluster(), in_tree=not extended)
    p = preemptor(extended)
    cluster.create(p)
    outcome = cluster.wait_settled([p], timeout=60)
    assert outcome.bound == {("default", "preemptor"): "d2"}
    assert cluster.deleted_pods() == [("default", "f-d2-low")]
    assert cluster.replay(ORACLES).violations == []
    if extended:
        assert "preempt" in cluster.tap.verbs(("default", "preemptor"))


def one_tolerated_node_among(n: int) -> list[dict]:
    objects = []
    for i in range(n):
        name = f"n{i:03d}"
        objects += [node(name, cpu="1", taints=[DEDICATED if i == n // 2 else OTHER]), filler(f"f-{name}", name, 0)]
    return objects


def test_the_one_tolerated_full_node_among_300_is_always_a_candidate(start_cluster):
    """DefaultPreemption samples max(10% of the nodes, 100) candidates by default: 100 of
    300 here, from a random offset, so the one node the extender keeps would be among
    them one time in three. manifests/base/kube-scheduler-config.yaml asks for all of
    them (minCandidateNodesPercentage: 100)."""
    cluster = start_cluster(one_tolerated_node_among(300))
    p = preemptor(extended=True)
    cluster.create(p)
    outcome = cluster.wait_settled([p], timeout=60)
    assert outcome.bound == {("default", "preemptor"): "n150"}
    assert cluster.deleted_pods() == [("default", "f-n150")]
    calls = [c for c in cluster.tap.calls if c.verb == "preempt"]
    assert calls and calls[0].nodes == 300  # every full node was a candidate, the first time
    assert cluster.replay(ORACLES).violations == []


def test_with_upstream_default_sampling_only_100_of_300_are_candidates(start_cluster):
    """The control: without the manifest's DefaultPreemptionArgs the extender is shown
    100 candidates per attempt, so the tolerated node is usually missing."""
    def upstream_defaults(config: dict) -> None:
        for profile in config["profiles"]:
            assert profile["schedulerName"] == SCHEDULER_NAME
            profile["pluginConfig"] = [c for c in profile.get("pluginConfig") or []
                                       if c["name"] != "DefaultPreemption"]

    cluster = start_cluster(one_tolerated_node_among(300), scheduler_config_edit=upstream_defaults)
    p = preemptor(extended=True)
    cluster.create(p)
    assert cluster.wait_for_verb("preempt", timeout=30)
    first = next(c for c in cluster.tap.calls if c.verb == "preempt")
    assert first.nodes == 100
