"""VolumeNodeAffinity: PersistentVolume node affinity with the extended operators, for
bound claims and for WaitForFirstConsumer claims the in-tree binder binds later.

Every scenario runs through the batch path and the per-node reference path (they must
agree), and through `explain` where the detail matters."""

from __future__ import annotations

import orjson
import pytest
from conftest import make_extender

from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.explain import explain_pod
from extender.features import FeatureGates
from extender.plugins.volumenodeaffinity import (
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_PV_NOT_EXIST,
    NAME,
)
from extender.state import ClusterSnapshot
from tests.plugins.volume_objects import (
    ANNOTATION,
    KERNEL,
    annotation,
    kernel_node,
    node,
    pod,
    pv,
    pvc,
    requirement,
    selector,
)

GEN = "example.com/disk-generation"
ZONE = "topology.kubernetes.io/zone"
NODES = [
    {**kernel_node("k54", "5.4.0"), "metadata": {"name": "k54", "labels": {KERNEL: "5.4.0", GEN: "3", ZONE: "a"}}},
    {**kernel_node("k510", "5.10.0"), "metadata": {"name": "k510", "labels": {KERNEL: "5.10.0", GEN: "5", ZONE: "a"}}},
    {**kernel_node("k515", "v5.15.2"), "metadata": {"name": "k515", "labels": {KERNEL: "v5.15.2", GEN: "7", ZONE: "b"}}},
    {**kernel_node("k61", "6.1.0"), "metadata": {"name": "k61", "labels": {KERNEL: "6.1.0", GEN: "9", ZONE: "b"}}},
    node("bare"),
]
ALL = {"k54", "k510", "k515", "k61", "bare"}
NEW_KERNEL = [requirement(KERNEL, "SemverGt", "5.10.0")]


def run(objects: list[dict], the_pod: dict, fast: bool = True, gates: FeatureGates | None = None) -> dict:
    # full answers: the reasons of the failing nodes are what is checked
    config = Config(feature_gates=gates or FeatureGates(), slim_answers=False)
    ext = make_extender(NODES + objects, config, fast=fast)
    return orjson.loads(ext.filter(ExtenderArgs(the_pod, None, sorted(ALL))))


def verdict(objects: list[dict], the_pod: dict, gates: FeatureGates | None = None) -> tuple[set, dict]:
    """(feasible names, unresolvable messages), the same on both paths."""
    fast, ref = run(objects, the_pod, True, gates), run(objects, the_pod, False, gates)
    for result in (fast, ref):
        assert not result["Error"], result["Error"]
        assert not result["FailedNodes"]
    assert set(fast["NodeNames"]) == set(ref["NodeNames"])
    assert fast["FailedAndUnresolvableNodes"] == ref["FailedAndUnresolvableNodes"]
    return set(fast["NodeNames"]), fast["FailedAndUnresolvableNodes"]


def bound(name: str, claim: str = "data", **kw) -> list[dict]:
    """A PV bound to a claim of the same namespace."""
    return [pv(name, claim=("default", claim), **kw), pvc(claim, volume=name)]


def conflict(nodes: set[str]) -> dict:
    return dict.fromkeys(nodes, ERR_REASON_NODE_CONFLICT)


# --- bound claims ----------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["annotation", "spec"])
def test_semver_gt_on_a_bound_volume(where):
    objs = bound("kernel-pv", **({"ann": annotation(NEW_KERNEL)} if where == "annotation"
                                 else {"spec": selector(NEW_KERNEL)}))
    feasible, failed = verdict(objs, pod("app", "data"))
    assert feasible == {"k515", "k61"}  # v5.15.2 parses tolerantly; 5.10.0 is not > 5.10.0
    assert failed == conflict({"k54", "k510", "bare"})  # no label: the requirement is false


@pytest.mark.parametrize("where", ["annotation", "spec"])
@pytest.mark.parametrize(("op", "value", "want"), [("Gt", "5", {"k515", "k61"}), ("Lt", "5", {"k54"}),
                                                   ("SemverLt", "5.10.0", {"k54"}),
                                                   ("SemverEq", "v6.1", {"k61"})])
def test_numeric_and_semver_operators(where, op, value, want):
    key = GEN if op in ("Gt", "Lt") else KERNEL
    req = [requirement(key, op, value)]
    objs = bound("pv", **({"ann": annotation(req)} if where == "annotation" else {"spec": selector(req)}))
    assert verdict(objs, pod("app", "data"))[0] == want


