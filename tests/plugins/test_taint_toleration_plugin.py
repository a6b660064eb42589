"""TaintToleration plugin tables ported as data from upstream tests.

Source (kubernetes/kubernetes, facts only):
pkg/scheduler/framework/plugins/tainttoleration/taint_toleration_test.go:
TestTaintTolerationFilter, TestTaintTolerationFilterWithFeatureGate, TestTaintTolerationScore.

Every row runs the per-node reference methods (`filter`, `score`) and the batch fast paths
(`filter_nodes`, `score_nodes`) and asserts identical results. The filter message is the v1.35+
generic one (semantics §0.3, §5). The upstream row "Gt toleration vs non-numeric taint" of an
intermediate revision carried a parse error in the status; on master the matcher returns a plain
bool, so the status is the generic rejection (semantics "Versions and conventions").
"""

from __future__ import annotations

import pytest
from plugin_harness import snapshot_backed, verdict

from extender.features import FeatureGates
from extender.framework import Code, CycleState, NodeScore, Status
from extender.framework.handle import Handle
from extender.framework.verdicts import failing
from extender.model.parse import node_from_dict
from extender.plugins.tainttoleration import TaintToleration
from extender.state import NodeSet
from extender.validation.pod import pod_from_dict

UNTOLERATED = "node(s) had untolerated taint(s)"
SLA = "node.kubernetes.io/sla"
PRIO = "node.example.com/priority-level"


def plugin(gate: bool) -> TaintToleration:
    return TaintToleration(Handle(FeatureGates(comparison_operators=gate), cel=None))


def node(name, *taints):
    return node_from_dict(
        {"metadata": {"name": name},
         "spec": {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]}}
    )


