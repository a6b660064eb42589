"""A new toleration operator is one record: this file registers a toy one (`Prefix`: the
taint's value starts with the toleration's) and nothing else in the package changes, yet
the filter, `explain`, the annotation channel's validation (webhook, `extender validate`,
/filter's own check) and the webhook's ratcheting all know it."""

from __future__ import annotations

import orjson
import pytest
from conftest import make_extender

from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.explain import explain
from extender.features import FeatureGates
from extender.matching.operators import (
    TOLERATION_OPERATORS,
    TolerationOperator,
    register_toleration,
    unregister_toleration,
    verdict,
)
from extender.matching.tolerations import explain_toleration, tolerates
from extender.model import Taint, Toleration
from extender.validation import check_pod
from extender.validation.workloads import check_object, ratcheted_gates

P = "scheduling-extender.io"
KEY = "example.com/zone"
GATE_OFF = FeatureGates(comparison_operators=False)


def _starts_with(toleration_value: str, taint_value: str) -> bool:
    return taint_value.startswith(toleration_value)


def _describe(ok: bool, toleration_value: str, taint_value: str) -> str:
    return f"{verdict(ok)}: taint value {taint_value!r} {'starts' if ok else 'does not start'} with {toleration_value!r}"


def _check(value: str) -> str | None:
    return None if value else "must name a prefix"


TOY = TolerationOperator("Prefix", _starts_with, _describe, gate="comparison_operators",
                         check_value=_check)


@pytest.fixture
def toy():
    assert "Prefix" not in TOLERATION_OPERATORS
    register_toleration(TOY)
    yield TOY
    unregister_toleration("Prefix")


def node(name: str, value: str, effect: str = "NoSchedule") -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {}},
            "spec": {"taints": [{"key": KEY, "value": value, "effect": effect}]}}


def pod(tolerations: list[dict], name: str = "toy") -> dict:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "annotations": {f"{P}/tolerations": orjson.dumps(tolerations).decode()}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


NODES = [node("zone-a1", "a-1"), node("zone-b1", "b-1"), node("zone-a2-evicting", "a-2", "NoExecute")]
NAMES = [n["metadata"]["name"] for n in NODES]


def test_filter_and_explain_use_the_toy_operator(toy):
    extender = make_extender(NODES, Config(slim_answers=False))
    the_pod = pod([{"key": KEY, "operator": "Prefix", "value": "a-", "effect": ""}])
    result = orjson.loads(extender.filter(ExtenderArgs(the_pod, None, NAMES)))
    assert result["NodeNames"] == ["zone-a1"]
    # an annotation toleration never counts for a NoExecute taint (the kubelet does not see it)
    assert set(result["FailedNodes"]) | set(result["FailedAndUnresolvableNodes"]) == {"zone-b1", "zone-a2-evicting"}

    report = explain(extender, [the_pod], NAMES)["results"][0]
    assert report["filter"]["NodeNames"] == ["zone-a1"]
    reasons = report["nodes"]["zone-b1"]["plugins"]["TaintToleration"]["reasons"]
    assert f"{P}/tolerations[0] {KEY} Prefix 'a-': does not tolerate: taint value 'b-1' does not start with 'a-'" \
        in reasons


def test_explain_text_gate_and_kubelet(toy):
    tol = Toleration(key=KEY, operator="Prefix", value="a-")
    taint = Taint(KEY, "a-7", "NoSchedule")
    assert tolerates(tol, taint, FeatureGates(), None)
    assert explain_toleration(tol, taint, FeatureGates(), None) == \
        f"{KEY} Prefix 'a-': tolerates: taint value 'a-7' starts with 'a-'"
    # its gate off: never tolerates, and explain says why
    assert not tolerates(tol, taint, GATE_OFF, None)
    assert explain_toleration(tol, taint, GATE_OFF, None) == \
        f"{KEY} Prefix 'a-': feature gate TaintTolerationComparisonOperators is disabled"
    # not a Kubernetes API operator: a NoExecute taint is not tolerated even from spec
    evicting = Taint(KEY, "a-7", "NoExecute")
    assert not tolerates(tol, evicting, FeatureGates(), None)
    assert explain_toleration(tol, evicting, FeatureGates(), None).endswith(
        "and operator Prefix is not a Kubernetes API operator")


def test_validation_and_ratcheting(toy):
    ok = [{"key": KEY, "operator": "Prefix", "value": "a-"}]
    assert check_pod({f"{P}/tolerations": orjson.dumps(ok).decode()}, [], P, FeatureGates()).errors == ()

    where = f"metadata.annotations[{P}/tolerations][0]"
    empty = [{"key": KEY, "operator": "Prefix", "value": ""}]
    errors = check_pod({f"{P}/tolerations": orjson.dumps(empty).decode()}, [], P, FeatureGates()).errors
    assert [str(e) for e in errors] == [f'{where}.value: Invalid value: "": must name a prefix']

    bad = [{"key": KEY, "operator": "Suffix", "value": "a"}]
    errors = check_pod({f"{P}/tolerations": orjson.dumps(bad).decode()}, [], P, FeatureGates()).errors
    assert [str(e) for e in errors] == [
        f'{where}.operator: Unsupported value: "Suffix": supported values: "Equal", "Exists", "Lt", "Gt", '
        '"SemverGt", "SemverLt", "SemverEq", "Prefix"']

    # the gate off: refused on CREATE, allowed on an UPDATE of a pod that already used it
    gated = [{"key": KEY, "operator": "Prefix", "value": "b-"}]
    created = check_object(pod(gated, "gated"), P, GATE_OFF)
    assert [str(e) for e in created.errors] == [
        f'{where}.operator: Unsupported value: "Prefix": supported values: "Equal", "Exists", '
        '"SemverGt", "SemverLt", "SemverEq"']
    kept = ratcheted_gates(pod(gated, "gated"), "Pod", P, GATE_OFF)
    assert kept.comparison_operators
    assert check_object(pod(gated, "gated"), P, kept).errors == ()


def test_unregistered_it_is_unknown_again():
    assert "Prefix" not in TOLERATION_OPERATORS
    tol = Toleration(key=KEY, operator="Prefix", value="a-")
    assert not tolerates(tol, Taint(KEY, "a-7", "NoSchedule"), FeatureGates(), None)
    assert explain_toleration(tol, Taint(KEY, "a-7", "NoSchedule"), FeatureGates(), None) == \
        f"{KEY} Prefix 'a-': unsupported operator 'Prefix'"
