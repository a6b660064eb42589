"""A PersistentVolume's node-affinity annotation: one validator for scheduling, the
admission webhook and `extender validate` (the scheduling side is in
tests/plugins/test_volume_node_affinity.py)."""

from __future__ import annotations

import json

from extender.features import FeatureGates
from extender.server.webhook import review
from extender.validation.workloads import check_object
from tests.plugins.volume_objects import ANNOTATION, KERNEL, annotation, pv, requirement, selector

P = "scheduling-extender.io"
GATES = FeatureGates()
PATH = f"metadata.annotations[{ANNOTATION}]"
GOOD = annotation([requirement(KERNEL, "SemverGt", "5.10.0")])
BAD = annotation([requirement(KERNEL, "SemverGt", "5.10.x")])
BAD_MESSAGE = (f'{PATH}.required.nodeSelectorTerms[0].matchExpressions[0].values: Invalid value: []string{{"5.10.x"}}: '
               'Invalid character(s) found in patch number "x"')


def checked(obj: dict, gates: FeatureGates = GATES):
    result = check_object(obj, P, gates)
    assert result.checked and result.kind == "PersistentVolume"
    return [str(e) for e in result.errors], list(result.warnings)


def test_valid_annotation_and_plain_volumes_pass():
    assert checked(pv("ok", ann=GOOD)) == ([], [])
    assert checked(pv("plain")) == ([], [])
    assert checked(pv("gt", ann=annotation([requirement("example.com/gen", "Gt", "4")]))) == ([], [])


def test_errors_are_field_errors_at_the_annotation_path():
    assert checked(pv("bad", ann=BAD)) == ([BAD_MESSAGE], [])
    errors, _ = checked(pv("bad", ann='{"required": {"nodeSelectorTerms": [{"matchExpressions": '
                                      '[{"key": "k", "operator": "SemverGt", "values": ["1", "2"]}]}]}}'))
    assert errors == [f"{PATH}.required.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be "
                      "specified single value when `operator` is 'SemverLt' or 'SemverGt' or 'SemverEq'"]
    errors, warnings = checked(pv("pod-shaped", ann=json.dumps(
        {"requiredDuringSchedulingIgnoredDuringExecution": selector([requirement(KERNEL, "Exists")])})))
    assert errors == [f"{PATH}.required: Required value: must specify required node constraints"]
    assert warnings == [f'unknown field "{PATH}.requiredDuringSchedulingIgnoredDuringExecution"']
    errors, _ = checked(pv("json", ann="{"))
    assert errors == [f"{PATH}: Invalid value: invalid JSON: unexpected end of JSON input"]


def test_gates_apply_as_for_pods():
    errors, _ = checked(pv("ok", ann=GOOD), FeatureGates(semver_operators=False))
    assert errors == [f'{PATH}.required.nodeSelectorTerms[0].matchExpressions[0].operator: Invalid value: '
                      '"SemverGt": not a valid selector operator']


def test_non_string_annotation_is_an_error():
    obj = pv("odd")
    obj["metadata"]["annotations"] = {ANNOTATION: 5}
    assert checked(obj)[0] == [f'{PATH}: Invalid value: "5": annotation values must be strings']


def test_warnings_match_fields_and_semver_in_spec():
    ann = json.dumps({"required": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}})
    assert checked(pv("fields", ann=ann)) == ([], [
        f"{PATH}.required.nodeSelectorTerms[0].matchFields: ignored: a PersistentVolume's node affinity "
        "is matched against node labels only"])
    errors, warnings = checked(pv("spec", spec=selector([requirement(KERNEL, "SemverGt", "5.10.0")])))
    assert errors == []
    assert warnings == [
        "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator: SemverGt is read by "
        "kube-scheduler's VolumeBinding only with KEP-5721's gate; without it that plugin rejects every node "
        "for this term: put the requirement in the node-affinity annotation instead"]


# --- the admission webhook ---------------------------------------------------------------------

def admission(obj: dict, operation: str = "CREATE", old: dict | None = None) -> bytes:
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "PersistentVolume"},
               "resource": {"group": "", "version": "v1", "resource": "persistentvolumes"},
               "operation": operation, "name": obj["metadata"]["name"], "object": obj, "oldObject": old}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()


def test_webhook_denies_an_invalid_volume_and_admits_a_valid_one():
    denied = review(admission(pv("advanced", ann=BAD)), P, GATES)["response"]
    assert denied == {"uid": "u-1", "allowed": False, "status": {
        "code": 422, "reason": "Invalid", "message": f'PersistentVolume "advanced" is invalid: {BAD_MESSAGE}'}}
    assert review(admission(pv("advanced", ann=GOOD)), P, GATES)["response"] == {"uid": "u-1", "allowed": True}


def test_webhook_checks_an_update_only_when_the_affinity_changed():
    old = pv("advanced", ann=BAD)
    relabelled = pv("advanced", ann=BAD, labels={"tier": "gold"})  # e.g. the PV controller's status/claim churn
    assert review(admission(relabelled, "UPDATE", old), P, GATES)["response"]["allowed"] is True
    assert review(admission(pv("advanced", ann=BAD + " "), "UPDATE", old), P, GATES)["response"]["allowed"] is False
    fixed = review(admission(pv("advanced", ann=GOOD), "UPDATE", old), P, GATES)["response"]
    assert fixed["allowed"] is True


def test_webhook_warns_about_semver_in_spec():
    obj = pv("spec", spec=selector([requirement(KERNEL, "SemverGt", "5.10.0")]))
    answer = review(admission(obj), P, GATES)["response"]
    assert answer["allowed"] is True and "KEP-5721" in answer["warnings"][0]