def pod(*tolerations, annotations=None):
    tols = []
    for t in tolerations:
        key, op, value, effect = (list(t) + ["", "", "", ""])[:4]
        tols.append({"key": key, "operator": op, "value": value, "effect": effect})
    meta = {"name": "pod1", "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return pod_from_dict({"metadata": meta, "spec": {"tolerations": tols}})




def filter_both(p: TaintToleration, the_pod, n) -> tuple[Code, str]:
    ref = p.filter(CycleState(), the_pod, n)
    fails = failing(p.filter_nodes(CycleState(), the_pod, NodeSet([n])), NodeSet([n]))
    fast = fails.get(n.name, Status())
    assert set(fails) <= {n.name}
    assert verdict(fast) == verdict(ref), "filter_nodes disagrees with filter"
    state, nodes = snapshot_backed([n])
    memo = failing(p.filter_nodes(state, the_pod, nodes), nodes).get(n.name, Status())
    assert verdict(memo) == verdict(ref), "snapshot-backed filter_nodes disagrees with filter"
    return verdict(ref)


# ---------------------------------------------------------------------------------------------
# TestTaintTolerationFilter + TestTaintTolerationFilterWithFeatureGate:
# (name, tolerations, taints, gate, rejected)
# ---------------------------------------------------------------------------------------------

FILTER = [
    ("no tolerations, node with NoSchedule taint", [], [("dedicated", "user1", "NoSchedule")],
     False, True),
    ("dedicated node for user1, NoSchedule", [("dedicated", "", "user1", "NoSchedule")],
     [("dedicated", "user1", "NoSchedule")], False, False),
    ("dedicated node for user1, toleration for user2",
     [("dedicated", "Equal", "user2", "NoSchedule")], [("dedicated", "user1", "NoSchedule")],
     False, True),
    ("Exists toleration tolerates the taint", [("foo", "Exists", "", "NoSchedule")],
     [("foo", "bar", "NoSchedule")], False, False),
    ("multiple tolerations, multiple taints, all tolerated",
     [("dedicated", "Equal", "user2", "NoSchedule"), ("foo", "Exists", "", "NoSchedule")],
     [("dedicated", "user2", "NoSchedule"), ("foo", "bar", "NoSchedule")], False, False),
    ("key and value match, non-empty effect differs",
     [("foo", "Equal", "bar", "PreferNoSchedule")], [("foo", "bar", "NoSchedule")], False, True),
    ("key and value match, empty toleration effect", [("foo", "Equal", "bar")],
     [("foo", "bar", "NoSchedule")], False, False),
    ("no match but taint is PreferNoSchedule", [("dedicated", "Equal", "user2", "NoSchedule")],
     [("dedicated", "user1", "PreferNoSchedule")], False, False),
    ("no toleration, taint is PreferNoSchedule", [], [("dedicated", "user1", "PreferNoSchedule")],
     False, False),
    ("Gt toleration, taint below threshold", [(PRIO, "Gt", "950", "NoSchedule")],
     [(PRIO, "800", "NoSchedule")], True, True),
    ("Gt toleration, taint above threshold", [(SLA, "Gt", "750", "NoSchedule")],
     [(SLA, "950", "NoSchedule")], True, False),
    ("Lt toleration, taint above threshold", [(PRIO, "Lt", "800", "NoSchedule")],
     [(PRIO, "950", "NoSchedule")], True, True),
    ("Lt toleration, taint below threshold", [(SLA, "Lt", "950", "NoSchedule")],
     [(SLA, "800", "NoSchedule")], True, False),
    ("Gt toleration, non-numeric taint value", [(SLA, "Gt", "950", "NoSchedule")],
     [(SLA, "high", "NoSchedule")], True, True),
    # TestTaintTolerationFilterWithFeatureGate
    ("gate on: Gt, taint higher", [(SLA, "Gt", "750", "NoSchedule")],
     [(SLA, "950", "NoSchedule")], True, False),
    ("gate off: Gt cannot tolerate", [(SLA, "Gt", "750", "NoSchedule")],
     [(SLA, "950", "NoSchedule")], False, True),
    ("gate on: Lt, taint lower", [(SLA, "Lt", "950", "NoSchedule")],
     [(SLA, "800", "NoSchedule")], True, False),
    ("gate off: Lt cannot tolerate", [(SLA, "Lt", "950", "NoSchedule")],
     [(SLA, "800", "NoSchedule")], False, True),
    ("gate off: mixed tolerations, only Equal honoured and sufficient",
     [("dedicated", "Equal", "user1", "NoSchedule"), (SLA, "Gt", "750", "NoSchedule")],
     [("dedicated", "user1", "NoSchedule")], False, False),
    ("gate off: mixed tolerations, Gt needed",
     [("dedicated", "Equal", "user1", "NoSchedule"), (SLA, "Gt", "750", "NoSchedule")],
     [("dedicated", "user1", "NoSchedule"), (SLA, "950", "NoSchedule")], False, True),
    # spec §5 extras
    ("spec: NoExecute taint filters", [], [("k", "v", "NoExecute")], True, True),
    ("spec: NoSchedule toleration does not cover NoExecute", [("k", "Exists", "", "NoSchedule")],
     [("k", "v", "NoExecute")], True, True),
    ("spec: empty-key Exists tolerates everything", [("", "Exists")],
     [("a", "1", "NoSchedule"), ("b", "2", "NoExecute")], True, False),
    ("spec: SemverGt toleration, taint newer", [("os", "SemverGt", "v5.10", "NoSchedule")],
     [("os", "6.1.0", "NoSchedule")], True, False),
    ("spec: SemverGt toleration, taint older", [("os", "SemverGt", "v5.10", "NoSchedule")],
     [("os", "5.4.0", "NoSchedule")], True, True),
    ("spec: no taints at all", [], [], True, False),
]


@pytest.mark.parametrize(
    "tolerations, taints, gate, rejected",
    [pytest.param(t, n, g, r, id=d) for d, t, n, g, r in FILTER],
)
def test_taint_toleration_filter(tolerations, taints, gate, rejected):
    got = filter_both(plugin(gate), pod(*tolerations), node("nodeA", *taints))
    if rejected:
        assert got == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, UNTOLERATED)
    else:
        assert got == (Code.SUCCESS, "")


