"""Every toleration kind through the real kube-scheduler (its TaintToleration plugin is
disabled by the shipped configuration; the extender does the job), checked against
the truth: which node each pod lands on, and that the ones no node admits stay pending."""

from __future__ import annotations

from tests.e2e.harness import node, pod

SLA = "example.com/sla"


def sla_node(name: str, value: str) -> dict:
    return node(name, taints=[{"key": SLA, "value": value, "effect": "NoSchedule"}])


def test_gt_toleration_lands_only_where_the_taint_value_is_greater(start_cluster):
    cluster = start_cluster([sla_node("sla-800", "800"), sla_node("sla-950", "950")])
    gt900 = pod("gt-900", tolerations=[{"key": SLA, "operator": "Gt", "value": "900", "effect": "NoSchedule"}])
    gt990 = pod("gt-990", tolerations=[{"key": SLA, "operator": "Gt", "value": "990", "effect": "NoSchedule"}])
    cluster.create(gt900, gt990)
    outcome = cluster.wait_settled([gt900, gt990])
    assert outcome.bound == {("default", "gt-900"): "sla-950"}
    assert list(outcome.unschedulable) == [("default", "gt-990")]
    assert cluster.replay().violations == []
    assert cluster.pending_but_feasible(outcome.unschedulable) == {}
