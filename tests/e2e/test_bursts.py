"""Bursts of replicas through the real kube-scheduler: hard zone + hostname spread
(DoNotSchedule, maxSkew 1) with a tainted zone excluded by `nodeTaintsPolicy: Honor`.
Every bind is replayed against the truth (the double's objects): 0 over maxSkew."""

from __future__ import annotations

from testing import truth
from testing.harness import HOST, ZONE, node, pod, spread

GPU = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def zones(per_zone: int, zone_names: str = "abc", tainted: str = "d", cpu: str = "64") -> list[dict]:
    """`per_zone` nodes in each of `zone_names`, and `per_zone` GPU-tainted nodes in `tainted`."""
    nodes = [node(f"n-{z}{i}", z, cpu=cpu) for z in zone_names for i in range(per_zone)]
    return nodes + [node(f"gpu-{tainted}{i}", tainted, cpu=cpu, taints=[GPU]) for i in range(per_zone)]


def burst(app: str, replicas: int, honor: bool = True) -> list[dict]:
    labels = {"app": app}
    policy = {"nodeTaintsPolicy": "Honor"} if honor else {}
    constraints = [spread(ZONE, labels, **policy), spread(HOST, labels, **policy)]
    return [pod(f"{app}-{i}", labels, spread=constraints) for i in range(replicas)]


def test_burst_of_1000_keeps_max_skew_with_a_tainted_zone_honoured(start_cluster):
    cluster = start_cluster(zones(per_zone=5))
    pods = burst("web", 1000)
    cluster.create(*pods)
    outcome = cluster.wait_settled(pods, timeout=240)
    assert len(outcome.bound) == 1000, (len(outcome.unschedulable), outcome.pending[:3])
    report = cluster.replay()
    assert report.binds == 1000
    assert report.violations == [], cluster.explain(report)
    assert not any(n.startswith("gpu-") for n in outcome.bound.values())  # the taint holds
    untainted = lambda n: not n["spec"].get("taints")  # noqa: E731
    assert truth.final_skew(cluster.api, outcome.bound, ZONE, untainted) <= 1
    assert truth.final_skew(cluster.api, outcome.bound, HOST, untainted) <= 1
    print(f"1,000 pods in {outcome.seconds:.1f} s (quiet period included)")


def test_without_honor_the_untolerated_zone_blocks_the_spread(start_cluster):
    """Control: with the default `nodeTaintsPolicy: Ignore` the GPU zone counts as a
    domain holding 0 pods, so after one pod per other zone every node breaks maxSkew;
    the rest are reported unschedulable, and the truth agrees no node admits them."""
    cluster = start_cluster(zones(per_zone=2))
    pods = burst("ignore", 12, honor=False)
    cluster.create(*pods)
    outcome = cluster.wait_settled(pods, timeout=60)
    assert len(outcome.bound) == 3 and len(outcome.unschedulable) == 9
    assert {n[2] for n in outcome.bound.values()} == {"a", "b", "c"}
    assert cluster.replay().violations == []
    assert cluster.pending_but_feasible(outcome.unschedulable) == {}
