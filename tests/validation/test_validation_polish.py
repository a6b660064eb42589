"""Validation polish of issue #23: lone surrogates decoded as the API server does, gate
ratcheting on UPDATE, no Python reprs, `GET /validate` 405, KEP-5721's semver error."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import sys

import pytest
from test_webhook import P, admission, pod, serve

from extender.features import FeatureGates
from extender.server.webhook import review
from extender.validation.workloads import check_object

SURROGATE_POD = (
    '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p\\ud800", "annotations": '
    '{"scheduling-extender.io/tolerations": "[{\\"key\\": \\"k\\", \\"operator\\": \\"Gt\\", '
    '\\"value\\": \\"0\\ud800\\"}]"}}, "spec": {"containers": []}}')


@pytest.mark.parametrize("command", [["validate"], ["explain", "--pod"]])
def test_a_lone_surrogate_in_the_outer_json_is_u_fffd(tmp_path, command):
    """Go's decoder (the API server's, and /filter's) makes it U+FFFD; orjson refused the
    file ("cannot parse")."""
    path = tmp_path / "pod.json"
    path.write_text(SURROGATE_POD)
    done = subprocess.run([sys.executable, "-m", "extender", *command, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert "cannot parse" not in done.stdout + done.stderr
    assert "0\ufffd" in done.stdout and "must be a canonical decimal integer" in done.stdout
    assert "p\ufffd" in done.stdout


def gates_off(**off: bool) -> FeatureGates:
    return FeatureGates(**{name: False for name in off})


def answer(body: bytes, gates: FeatureGates) -> dict:
    return review(body, P, gates)["response"]


CEL = '[{"expression": "taint.key == \'k\'"}]'
GT = '[{"key": "k", "operator": "Gt", "value": "5"}]'
SEMVER_AFFINITY = json.dumps({"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "k", "operator": "SemverGt", "values": ["1.2.3"]}]}]}})


@pytest.mark.parametrize("gate, old_annotations, new_annotations", [
    ("cel", {f"{P}/tolerations": CEL}, {f"{P}/tolerations": CEL[:-1] + ', {"key": "x", "operator": "Exists"}]'}),
    ("comparison_operators", {f"{P}/tolerations": GT}, {f"{P}/tolerations": GT.replace('"5"', '"6"')}),
    ("semver_operators", {f"{P}/node-affinity": SEMVER_AFFINITY},
     {f"{P}/node-affinity": SEMVER_AFFINITY.replace("1.2.3", "1.2.4")}),
])
def test_update_ratchets_a_feature_the_old_object_already_used(gate, old_annotations,
                                                               new_annotations):
    gates = gates_off(**{gate: False})
    old, new = pod(old_annotations), pod(new_annotations)
    assert answer(admission(new, operation="UPDATE", old=old), gates)["allowed"] is True
    # a CREATE, or an UPDATE of an object that did not use it, is still refused
    assert answer(admission(new), gates)["allowed"] is False
    assert answer(admission(new, operation="UPDATE", old=pod()), gates)["allowed"] is False


def volume(annotations: dict | None = None, spec_affinity: dict | None = None) -> dict:
    spec = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/mnt/disk"}}
    if spec_affinity is not None:
        spec["nodeAffinity"] = spec_affinity
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-1", "annotations": annotations or {}}, "spec": spec}


SEMVER_VOLUME = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "node.kubernetes.io/kernel-version", "operator": "SemverGt", "values": ["5.10.0"]}]}]}}


@pytest.mark.parametrize("old", [
    volume({f"{P}/node-affinity": json.dumps(SEMVER_VOLUME)}),
    volume(spec_affinity=SEMVER_VOLUME),
], ids=["annotation", "spec"])
def test_update_of_a_persistent_volume_ratchets_semver(old):
    """A PV whose old object already used SemverGt may change its annotation with the
    Semver gate off; a new PV, or one that never used Semver, may not."""
    new = volume({f"{P}/node-affinity": json.dumps(SEMVER_VOLUME).replace("5.10.0", "5.15.0")})
    gates = gates_off(semver_operators=False)
    pv = "PersistentVolume"
    assert answer(admission(new, kind=pv, operation="UPDATE", old=old), gates)["allowed"] is True
    assert answer(admission(new, kind=pv), gates)["allowed"] is False
    assert answer(admission(new, kind=pv, operation="UPDATE", old=volume()), gates)["allowed"] is False


def test_spec_tolerations_of_the_old_object_count_too():
    old = pod()
    old["spec"]["tolerations"] = [{"expression": "taint.key == 'k'"}]
    new = pod({f"{P}/tolerations": CEL})
    new["spec"]["tolerations"] = old["spec"]["tolerations"]
    assert answer(admission(new, operation="UPDATE", old=old), gates_off(cel=False))["allowed"]


def test_a_non_string_annotation_is_shown_as_json_not_a_python_repr():
    obj = pod()
    obj["metadata"]["annotations"] = {f"{P}/tolerations": [{"key": "k"}]}
    (error,) = check_object(obj, P, FeatureGates()).errors
    assert str(error) == (f'metadata.annotations[{P}/tolerations]: Invalid value: '
                          '[{"key":"k"}]: annotation values must be strings')
    assert "'" not in str(error)


def test_get_validate_answers_405(tmp_path):
    from pki import CA, write_pair

    ca = CA.create()
    cert, key, _serial = ca.issue("webhook-1")
    cert_path, key_path = write_pair(tmp_path, cert, key)
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    listener = serve({"cert": cert_path, "key": key_path})
    try:
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        for method, expected in (("GET", 405), ("HEAD", 405)):
            conn = http.client.HTTPSConnection("127.0.0.1", listener.port, context=ctx, timeout=5)
            conn.request(method, "/validate")
            assert conn.getresponse().status == expected
            conn.close()
        conn = http.client.HTTPSConnection("127.0.0.1", listener.port, context=ctx, timeout=5)
        conn.request("GET", "/nope")
        assert conn.getresponse().status == 404
        conn.close()
    finally:
        listener.stop()