def test_filter_batch_over_many_nodes_matches_reference():
    """All FILTER rows with the gate on, as one node set: batch == per node, node by node."""
    p = plugin(True)
    the_pod = pod((SLA, "Gt", "750", "NoSchedule"), ("dedicated", "Equal", "user1"))
    nodes = [node(f"n{i}", *taints) for i, (_, _, taints, _, _) in enumerate(FILTER)]
    nodes.append(node("dup", (SLA, "950", "NoSchedule")))
    nodes.append(node("dup2", (SLA, "950", "NoSchedule")))
    fails = failing(p.filter_nodes(CycleState(), the_pod, NodeSet(nodes)), NodeSet(nodes))
    state, snapshot_nodes = snapshot_backed(nodes)
    memo_fails = failing(p.filter_nodes(state, the_pod, snapshot_nodes), snapshot_nodes)
    for n in nodes:
        ref = p.filter(CycleState(), the_pod, n)
        assert verdict(fails.get(n.name, Status())) == verdict(ref), n.name
        assert verdict(memo_fails.get(n.name, Status())) == verdict(ref), n.name
    assert "dup" not in fails and "dup2" not in fails


def test_malformed_toleration_annotation_rejects_every_node():
    """spec §0.6: a malformed annotation makes every node UnschedulableAndUnresolvable, with a
    reason naming the annotation."""
    the_pod = pod(annotations={"scheduling-extender.io/tolerations": "{not json"})
    p = plugin(True)
    nodes = [node("a"), node("b", ("k", "v", "NoSchedule"))]
    fails = failing(p.filter_nodes(CycleState(), the_pod, NodeSet(nodes)), NodeSet(nodes))
    for n in nodes:
        ref = p.filter(CycleState(), the_pod, n)
        assert ref.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert "scheduling-extender.io/tolerations" in ref.message()
        assert verdict(fails[n.name]) == verdict(ref)


def test_annotation_tolerations_are_unioned_with_spec():
    """spec §0.6: annotation tolerations (incl. operators) are added to spec.tolerations."""
    ann = '[{"key": "sla", "operator": "Gt", "value": "900", "effect": "NoSchedule"}]'
    the_pod = pod(("dedicated", "Equal", "user1"),
                  annotations={"scheduling-extender.io/tolerations": ann})
    n = node("a", ("dedicated", "user1", "NoSchedule"), ("sla", "950", "NoSchedule"))
    assert filter_both(plugin(True), the_pod, n) == (Code.SUCCESS, "")
    n2 = node("b", ("dedicated", "user1", "NoSchedule"), ("sla", "850", "NoSchedule"))
    assert filter_both(plugin(True), the_pod, n2) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                      UNTOLERATED)


# ---------------------------------------------------------------------------------------------
# TestTaintTolerationScore: (name, tolerations, nodes [(name, taints)], gate, expected)
# ---------------------------------------------------------------------------------------------

PNS = "PreferNoSchedule"

