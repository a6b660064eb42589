"""Nodes tainted, cordoned and relabelled in the middle of a burst with hard zone +
hostname spread (nodeTaintsPolicy: Honor), in two waves (the second created after the
changes): every placement is checked against the nodes
as they were when the scheduler decided it, and once a change is visible no pod lands
where it no longer may. Each zone loses one node (a: tainted, b: cordoned, c: its zone
label removed), so the burst can go on evenly over the six nodes left."""

from __future__ import annotations

import time
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
    cluster.set_taints("n-a0", [NOISY])
    cluster.cordon("n-b1")
    cluster.relabel("n-c2", {ZONE: None})  # no zone: no longer a place for this pod
    changed = time.monotonic()
    # The first wave's rest is decided across the changes; the second wave arrives once
    # they are visible, so at least 150 decisions are checked against the changed nodes
    # however fast the scheduler gets through the first wave.
    time.sleep(1)
    cluster.create(*pods[150:])
    outcome = cluster.wait_settled(pods, timeout=120)
    assert len(outcome.bound) == 300, f"{len(outcome.unschedulable)} unschedulable"
    report = cluster.replay()
    assert report.violations == [], cluster.explain(report)
    late = {k for k, times in cluster.tap.decision_times().items() if times and times[-1] > changed + 0.5}
    assert len(late) > 100, "the burst ended before the changes: little was checked"
    assert not [k for k in late if outcome.bound[k] in GONE]
    left = lambda n: n["metadata"]["name"] not in GONE  # noqa: E731
    assert truth.final_skew(cluster.api, keys, ZONE, left) <= 1
    assert truth.final_skew(cluster.api, keys, HOST, left) <= 1
    assert Counter(outcome.bound.values())["n-a1"] > 40  # the burst went on after the change