def test_annotation_is_anded_with_the_spec_and_terms_are_ored():
    spec = selector([requirement(ZONE, "In", "b")], [requirement(GEN, "Lt", "4")])  # zone b, or gen < 4
    objs = bound("pv", spec=spec, ann=annotation(NEW_KERNEL))
    assert verdict(objs, pod("app", "data"))[0] == {"k515", "k61"}  # k54 passes the spec, not the annotation


def test_every_bound_volume_must_fit():
    objs = (bound("kernel-pv", "data", ann=annotation(NEW_KERNEL))
            + bound("gen-pv", "logs", spec=selector([requirement(GEN, "Lt", "8")])))
    assert verdict(objs, pod("app", "data", "logs"))[0] == {"k515"}
    assert verdict(objs, pod("app", "logs"))[0] == {"k54", "k510", "k515"}


def test_match_fields_restrict_nothing_on_a_volume():
    """CheckNodeAffinity matches a node built from labels only: `matchFields` are skipped
    (a term of fields alone matches every node)."""
    spec = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["k54"]}]}]}
    assert verdict(bound("pv", spec=spec), pod("app", "data"))[0] == ALL


def test_volume_without_affinity_and_pod_without_claims_pass():
    assert verdict(bound("plain"), pod("app", "data"))[0] == ALL
    assert verdict(bound("kernel-pv", ann=annotation(NEW_KERNEL)), pod("app"))[0] == ALL


def test_missing_claim_or_volume_rejects_every_node():
    _, failed = verdict([], pod("app", "data"))
    assert failed == dict.fromkeys(ALL, 'persistentvolumeclaim "data" not found')
    _, failed = verdict([], pod("app", ephemeral=("scratch",)))
    assert failed == dict.fromkeys(
        ALL, 'waiting for ephemeral volume controller to create the persistentvolumeclaim "app-scratch"')
    _, failed = verdict([pvc("data", volume="gone")], pod("app", "data"))
    assert failed == dict.fromkeys(ALL, ERR_REASON_PV_NOT_EXIST)


def test_generic_ephemeral_volume_claim_is_named_after_pod_and_volume():
    objs = [pv("eph-pv", claim=("default", "app-scratch"), ann=annotation(NEW_KERNEL)),
            pvc("app-scratch", volume="eph-pv")]
    assert verdict(objs, pod("app", ephemeral=("scratch",)))[0] == {"k515", "k61"}


def test_claims_are_looked_up_in_the_pods_namespace():
    objs = [pv("kernel-pv", claim=("team", "data"), ann=annotation(NEW_KERNEL)),
            pvc("data", volume="kernel-pv", namespace="team")]
    assert verdict(objs, pod("app", "data", namespace="team"))[0] == {"k515", "k61"}
    assert verdict(objs, pod("app", "data"))[1] == dict.fromkeys(ALL, 'persistentvolumeclaim "data" not found')


# --- invalid annotations ---------------------------------------------------------------------

PATH = f"metadata.annotations[{ANNOTATION}]"


@pytest.mark.parametrize(("text", "message"), [
    ('{"required":', f"{PATH}: Invalid value: invalid JSON: unexpected end of JSON input"),
    (annotation([requirement(KERNEL, "SemverGt", "5.x")]),
     f'{PATH}.required.nodeSelectorTerms[0].matchExpressions[0].values: Invalid value: []string{{"5.x"}}: '
     'Invalid character(s) found in minor number "x"'),
    ('{"requiredDuringSchedulingIgnoredDuringExecution": {}}',
     f"{PATH}.required: Required value: must specify required node constraints"),
    ('{"required": {"nodeSelectorTerms": []}}',
     f"{PATH}.required.nodeSelectorTerms: Required value: must have at least one node selector term"),
    (annotation([requirement(KERNEL, "SemverGt", "5.1.0", "6.0.0")]),
     f"{PATH}.required.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified "
     "single value when `operator` is 'SemverLt' or 'SemverGt' or 'SemverEq'"),
])
def test_invalid_annotation_rejects_every_node_naming_the_volume_and_field(text, message):
    _, failed = verdict(bound("bad-pv", ann=text), pod("app", "data"))
    assert failed == dict.fromkeys(ALL, f'PersistentVolume "bad-pv" is invalid: {message}')


def test_a_non_integer_gt_value_passes_validation_and_never_matches():
    """As in a pod's spec (API validation checks only the arity of Gt/Lt), the term does
    not parse in the scheduler and never matches: every node conflicts."""
    objs = bound("pv", ann=annotation([requirement(GEN, "Gt", "five")]))
    assert verdict(objs, pod("app", "data"))[1] == conflict(ALL)
    detail = explained(objs, pod("app", "data"))["k61"]["plugins"][NAME]["reasons"][1]
    assert detail.endswith("invalid term never matches: key 'example.com/disk-generation': "
                           "for 'Gt', 'Lt' operators, the value must be an integer")


