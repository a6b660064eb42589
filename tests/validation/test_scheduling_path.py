"""Scheduling and explain report the validator's text verbatim: every node
UnschedulableAndUnresolvable, the reason naming the annotation and the field path."""

from __future__ import annotations

import copy

import orjson
import pytest
from conftest import example_pod

from extender.api.wire import ExtenderArgs
from extender.explain import explain
from extender.validation import aggregate, check_pod

P = "scheduling-extender.io"
T = f"metadata.annotations[{P}/tolerations]"
A = f"metadata.annotations[{P}/node-affinity]"
NODES = ["od-a1", "od-b1", "spot-a1"]


def pod_with(**annotations) -> dict:
    pod = copy.deepcopy(example_pod("plain"))
    pod["metadata"]["annotations"] = {f"{P}/{k.replace('_', '-')}": v for k, v in annotations.items()}
    return pod


CASES = [
    # issue 17: one past int64 / int32 is malformed, as Go's decoder says
    (dict(tolerations='[{"key": "k", "operator": "Exists", "effect": "NoExecute", '
                      '"tolerationSeconds": 9223372036854775808}]'),
     "TaintToleration",
     f"{T}[0].tolerationSeconds: Invalid value: json: cannot unmarshal number 9223372036854775808 into Go "
     "struct field Toleration.tolerationSeconds of type int64"),
    (dict(node_affinity='{"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 2147483648, '
                        '"preference": {}}]}'),
     "NodeAffinity",
     f"{A}.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: json: cannot unmarshal "
     "number 2147483648 into Go struct field PreferredSchedulingTerm.preferredDuringSchedulingIgnoredDuring"
     "Execution.weight of type int32"),
    # decodes, but API validation would reject it in spec
    (dict(tolerations="[null]"), "TaintToleration",
     f'{T}[0].operator: Invalid value: "": operator must be Exists when `key` is empty, which means '
     '"match all values and all keys"'),
    (dict(tolerations='[{"key": "k", "operator": "Gt", "value": "08"}]'), "TaintToleration",
     f'{T}[0].value: Invalid value: "08": must be a canonical decimal integer within int64'),
    (dict(node_affinity='{"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "preference": {}}]}'),
     "NodeAffinity", f"{A}.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 101: "
                     "must be in the range 1-100"),
    (dict(tolerations='[{"key": "k", "operator": "Bad"}, {"key": "k", "operator": "Gt", "value": "x"}]'),
     "TaintToleration",
     f'[{T}[0].operator: Unsupported value: "Bad": supported values: "Equal", "Exists", "Lt", "Gt", "SemverGt", '
     f'"SemverLt", "SemverEq", {T}[1].value: Invalid value: "x": must be a canonical decimal integer within int64]'),
]


CASES.append((
    dict(tolerations='[{"key": "k", "operator": "Gt", "value": "08"}]',
         node_affinity='{"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}'),
    "TaintToleration",
    f'[{T}[0].value: Invalid value: "08": must be a canonical decimal integer within int64, '
    f"{A}.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100]"))


@pytest.mark.parametrize("annotations, plugin, reason", CASES)
def test_filter_explain_and_validator_say_the_same(example_extender, annotations, plugin, reason):
    pod = pod_with(**annotations)
    result = orjson.loads(example_extender.filter(ExtenderArgs(pod, None, NODES)))
    assert result["NodeNames"] == [] and result["FailedNodes"] == {}
    assert result["FailedAndUnresolvableNodes"] == dict.fromkeys(NODES, reason)

    report = explain(example_extender, [pod], NODES)["results"][0]
    assert report["filter"]["FailedAndUnresolvableNodes"] == dict.fromkeys(NODES, reason)
    verdict = report["nodes"]["od-a1"]["plugins"][plugin]
    assert verdict["code"] == "UnschedulableAndUnresolvable" and reason in verdict["reasons"]

    check = check_pod(pod["metadata"]["annotations"], [], P, example_extender.config.feature_gates)
    assert aggregate(check.errors) == reason


def test_lone_surrogate_is_read_as_replacement_char_not_malformed(example_extender):
    pod = pod_with(tolerations='[{"key": "node.example.com/sla", "operator": "Exists", "value": ""}, '
                               '{"key": "x\\ud800", "operator": "Exists"}]')
    # the second key decodes to "x\ufffd", which is not a valid label key: a validation error, not a JSON one
    result = orjson.loads(example_extender.filter(ExtenderArgs(pod, None, NODES)))
    (reason,) = set(result["FailedAndUnresolvableNodes"].values())
    assert reason.startswith(f'{T}[1].key: Invalid value: "x\ufffd": ')


def test_valid_annotation_with_unknown_field_still_schedules(example_extender):
    plain = orjson.loads(example_extender.filter(ExtenderArgs(pod_with(), None, NODES)))
    pod = pod_with(tolerations='[{"key": "node.example.com/sla", "operator": "Exists", "Value": "ignored"}]')
    result = orjson.loads(example_extender.filter(ExtenderArgs(pod, None, NODES)))
    assert not result["FailedAndUnresolvableNodes"].get("od-a1")
    assert set(result["NodeNames"]) >= set(plain["NodeNames"])


def test_explain_shows_what_the_webhook_would_warn_about(example_extender):
    from kubectl_extender.render import render_table

    pod = pod_with(tolerations='[{"key": "node.example.com/sla", "operator": "Exists", "effect": "NoExecute"}]')
    report = explain(example_extender, [pod], NODES)
    (warning,) = report["results"][0]["annotationWarnings"]
    assert warning.startswith(f"{T}[0]: a NoExecute taint can only be tolerated from spec.tolerations")
    assert f"WARNING {warning}" in render_table(report)
    assert "annotationWarnings" not in explain(example_extender, [pod_with()], NODES)["results"][0]
