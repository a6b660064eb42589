"""Nodes tainted, cordoned and relabelled in the middle of a burst with hard zone +
hostname spread (nodeTaintsPolicy: Honor), in two waves (the second created once the
extender decides on the changes): every placement is checked against the nodes as they
were when the scheduler decided it, and no pod decided on a view with the changes (the
state version behind its verdict, not a clock) lands where it no longer may. Each zone
loses one node (a: tainted, b: cordoned, c: its zone label removed), so the burst can go
on evenly over the six nodes left."""

from __future__ import annotations

from collections import Counter

from testing import truth
from testing.harness import HOST, ZONE, node, pod, spread

NOISY = {"key": "noisy", "value": "true", "effect": "NoSchedule"}
GONE = ("n-a0", "n-b1", "n-c2")


def test_taint_cordon_and_relabel_mid_burst(start_cluster):
    cluster = start_cluster([node(f"n-{z}{i}", z, cpu="64") for z in "abc" for i in range(3)])
    labels = {"app": "churn"}
    constraints = [spread(ZONE, labels, nodeTaintsPolicy="Honor"), spread(HOST, labels, nodeTaintsPolicy="Honor")]
    pods = [pod(f"churn-{i}", labels, spread=constraints) for i in range(300)]
    cluster.create(*pods[:150])
    keys = [("default", p["metadata"]["name"]) for p in pods]
    assert cluster.wait_until_bound(keys, 90, timeout=60)
    written = [cluster.set_taints("n-a0", [NOISY]), cluster.cordon("n-b1"),
               cluster.relabel("n-c2", {ZONE: None})]  # no zone: no longer a place for this pod
    changed = max(int(n["metadata"]["resourceVersion"]) for n in written)
    # The first wave's rest is decided across the changes; the second wave arrives once
    # the extender decides on them, so at least 150 decisions are checked against the
    # changed nodes however fast the scheduler gets through the first wave.
    cluster.wait_state_version("Node", changed, "n-a1")
    cluster.create(*pods[150:])
    outcome = cluster.wait_settled(pods, timeout=120)
    assert len(outcome.bound) == 300, f"{len(outcome.unschedulable)} unschedulable"
    report = cluster.replay()
    assert report.violations == [], cluster.explain(report)
    # decided on a view with all three changes (the state version behind the last filter)
    late = {k for k, calls in cluster.tap.decisions().items()
            if calls and (calls[-1].versions or {}).get("Node", 0) >= changed}
    assert len(late) >= 150, "fewer decisions saw the changes than pods created after them"
    assert not [k for k in late if outcome.bound[k] in GONE]
    left = lambda n: n["metadata"]["name"] not in GONE  # noqa: E731
    assert truth.final_skew(cluster.api, keys, ZONE, left) <= 1
    assert truth.final_skew(cluster.api, keys, HOST, left) <= 1
    assert Counter(outcome.bound.values())["n-a1"] > 40  # the burst went on after the change
