"""KEP-3094 in the extender's world: under `nodeTaintsPolicy: Honor` a tainted node
counts as an eligible domain exactly when the pod's *effective* tolerations tolerate
its NoSchedule taint, through Gt, SemverGt, a CEL expression or the annotation channel;
`nodeAffinityPolicy: Honor` uses the effective (annotation + Semver) required affinity.

Cluster: zone-a (od-a1, od-a2) and zone-b (od-b1) each hold one `app=web` pod; zone-c
has only the spot node, tainted. With zone-c eligible the minimum is 0 and only the spot
node passes; with zone-c excluded the minimum is 1 and zone-a/zone-b pass.
"""

from __future__ import annotations

import json

import orjson
import pytest
from pts_harness import node_obj, pod_obj, world

from extender.api.wire import ExtenderArgs
from extender.cel import CelCache
from extender.config import Config
from extender.engine import Extender
from extender.framework import Code
from extender.plugins.podtopologyspread import filtering
from extender.state import ClusterSnapshot, StaticSource

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
SLA = {"key": "spot.example.com/sla", "value": "800", "effect": "NoSchedule"}
KERNEL = {"key": "node.example.com/kernel", "value": "5.15.2", "effect": "NoSchedule"}
ANNOTATION = "scheduling-extender.io/tolerations"


def cluster(spot_taint: dict) -> list[dict]:
    def n(name: str, zone: str, taints=None, **labels):
        return node_obj(name, {HOST: name, ZONE: zone, **labels}, taints)

    return [
        n("od-a1", "zone-a", kernel="5.4.0"),
        n("od-a2", "zone-a", kernel="5.15.2"),
        n("od-b1", "zone-b", kernel="5.15.2"),
        n("spot-c1", "zone-c", [spot_taint], kernel="6.1.0"),
        pod_obj("web-1", {"app": "web"}, "od-a1", "shop"),
        pod_obj("web-2", {"app": "web"}, "od-b1", "shop"),
    ]