def test_semver_annotation_with_the_gate_off_is_invalid():
    gates = FeatureGates(semver_operators=False)
    _, failed = verdict(bound("pv", ann=annotation(NEW_KERNEL)), pod("app", "data"), gates)
    assert set(failed) == ALL
    assert 'operator: Invalid value: "SemverGt": not a valid selector operator' in failed["k61"]


# --- unbound claims (WaitForFirstConsumer) ---------------------------------------------------

def pool(*extra: dict, claim: dict | None = None) -> list[dict]:
    """An unbound claim of class `fast` and two available volumes the binder may choose:
    one asking for a new kernel, one asking nothing."""
    return [pv("pv-new", ann=annotation(NEW_KERNEL)), pv("pv-any"), claim or pvc("data"), *extra]


def test_unbound_claim_passes_only_where_every_candidate_fits():
    """The binder picks the smallest candidate its view of spec.nodeAffinity admits on the
    chosen node, after our filter and unseen by it: where pv-new's annotation fails, it
    could be the pick, so the node is rejected (one fitting candidate is not enough)."""
    feasible, failed = verdict(pool(), pod("app", "data"))
    assert feasible == {"k515", "k61"}
    assert failed == conflict({"k54", "k510", "bare"})


def test_candidates_are_per_node_by_the_in_tree_view_of_spec():
    """pv-new is only attachable in zone b (spec, read by VolumeBinding too): in zone a the
    binder can never pick it, so zone-a nodes pass whatever their kernel."""
    objs = [pv("pv-new", ann=annotation(NEW_KERNEL), spec=selector([requirement(ZONE, "In", "b")])),
            pv("pv-any"), pvc("data")]
    assert verdict(objs, pod("app", "data"))[0] == ALL  # bare: no zone label either


def test_a_semver_term_in_spec_is_never_a_candidate_for_the_in_tree_binder():
    """An in-tree binder without KEP-5721 cannot parse SemverGt: that term never admits
    pv-new, so nodes are only constrained where another term admits it."""
    spec = selector(NEW_KERNEL, [requirement(ZONE, "In", "a")])
    objs = [pv("pv-new", ann=annotation([requirement(GEN, "Gt", "4")]), spec=spec), pv("pv-any"), pvc("data")]
    assert verdict(objs, pod("app", "data"))[0] == {"k510", "k515", "k61", "bare"}  # k54: zone a, gen 3


@pytest.mark.parametrize("not_a_candidate", [
    pv("pv-new", ann=annotation(NEW_KERNEL), capacity="1Gi"),  # smaller than the 5Gi request
    pv("pv-new", ann=annotation(NEW_KERNEL), storage_class="slow"),
    pv("pv-new", ann=annotation(NEW_KERNEL), claim=("default", "other")),  # someone else's
    pv("pv-new", ann=annotation(NEW_KERNEL), phase="Released"),
    pv("pv-new", ann=annotation(NEW_KERNEL), modes=("ReadOnlyMany",)),
    {**pv("pv-new", ann=annotation(NEW_KERNEL)), "spec": {**pv("x")["spec"], "volumeMode": "Block"}},
])
def test_volumes_the_binder_cannot_choose_do_not_constrain(not_a_candidate):
    objs = [not_a_candidate, pv("pv-any"), pvc("data")]
    assert verdict(objs, pod("app", "data"))[0] == ALL


def test_claim_selector_narrows_the_candidates():
    objs = [pv("pv-new", ann=annotation(NEW_KERNEL), labels={"tier": "new"}), pv("pv-any", labels={"tier": "any"}),
            pvc("data", selector_labels={"tier": "any"})]
    assert verdict(objs, pod("app", "data"))[0] == ALL
    objs[-1] = pvc("data", selector_labels={"tier": "new"})
    assert verdict(objs, pod("app", "data"))[0] == {"k515", "k61"}


def test_a_volume_prebound_to_the_claim_is_the_only_candidate():
    prebound = pv("pv-any", claim=("default", "data"), phase="Available")
    assert verdict(pool(claim=pvc("data")) + [prebound], pod("app", "data"))[0] == ALL
    prebound_new = pv("pv-new2", claim=("default", "data"), ann=annotation([requirement(GEN, "Gt", "8")]))
    assert verdict(pool() + [prebound_new], pod("app", "data"))[0] == {"k61"}


