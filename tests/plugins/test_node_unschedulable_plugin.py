"""NodeUnschedulable plugin table ported as data from upstream tests.

Source (kubernetes/kubernetes, facts only):
pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable_test.go: TestNodeUnschedulable.
Rows marked "spec" come from semantics.md §7 (synthetic taint
`node.kubernetes.io/unschedulable:NoSchedule` with an empty value, every operator the extender
supports, node taints not looked at).

Every row runs `filter` (per node) and `filter_nodes` (batch) and asserts identical results.
"""

from __future__ import annotations

import pytest
from plugin_harness import verdict

from extender.features import FeatureGates
from extender.framework import Code, CycleState, Status
from extender.framework.handle import Handle
from extender.framework.verdicts import failing
from extender.model.parse import node_from_dict
from extender.plugins.nodeunschedulable import NodeUnschedulable
from extender.state import NodeSet
from extender.validation.pod import pod_from_dict

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
KEY = "node.kubernetes.io/unschedulable"


def plugin(gates: FeatureGates | None = None) -> NodeUnschedulable:
    return NodeUnschedulable(Handle(gates or FeatureGates(), cel=None))


def node(name, unschedulable, taints=()):
    spec = {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return node_from_dict({"metadata": {"name": name}, "spec": spec})


def pod(*tolerations):
    return pod_from_dict({"metadata": {"name": "p"}, "spec": {"tolerations": list(tolerations)}})



REJECT = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_UNSCHEDULABLE)
PASS = (Code.SUCCESS, "")

# (name, tolerations, node.spec.unschedulable, node taints, want)
NODE_UNSCHEDULABLE = [
    ("does not schedule pod to unschedulable node", [], True, (), REJECT),
    ("schedules pod to normal node", [], False, (), PASS),
    ("schedules pod with toleration to unschedulable node",
     [{"key": KEY, "effect": "NoSchedule"}], True, (), PASS),
    # spec §7
    ("spec: unschedulable field absent", [], None, (), PASS),
    ("spec: Exists on the key", [{"key": KEY, "operator": "Exists"}], True, (), PASS),
    ("spec: Equal with empty value", [{"key": KEY, "operator": "Equal", "value": ""}], True, (),
     PASS),
    ("spec: Equal with a non-empty value", [{"key": KEY, "operator": "Equal", "value": "x"}], True,
     (), REJECT),
    ("spec: empty-key Exists tolerates everything", [{"operator": "Exists"}], True, (), PASS),
    ("spec: effect NoExecute does not cover NoSchedule",
     [{"key": KEY, "operator": "Exists", "effect": "NoExecute"}], True, (), REJECT),
    ("spec: effect PreferNoSchedule does not cover NoSchedule",
     [{"key": KEY, "operator": "Exists", "effect": "PreferNoSchedule"}], True, (), REJECT),
    ("spec: Gt never matches the empty value",
     [{"key": KEY, "operator": "Gt", "value": "-1"}], True, (), REJECT),
    ("spec: Lt never matches the empty value",
     [{"key": KEY, "operator": "Lt", "value": "1"}], True, (), REJECT),
    ("spec: SemverLt never matches the empty value",
     [{"key": KEY, "operator": "SemverLt", "value": "1.0.0"}], True, (), REJECT),
    ("spec: other key", [{"key": "other", "operator": "Exists"}], True, (), REJECT),
    ("spec: node taints are not looked at",
     [], False, ((KEY, "", "NoSchedule"), ("x", "y", "NoExecute")), PASS),
    ("spec: toleration of the real taint still required for cordon",
     [{"key": "x", "operator": "Exists"}], True, ((KEY, "", "NoSchedule"),), REJECT),
]


@pytest.mark.parametrize(
    "tolerations, unschedulable, taints, want",
    [pytest.param(*row[1:], id=row[0]) for row in NODE_UNSCHEDULABLE],
)
def test_node_unschedulable(tolerations, unschedulable, taints, want):
    p = plugin()
    the_pod = pod(*tolerations)
    n = node("nodeA", unschedulable, taints)
    ref = p.filter(CycleState(), the_pod, n)
    fails = failing(p.filter_nodes(CycleState(), the_pod, NodeSet([n])), NodeSet([n]))
    assert set(fails) <= {"nodeA"}
    assert verdict(ref) == want
    assert verdict(fails.get("nodeA", Status())) == want


def test_batch_over_mixed_nodes():
    p = plugin()
    nodes = [node("a", True), node("b", False), node("c", None), node("d", True)]
    node_set = NodeSet(nodes)
    fails = failing(p.filter_nodes(CycleState(), pod(), node_set), node_set)
    assert set(fails) == {"a", "d"}
    for n in nodes:
        assert verdict(fails.get(n.name, Status())) == verdict(p.filter(CycleState(), pod(), n))
    tolerant = pod({"key": KEY, "operator": "Exists"})
    assert failing(p.filter_nodes(CycleState(), tolerant, node_set), node_set) == {}


def test_batch_on_a_subset_of_a_larger_universe():
    """NodeNames mode: the candidate set is a subset of the snapshot's nodes; only cordoned
    candidates may be reported."""
    from extender.state import ClusterSnapshot

    snapshot = ClusterSnapshot([node("a", True), node("b", True), node("c", False)])
    by_name = snapshot.nodes.by_name
    candidates = NodeSet([by_name["b"], by_name["c"]], snapshot.nodes)
    fails = failing(plugin().filter_nodes(CycleState(), pod(), candidates), candidates)
    assert set(fails) == {"b"}


def test_masks_equal_the_batch_map_over_a_subset_in_request_order():
    """The batch path's masks (one cordoned mask per node layer, gathered per request)
    say what `filter_nodes` says, for candidates in any order over a larger universe,
    and follow a cordon (a new node layer)."""
    from extender.state import ClusterSnapshot

    snapshot = ClusterSnapshot([node("a", True), node("b", True), node("c", False), node("d", None)])
    candidates = NodeSet(None, snapshot.nodes, ["d", "b", "c"])
    masks = plugin().filter_nodes(CycleState(), pod(), candidates)
    assert [(verdict(s), m.tolist()) for s, m in masks] == [(REJECT, [False, True, False])]
    assert set(failing(plugin().filter_nodes(CycleState(), pod(), candidates), candidates)) == {"b"}
    assert plugin().filter_nodes(CycleState(), pod({"key": KEY, "operator": "Exists"}), candidates) == []
    assert plugin().filter_nodes(CycleState(), pod(), NodeSet(None, snapshot.nodes, ["c", "d"])) == []
    cordoned = snapshot.nodes.evolve({"c": node("c", True)})
    masks = plugin().filter_nodes(CycleState(), pod(), NodeSet(None, cordoned, ["d", "b", "c"]))
    assert [m.tolist() for _, m in masks] == [[False, True, True]]