def incoming(tolerations=None, annotations=None, taints_policy="Honor", affinity=None) -> dict:
    c = {
        "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    if taints_policy:
        c["nodeTaintsPolicy"] = taints_policy
    spec = {"topologySpreadConstraints": [c], "tolerations": tolerations or []}
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    meta = {"name": "web-new", "namespace": "shop", "labels": {"app": "web"}, "annotations": annotations or {}}
    return {"metadata": meta, "spec": spec}


def counted_zones(objs, pod_raw) -> dict[str, int]:
    w = world(objs, pod_raw, cel=CelCache())
    state = w.state()
    _, status = w.plugin.pre_filter(state, w.pod, w.nodeset())
    assert status.is_success
    out = w.framework(True).run_filter(state, w.pod, w.nodeset())
    assert not out.error
    return state.read(filtering.PRE_FILTER_KEY).counts.per_domain[0]


def engine_filter(objs, pod_raw) -> dict:
    # full answers: which nodes fail, and why, is what is checked
    ext = Extender(Config(slim_answers=False), StaticSource(ClusterSnapshot.from_objects(objs)), cel=CelCache())
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
    return orjson.loads(ext.filter(ExtenderArgs(pod_raw, None, names)))


def gt(value: str) -> dict:
    return {"key": SLA["key"], "operator": "Gt", "value": value, "effect": "NoSchedule"}


def semver_gt(value: str) -> dict:
    return {"key": KERNEL["key"], "operator": "SemverGt", "value": value, "effect": "NoSchedule"}


def cel(prefix: str) -> dict:
    return {"expression": f"taint.key.startsWith('{prefix}')"}


# (spot taint, pod kwargs when tolerated, pod kwargs when not tolerated)
VARIANTS = {
    "Gt": (SLA, {"tolerations": [gt("750")]}, {"tolerations": [gt("850")]}),
    "SemverGt": (KERNEL, {"tolerations": [semver_gt("5.10.0")]}, {"tolerations": [semver_gt("6.0.0")]}),
    "CEL": (SLA, {"tolerations": [cel("spot.example.com/")]}, {"tolerations": [cel("other.example.com/")]}),
    "annotation": (
        SLA,
        {"annotations": {ANNOTATION: json.dumps([gt("750")])}},
        {"annotations": {ANNOTATION: json.dumps([gt("900")])}},
    ),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tolerated_tainted_node_is_an_eligible_domain(variant: str) -> None:
    taint, tolerated, _ = VARIANTS[variant]
    objs = cluster(taint)
    assert counted_zones(objs, incoming(**tolerated)) == {"zone-a": 1, "zone-b": 1, "zone-c": 0}
    result = engine_filter(objs, incoming(**tolerated))
    assert result["NodeNames"] == ["spot-c1"]
    assert result["FailedNodes"] == dict.fromkeys(["od-a1", "od-a2", "od-b1"], filtering.ERR_REASON_CONSTRAINTS_NOT_MATCH)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_untolerated_tainted_node_is_not_counted(variant: str) -> None:
    taint, _, untolerated = VARIANTS[variant]
    objs = cluster(taint)
    assert counted_zones(objs, incoming(**untolerated)) == {"zone-a": 1, "zone-b": 1}
    result = engine_filter(objs, incoming(**untolerated))
    assert sorted(result["NodeNames"]) == ["od-a1", "od-a2", "od-b1"]
    # the spot node itself is rejected by TaintToleration, not by spreading
    assert "spot-c1" in result["FailedAndUnresolvableNodes"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_taints_policy_ignore_counts_tainted_domain_regardless(variant: str) -> None:
    taint, _, untolerated = VARIANTS[variant]
    pod = incoming(taints_policy="Ignore", **untolerated)
    assert counted_zones(cluster(taint), pod) == {"zone-a": 1, "zone-b": 1, "zone-c": 0}


def test_default_taints_policy_is_ignore() -> None:
    pod = incoming(taints_policy=None)
    assert counted_zones(cluster(SLA), pod) == {"zone-a": 1, "zone-b": 1, "zone-c": 0}


def test_prefer_no_schedule_taint_never_excludes() -> None:
    soft = {**SLA, "effect": "PreferNoSchedule"}
    assert counted_zones(cluster(soft), incoming()) == {"zone-a": 1, "zone-b": 1, "zone-c": 0}


def test_cel_disabled_by_gate_does_not_tolerate() -> None:
    objs = cluster(SLA)
    pod = incoming(tolerations=[cel("spot.example.com/")])
    from extender.features import FeatureGates

    w = world(objs, pod, FeatureGates(cel=False), cel=CelCache())
    state = w.state()
    w.plugin.pre_filter(state, w.pod, w.nodeset())
    w.framework(True).run_filter(state, w.pod, w.nodeset())
    assert state.read(filtering.PRE_FILTER_KEY).counts.per_domain[0] == {"zone-a": 1, "zone-b": 1}


def test_affinity_policy_honors_annotation_semver_affinity() -> None:
    """Annotation required affinity `kernel SemverGt 5.10.0` excludes od-a1 (5.4.0):
    zone-a still counts through od-a2, but od-a1's pod is no longer counted."""
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kernel", "operator": "SemverGt", "values": ["5.10.0"]}]}]}}
    pod = incoming(
        taints_policy="Ignore",
        annotations={"scheduling-extender.io/node-affinity": json.dumps(affinity)},
    )
    assert counted_zones(cluster(SLA), pod) == {"zone-a": 0, "zone-b": 1, "zone-c": 0}
    pod["spec"]["topologySpreadConstraints"][0]["nodeAffinityPolicy"] = "Ignore"
    assert counted_zones(cluster(SLA), pod) == {"zone-a": 1, "zone-b": 1, "zone-c": 0}


def test_spec_affinity_and_annotation_affinity_are_anded() -> None:
    spec_aff = {"nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["zone-b"]}]}]}
    ann = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kernel", "operator": "SemverGt", "values": ["5.10.0"]}]}]}}
    pod = incoming(
        taints_policy="Ignore", affinity=spec_aff,
        annotations={"scheduling-extender.io/node-affinity": json.dumps(ann)},
    )
    assert counted_zones(cluster(SLA), pod) == {"zone-a": 0, "zone-c": 0}


def test_explain_names_domain_count_minimum_and_skew() -> None:
    objs = cluster(SLA)
    w = world(objs, incoming(tolerations=[gt("750")]), cel=CelCache())
    state = w.state(explain=True)
    out = w.framework(True).run_filter(state, w.pod, w.nodeset())
    status = out.statuses["od-a1"]
    assert status.code is Code.UNSCHEDULABLE
    text = " ".join(status.details)
    for part in ("domain topology.kubernetes.io/zone=zone-a", "count 1", "self 1", "minimum 0",
                 "skew 2", "maxSkew 1"):
        assert part in text