SCORE = [
    ("tolerated taints score higher than intolerable ones",
     [("foo", "Equal", "bar", PNS)],
     [("nodeA", [("foo", "bar", PNS)]), ("nodeB", [("foo", "blah", PNS)])],
     False, [100, 0]),
    ("all taints tolerated: same score regardless of count",
     [("cpu-type", "Equal", "arm64", PNS), ("disk-type", "Equal", "ssd", PNS)],
     [("nodeA", []), ("nodeB", [("cpu-type", "arm64", PNS)]),
      ("nodeC", [("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)])],
     False, [100, 100, 100]),
    ("the more intolerable taints, the lower the score",
     [("foo", "Equal", "bar", PNS)],
     [("nodeA", []), ("nodeB", [("cpu-type", "arm64", PNS)]),
      ("nodeC", [("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)])],
     False, [100, 50, 0]),
    ("only PreferNoSchedule taints and tolerations count",
     [("cpu-type", "Equal", "arm64", "NoSchedule"), ("disk-type", "Equal", "ssd", "NoSchedule")],
     [("nodeA", []), ("nodeB", [("cpu-type", "arm64", "NoSchedule")]),
      ("nodeC", [("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)])],
     False, [100, 100, 0]),
    ("no taints and tolerations: lands on node without taints",
     [], [("nodeA", []), ("nodeB", [("cpu-type", "arm64", PNS)])], False, [100, 0]),
    ("Gt toleration prefers matching SLA taint",
     [(SLA, "Gt", "950", PNS)],
     [("nodeA", [(SLA, "800", PNS)]), ("nodeB", [(SLA, "999", PNS)])], True, [0, 100]),
    ("Lt toleration prefers matching SLA taint",
     [(SLA, "Lt", "800", PNS)],
     [("nodeA", [(SLA, "950", PNS)]), ("nodeB", [(SLA, "700", PNS)])], True, [0, 100]),
    ("Score ignores parse errors from numeric PreferNoSchedule taint value",
     [(SLA, "Gt", "950", PNS)],
     [("nodeA", []), ("nodeB", [(SLA, "high", PNS)])], True, [100, 0]),
    # spec §5 extras
    ("spec: empty-effect toleration counts for scoring", [("foo", "Exists")],
     [("nodeA", [("foo", "x", PNS)]), ("nodeB", [("bar", "x", PNS)])], True, [100, 0]),
    ("spec: gate off, Gt toleration ignored (both intolerable)", [(SLA, "Gt", "950", PNS)],
     [("nodeA", [(SLA, "800", PNS)]), ("nodeB", [(SLA, "999", PNS)])], False, [0, 0]),
    ("spec: reverse normalisation [1, 3] -> [67, 0]", [],
     [("nodeA", [("a", "", PNS)]),
      ("nodeB", [("a", "", PNS), ("b", "", PNS), ("c", "", PNS)])], True, [67, 0]),
    ("spec: no PreferNoSchedule taints -> all 100", [],
     [("nodeA", [("a", "", "NoSchedule")]), ("nodeB", [])], True, [100, 100]),
]


def score_both(p: TaintToleration, the_pod, nodes: list) -> tuple[list[int], list[int]]:
    node_set = NodeSet(nodes)
    ref_state = CycleState()
    assert p.pre_score(ref_state, the_pod, node_set).is_success
    raw_ref = []
    for n in nodes:
        value, status = p.score(ref_state, the_pod, n)
        assert status.is_success
        raw_ref.append(value)
    fast_state = CycleState()
    assert p.pre_score(fast_state, the_pod, node_set).is_success
    raw_fast = p.score_nodes(fast_state, the_pod, node_set)
    assert list(raw_fast) == raw_ref, "score_nodes disagrees with score"
    memo_state, memo_nodes = snapshot_backed(nodes)
    assert p.pre_score(memo_state, the_pod, memo_nodes).is_success
    assert list(p.score_nodes(memo_state, the_pod, memo_nodes)) == raw_ref, "snapshot-backed path"
    scores = [NodeScore(n.name, s) for n, s in zip(nodes, raw_ref, strict=True)]
    assert p.normalize_score(ref_state, the_pod, scores).is_success
    normalized = [s.score for s in scores]
    assert list(p.normalize_values(fast_state, the_pod, node_set, raw_fast)) == normalized
    return raw_ref, normalized


@pytest.mark.parametrize(
    "tolerations, nodes, gate, expected",
    [pytest.param(t, n, g, e, id=d) for d, t, n, g, e in SCORE],
)
def test_taint_toleration_score(tolerations, nodes, gate, expected):
    built = [node(name, *taints) for name, taints in nodes]
    _, normalized = score_both(plugin(gate), pod(*tolerations), built)
    assert normalized == expected


def test_score_without_prescore_is_an_error():
    """spec §5: Score reads the PreScore state and returns an Error status when it is missing."""
    value, status = plugin(True).score(CycleState(), pod(), node("a", ("k", "", PNS)))
    assert status.code is Code.ERROR


def test_prescore_never_skips():
    """spec §5: PreScore always succeeds (never Skip), even without tolerations."""
    assert plugin(True).pre_score(CycleState(), pod(), NodeSet([node("a")])).code is Code.SUCCESS
