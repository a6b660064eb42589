"""CEL toleration expressions end to end: KEP-5500 stories through /filter, errors mean
no match, explain says why, and one shared program cache across plugins."""

from __future__ import annotations

import copy

import orjson
import pytest
from conftest import example_pod, make_extender

from extender import metrics
from extender.api.wire import ExtenderArgs
from extender.cel import CelCache
from extender.config import Config
from extender.explain import explain_pod
from extender.features import FeatureGates

ALL = ["od-a1", "od-a2", "od-b1", "od-b2", "od-c1", "od-c2", "spot-a1", "spot-b1", "spot-c1", "dev-a1"]


def pod_with(tolerations: list[dict], annotation: bool = False, name: str = "cel") -> dict:
    pod = {"metadata": {"name": name, "namespace": "default"}, "spec": {}}
    if annotation:
        pod["metadata"]["annotations"] = {"scheduling-extender.io/tolerations": orjson.dumps(tolerations).decode()}
    else:
        pod["spec"]["tolerations"] = tolerations
    return pod


def feasible(ext, pod, names=ALL) -> list[str]:
    return orjson.loads(ext.filter(ExtenderArgs(pod, None, names)))["NodeNames"]


@pytest.fixture()
def ext(example_objects):
    return make_extender(example_objects, cel=CelCache())


STORIES = [
    ("taint.key.startsWith('env.example.com/')", {"od-c1"}),
    ("taint.key == 'node.example.com/kernel-version' && semver(taint.value).isGreaterThan(semver('5.15.0'))", {"od-b2"}),
    # dev-a1 also has env.example.com/dev: the rack regex alone is not enough
    ("taint.key.matches('^zone-a[12]-rack-[0-9]+$')", set()),
]


@pytest.mark.parametrize("annotation", [False, True], ids=["spec", "annotation"])
@pytest.mark.parametrize("expression, extra", STORIES, ids=["story1-prefix", "story2-kernel", "story3-regex"])
def test_kep_stories_through_filter(ext, expression, extra, annotation):
    baseline = set(feasible(ext, pod_with([])))
    got = set(feasible(ext, pod_with([{"expression": expression}], annotation)))
    assert got == baseline | extra


def test_story3_with_env_toleration_admits_the_rack_node(ext):
    assert "dev-a1" in feasible(ext, example_pod("cel-rack-regex"))


@pytest.mark.parametrize(
    "toleration, kind",
    [
        ({"expression": "taint.key.startsWith("}, "compile"),
        ({"expression": "taint.key > 5"}, "compile"),
        ({"expression": "taint.key"}, "compile"),  # non-bool
        ({"expression": "int(taint.key) > 100"}, "runtime"),  # a key never converts
        ({"expression": "taint.key.startsWith('node.example.com/')", "key": "x"}, "invalid"),
    ],
)
def test_errors_mean_no_match_and_explain_says_why(ext, toleration, kind):
    pod = pod_with([toleration, {"key": "node.example.com/cni-version", "operator": "Exists"}])
    names = feasible(ext, pod, ["od-b1", "spot-a1"])
    assert names == ["od-b1"]  # the other toleration still works; the expression never matches
    report = explain_pod(ext, pod, ["spot-a1"])
    reasons = " | ".join(report["nodes"]["spot-a1"]["plugins"]["TaintToleration"]["reasons"])
    if kind == "invalid":
        assert "invalid toleration: expression must not be combined" in reasons
    else:
        assert f"expression failed ({kind})" in reasons


def test_expression_false_is_explained(ext):
    pod = pod_with([{"expression": "taint.key == 'nope'"}])
    report = explain_pod(ext, pod, ["spot-a1"])
    assert "expression returned false" in " ".join(report["nodes"]["spot-a1"]["plugins"]["TaintToleration"]["reasons"])


def test_cost_bomb_is_rejected_at_compile_time_and_does_not_match(ext):
    bomb = "lists.range(50).all(a, lists.range(50).all(b, lists.range(50).all(c, taint.key.size() > a + b + c - 200)))"
    pod = pod_with([{"expression": bomb}])
    assert feasible(ext, pod, ["spot-a1"]) == []
    reasons = explain_pod(ext, pod, ["spot-a1"])["nodes"]["spot-a1"]["plugins"]["TaintToleration"]["reasons"]
    assert any("exceeds the limit of 1000000" in r for r in reasons)


def test_gate_off_means_expressions_never_match(example_objects):
    off = make_extender(example_objects, Config(feature_gates=FeatureGates(cel=False)), cel=CelCache())
    assert "od-c1" not in feasible(off, pod_with([{"expression": "true"}]))


def _misses() -> float:
    return metrics.CEL_CACHE_REQUESTS_TOTAL.labels("miss")._value.get()


def test_one_cache_shared_by_every_plugin_in_one_request(example_objects):
    """TaintToleration (filter and score), NodeUnschedulable and PodTopologySpread's
    nodeTaintsPolicy all match the same expression: it is compiled exactly once."""
    cache = CelCache()
    ext = make_extender(example_objects, cel=cache)
    expression = "taint.key.startsWith('node.kubernetes.io/') || taint.key == 'node.example.com/sla'"
    pod = pod_with([{"expression": expression}], name="shared")
    pod["metadata"]["labels"] = {"app": "shared"}
    pod["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "nodeTaintsPolicy": "Honor", "labelSelector": {"matchLabels": {"app": "shared"}},
    }]
    before = _misses()
    result = orjson.loads(ext.filter(ExtenderArgs(pod, None, ALL)))
    assert "od-c2" in result["NodeNames"]  # NodeUnschedulable: cordon tolerated via CEL
    assert "spot-c1" in result["NodeNames"]  # TaintToleration: sla taint tolerated via CEL
    orjson.loads(ext.prioritize(ExtenderArgs(copy.deepcopy(pod), None, result["NodeNames"])))
    stats = cache.stats()
    assert stats["compiles"] == 1
    assert stats["misses"] == 1 and stats["hits"] >= 1
    assert _misses() - before == 1
