"""The annotation channel: tolerations unioned, node affinity ANDed, errors loud."""

from __future__ import annotations

import copy

import orjson
import pytest
from conftest import example_pod, make_extender

from extender.api.wire import ExtenderArgs
from extender.config import Config

ALL = ["od-a1", "od-a2", "od-b1", "od-b2", "od-c1", "od-c2", "spot-a1", "spot-b1", "spot-c1", "dev-a1"]


def run(ext, pod, names=ALL):
    return orjson.loads(ext.filter(ExtenderArgs(pod, None, names)))


def with_annotation(name: str, key: str, value) -> dict:
    pod = copy.deepcopy(example_pod(name))
    pod["metadata"].setdefault("annotations", {})[key] = value if isinstance(value, str) else orjson.dumps(value).decode()
    return pod


def test_annotation_tolerations_are_unioned_with_spec(example_extender):
    result = run(example_extender, example_pod("annotation-tolerations"))
    # Gt 750 admits spot-a1/spot-b1; the CEL prefix expression admits od-c1 (env staging).
    assert result["NodeNames"] == ["od-a1", "od-b1", "od-c1", "spot-a1", "spot-b1"]


def test_annotation_and_spec_tolerations_both_count(example_extender):
    pod = with_annotation(
        "sla-lt", "scheduling-extender.io/tolerations",
        [{"key": "env.example.com/staging", "operator": "Exists"}],
    )
    result = run(example_extender, pod)
    assert "spot-c1" in result["NodeNames"]  # spec: Lt 900 (500)
    assert "od-c1" in result["NodeNames"]  # annotation: Exists


def test_annotation_affinity_is_anded_with_node_selector(example_extender):
    result = run(example_extender, example_pod("annotation-affinity"))
    assert result["NodeNames"] == ["od-a1"]
    assert result["FailedAndUnresolvableNodes"]["od-b1"] == "node(s) didn't match Pod's node affinity/selector"


def test_annotation_affinity_is_anded_with_spec_required_terms(example_extender):
    pod = with_annotation(
        "cni-semver-affinity", "scheduling-extender.io/node-affinity",
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}]}},
    )
    # spec requires CNI > 1.3.99 (od-a1, ...), annotation requires zone-b: nothing fits both
    result = run(example_extender, pod, ["od-a1", "od-b1"])
    assert result["NodeNames"] == []


def test_annotation_preferred_terms_are_added(example_extender):
    pod = with_annotation(
        "plain", "scheduling-extender.io/node-affinity",
        {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}}]},
    )
    scores = orjson.loads(example_extender.prioritize(ExtenderArgs(pod, None, ["od-a1", "od-b1"])))
    by_host = {h["Host"]: h["Score"] for h in scores}
    # in-tree (default): od-a1 TT 3*100 / 10 = 30; od-b1 NA 2*100 / 10 = 20
    assert by_host == {"od-a1": 30, "od-b1": 20}


TOL = "metadata.annotations[scheduling-extender.io/tolerations]"
AFF = "metadata.annotations[scheduling-extender.io/node-affinity]"


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("tolerations", "[{", f"{TOL}: Invalid value: invalid JSON: unexpected end of JSON input"),
        ("tolerations", '{"key": "a"}',
         f"{TOL}: Invalid value: json: cannot unmarshal object into Go value of type []v1.Toleration"),
        ("tolerations", '[{"key": 5}]',
         f"{TOL}[0].key: Invalid value: json: cannot unmarshal number into Go struct field Toleration.key of type string"),
        ("node-affinity", "nope", f"{AFF}: Invalid value: invalid JSON: invalid character 'o' in literal null (expecting 'u')"),
        ("node-affinity", "[]", f"{AFF}: Invalid value: json: cannot unmarshal array into Go value of type v1.NodeAffinity"),
    ],
)
def test_malformed_annotation_rejects_every_node_loudly(example_extender, key, value, fragment):
    pod = with_annotation("plain", f"scheduling-extender.io/{key}", value)
    result = run(example_extender, pod)
    assert result["NodeNames"] == []
    assert set(result["FailedAndUnresolvableNodes"]) == set(ALL)
    assert all(msg == fragment for msg in result["FailedAndUnresolvableNodes"].values()), result


def test_annotation_prefix_is_configurable(example_objects):
    ext = make_extender(example_objects, Config(annotation_prefix="acme.io"))
    pod = with_annotation("plain", "acme.io/tolerations", [{"key": "node.example.com/sla", "operator": "Exists"}])
    assert "spot-c1" in run(ext, pod)["NodeNames"]
    ignored = with_annotation("plain", "scheduling-extender.io/tolerations", [{"operator": "Exists"}])
    assert "spot-c1" not in run(ext, ignored)["NodeNames"]