def test_a_claim_being_provisioned_gets_a_new_volume():
    assert verdict(pool(claim=pvc("data", selected_node="k54")), pod("app", "data"))[0] == ALL


def test_an_invalid_candidate_annotation_fails_closed():
    objs = [pv("pv-new", ann='{"required": 5}'), pv("pv-any"), pvc("data")]
    _, failed = verdict(objs, pod("app", "data"))
    assert set(failed) == ALL
    assert failed["k61"].startswith('PersistentVolume "pv-new" is invalid: ')


def test_bound_and_unbound_claims_together():
    objs = pool() + bound("gen-pv", "logs", ann=annotation([requirement(GEN, "Lt", "8")]))
    assert verdict(objs, pod("app", "data", "logs"))[0] == {"k515"}


# --- explain -----------------------------------------------------------------------------------

def explained(objects: list[dict], the_pod: dict) -> dict:
    ext = make_extender(NODES + objects, Config())
    return explain_pod(ext, the_pod, None)["nodes"]


def test_explain_names_the_volume_and_the_failed_requirement():
    nodes = explained(bound("kernel-pv", ann=annotation(NEW_KERNEL)), pod("app", "data"))
    verdict_ = nodes["k54"]["plugins"][NAME]
    assert verdict_["code"] == "UnschedulableAndUnresolvable"
    assert verdict_["reasons"] == [
        ERR_REASON_NODE_CONFLICT,
        f'claim "data" is bound to PersistentVolume "kernel-pv": metadata.annotations[{ANNOTATION}].required: '
        f'{KERNEL} SemverGt [5.10.0]: the node\'s value is "5.4.0"']
    assert nodes["bare"]["plugins"][NAME]["reasons"][1].endswith("the node has no such label")
    assert nodes["k61"]["plugins"][NAME] == {"code": "Success", "reasons": [], "score": None}


def test_explain_shows_spec_failures_and_candidates():
    nodes = explained(bound("gen-pv", spec=selector([requirement(GEN, "Gt", "6")], [requirement(ZONE, "In", "c")])),
                      pod("app", "data"))
    assert nodes["k54"]["plugins"][NAME]["reasons"][1] == (
        'claim "data" is bound to PersistentVolume "gen-pv": spec.nodeAffinity.required: no term matches: '
        f'{GEN} Gt [6]: the node\'s value is "3"; {ZONE} In [c]: the node\'s value is "a"')
    nodes = explained(pool(), pod("app", "data"))
    assert nodes["k510"]["plugins"][NAME]["reasons"][1].startswith(
        'claim "data" is not bound yet and the in-tree binder may choose PersistentVolume "pv-new" on this node')


# --- work done once ------------------------------------------------------------------------------

def test_claims_are_resolved_once_per_volume_layer(monkeypatch):
    """A claim's candidates are computed once per volume layer: other pods using the claim,
    and snapshots that only changed pods, reuse them; a volume or claim event recomputes."""
    import extender.plugins.volumenodeaffinity as plugin
    from extender.model.volumes import pv_from_dict
    from extender.state.volumes import VolumeLayerWriter

    calls = []
    real = plugin.binder_candidates
    monkeypatch.setattr(plugin, "binder_candidates", lambda layer, claim: calls.append(claim.name) or real(layer, claim))
    ext = make_extender(NODES + pool(), Config())
    for i in range(3):
        assert set(orjson.loads(ext.filter(ExtenderArgs(pod(f"app-{i}", "data"), None, sorted(ALL))))["NodeNames"]) == {"k515", "k61"}
    snapshot = ext.source.snapshot()
    ext.source.set(snapshot.with_pods(snapshot.pod_layer, snapshot.generation + 1))  # e.g. a bind
    orjson.loads(ext.filter(ExtenderArgs(pod("app-3", "data"), None, sorted(ALL))))
    assert calls == ["data"]
    writer = VolumeLayerWriter(snapshot.volume_layer)
    writer.put(pv_from_dict(pv("pv-newer", ann=annotation([requirement(GEN, "Gt", "8")]))))
    snapshot = ext.source.snapshot()
    ext.source.set(ClusterSnapshot.from_layers(snapshot.nodes, snapshot.pod_layer, snapshot.workload_layer,
                                               snapshot.generation + 1, writer.publish()))
    assert orjson.loads(ext.filter(ExtenderArgs(pod("app-4", "data"), None, sorted(ALL))))["NodeNames"] == ["k61"]
    assert calls == ["data", "data"]
