"""NoExecute taints count as tolerated only by what the kubelet sees: `spec.tolerations`
with Equal/Exists (Gt/Lt while TaintTolerationComparisonOperators is on).

The kubelet's admission and the taint-eviction controller ignore the annotation channel,
Semver operators and CEL expressions; a pod we let through would be rejected on the node
(or evicted), recreated, and placed there again. NoSchedule / PreferNoSchedule keep every
extension.
"""

from __future__ import annotations

import orjson
import pytest
from conftest import make_extender

from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.explain import explain_pod
from extender.features import FeatureGates
from testing.scores import host_scores

ANNOTATION = "scheduling-extender.io/tolerations"
UNTOLERATED = "node(s) had untolerated taint(s)"
SLA = "node.kubernetes.io/sla"


def node(name: str, effect: str, key: str = SLA, value: str = "950", zone: str = "a") -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
        "spec": {"taints": [{"key": key, "value": value, "effect": effect}]}}


def plain(name: str, zone: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}}}


def pod(spec_tolerations=(), annotation=None, spread=None) -> dict:
    meta = {"name": "p", "namespace": "default", "labels": {"app": "web"}}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: orjson.dumps(annotation).decode()}
    spec = {"containers": [{"name": "c", "image": "x"}], "tolerations": list(spec_tolerations)}
    if spread:
        spec["topologySpreadConstraints"] = spread
    return {"metadata": meta, "spec": spec}


FULL = Config(slim_answers=False)  # every failing node with its reason, also when a node fits


def verdicts(ext, raw_pod, names):
    result = orjson.loads(ext.filter(ExtenderArgs(raw_pod, None, names)))
    assert result["Error"] == ""
    return result


GT = {"key": SLA, "operator": "Gt", "value": "750"}
SEMVER = {"key": SLA, "operator": "SemverGt", "value": "1.0.0"}
CEL = {"expression": f"taint.key == '{SLA}'"}
EXISTS = {"key": SLA, "operator": "Exists"}

# (id, spec tolerations, annotation tolerations, tolerated on NoSchedule, on NoExecute)
CASES = [
    ("spec Exists", [EXISTS], None, True, True),
    ("spec Equal", [{"key": SLA, "operator": "Equal", "value": "950"}], None, True, True),
    ("spec Gt (gate on)", [GT], None, True, True),
    ("annotation Exists", [], [EXISTS], True, False),
    ("annotation Gt", [], [GT], True, False),
    ("spec SemverGt", [{**SEMVER, "value": "900.0.0"}], None, True, False),
    ("annotation CEL", [], [CEL], True, False),
    ("annotation CEL plus spec Exists", [EXISTS], [CEL], True, True),
]


@pytest.mark.parametrize("spec, ann, on_no_schedule, on_no_execute",
                         [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_no_execute_needs_a_toleration_the_kubelet_sees(spec, ann, on_no_schedule, on_no_execute):
    ext = make_extender([node("ns", "NoSchedule"), node("ne", "NoExecute"), node("pns", "PreferNoSchedule")], FULL)
    result = verdicts(ext, pod(spec, ann), ["ns", "ne", "pns"])
    feasible = set(result["NodeNames"])
    assert ("ns" in feasible) is on_no_schedule
    assert ("ne" in feasible) is on_no_execute
    assert "pns" in feasible  # PreferNoSchedule never filters
    if not on_no_execute:
        assert result["FailedAndUnresolvableNodes"]["ne"] == UNTOLERATED


def test_gt_with_the_comparison_gate_off_does_not_count_for_no_execute():
    config = Config(feature_gates=FeatureGates(comparison_operators=False))
    ext = make_extender([node("ne", "NoExecute")], config)
    assert verdicts(ext, pod([GT]), ["ne"])["NodeNames"] == []


def test_prefer_no_schedule_scoring_still_counts_annotation_tolerations():
    """Annotation tolerations still lower PreferNoSchedule penalties (score, not filter)."""
    ext = make_extender([node("pns", "PreferNoSchedule"), node("other", "PreferNoSchedule", key="other")])
    answer = orjson.loads(ext.prioritize(ExtenderArgs(pod([], [EXISTS]), None, ["pns", "other"])))
    by_host = host_scores(["pns", "other"], answer)  # slim: "other", the lowest, is left out
    assert by_host["pns"] > by_host["other"]


def test_explain_says_why_an_annotation_toleration_does_not_count():
    ext = make_extender([node("ne", "NoExecute")])
    report = explain_pod(ext, pod([], [EXISTS, CEL]), ["ne"])
    reasons = report["nodes"]["ne"]["plugins"]["TaintToleration"]["reasons"]
    assert reasons[0] == UNTOLERATED
    text = "\n".join(reasons)
    assert "the kubelet checks NoExecute taints against spec.tolerations only" in text
    assert f"it comes from the {ANNOTATION} annotation" in text
    assert report["filter"]["NodeNames"] == []


def test_explain_names_semver_as_not_an_api_operator():
    ext = make_extender([node("ne", "NoExecute")])
    report = explain_pod(ext, pod([{**SEMVER, "value": "1.0.0"}]), ["ne"])
    text = "\n".join(report["nodes"]["ne"]["plugins"]["TaintToleration"]["reasons"])
    assert "operator SemverGt is not a Kubernetes API operator" in text


def test_spread_honor_excludes_no_execute_nodes_tolerated_only_by_annotation():
    """nodeTaintsPolicy: Honor uses the same rule: a NoExecute node tolerated only through
    the annotation is not a domain, so the zone with only that node does not count."""
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}, "nodeTaintsPolicy": "Honor"}]
    existing = {"kind": "Pod", "metadata": {"name": "e1", "namespace": "default", "labels": {"app": "web"}},
                "spec": {"nodeName": "a1", "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running"}}
    objects = [plain("a1", "a"), node("b1", "NoExecute", zone="b"), existing]
    ext = make_extender(objects, FULL)
    # Annotation-only: zone b is not eligible, so zone a alone is the global minimum.
    annotated = verdicts(ext, pod([], [EXISTS], spread), ["a1", "b1"])
    assert annotated["NodeNames"] == ["a1"]
    # Through spec.tolerations zone b (0 pods) counts: a1 would make the skew 2.
    tolerated = verdicts(ext, pod([EXISTS], None, spread), ["a1", "b1"])
    assert tolerated["NodeNames"] == ["b1"]
    assert "a1" in tolerated["FailedNodes"]
