"""Answers remembered per pod shape: the shape covers every pod field the plugins read,
identity joins it when nominated pods make it matter, and remembered answers and the
evaluation counter are exactly what computing every answer gives."""

from __future__ import annotations

import copy
import dataclasses
import json

import orjson
import pytest
from conftest import EXAMPLES, example_pod, make_extender
from prometheus_client import REGISTRY

from extender.api.wire import decode_args
from extender.config import Config
from extender.framework.shape import EXCLUDED, SHAPE_FIELDS, pod_shape
from extender.model import Pod
from extender.model.objects import NodeAffinity, NodeSelector, Toleration
from extender.model.parse import pod_from_dict
from extender.service import Extender
from extender.state import ClusterSnapshot, StaticSource

PODS = [p.stem for p in sorted((EXAMPLES / "pods").glob("*.yaml"))]
NAMES = ["od-a1", "od-a2", "od-b1", "od-b2", "od-c1", "od-c2", "spot-a1", "spot-b1", "spot-c1", "dev-a1"]


def test_every_pod_field_is_in_the_shape_unless_excluded_on_purpose():
    assert EXCLUDED == {"raw", "annotations", "name", "uid"}
    assert set(SHAPE_FIELDS) | EXCLUDED == {f.name for f in dataclasses.fields(Pod)}


def _other(value):
    """A different value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return "broken annotation"
    if isinstance(value, NodeAffinity):
        return NodeAffinity(required=(NodeSelector(),)) if value == NodeAffinity() else NodeAffinity()
    if isinstance(value, tuple):
        return value[:-1] if value else (Toleration(key="k", operator="Exists"),)
    if isinstance(value, dict):
        return {**value, "other": "x"}
    raise AssertionError(f"no other value for {value!r}")


@pytest.mark.parametrize("field", SHAPE_FIELDS)
def test_each_shape_field_changes_the_shape(field, example_snapshot):
    pod = pod_from_dict(example_pod("spread-spot"), "scheduling-extender.io")
    changed = dataclasses.replace(pod, **{field: _other(getattr(pod, field))})
    assert pod_shape(changed, example_snapshot) != pod_shape(pod, example_snapshot)


def test_replicas_share_a_shape(example_snapshot):
    raw = example_pod("spread-spot")
    twin = copy.deepcopy(raw)
    twin["metadata"].update(name="another-replica", uid="another-uid")
    twin["metadata"].setdefault("annotations", {})["unrelated"] = "x"
    shapes = {pod_shape(pod_from_dict(p, "scheduling-extender.io"), example_snapshot) for p in (raw, twin)}
    assert len(shapes) == 1


# --- remembered answers are the computed ones ---------------------------------------------

def _wire(ext, pod: dict, names: list[str]) -> tuple[bytes, bytes]:
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    filtered = ext.filter_bytes(decode_args(body))
    feasible = orjson.loads(filtered)["NodeNames"] or []
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": feasible})
    return filtered, ext.prioritize_bytes(decode_args(body))


def _replica(name: str, i: int) -> dict:
    pod = example_pod(name)
    pod["metadata"].update(name=f"{pod['metadata']['name']}-{i}", uid=f"uid-{name}-{i}")
    return pod


def test_remembered_answers_are_byte_identical_to_computed_ones(example_objects):
    remembering = make_extender(example_objects, remember_answers=True)
    computing = make_extender(example_objects, remember_answers=False)
    for i in range(3):  # the first round fills, the others reuse
        for name in PODS:
            pod = _replica(name, i)
            assert _wire(remembering, pod, NAMES) == _wire(computing, pod, NAMES), name
            assert _wire(remembering, pod, NAMES[::-1]) == _wire(computing, pod, NAMES[::-1]), name


def _evaluations() -> dict[tuple, float]:
    out = {}
    for metric in REGISTRY.collect():
        if metric.name == "scheduler_plugin_evaluation":
            for s in metric.samples:
                if s.name.endswith("_total"):
                    out[tuple(sorted(s.labels.items()))] = s.value
    return out


def _delta(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def test_reused_answers_count_their_evaluations(example_objects):
    remembering = make_extender(example_objects, remember_answers=True)
    computing = make_extender(example_objects, remember_answers=False)
    deltas = []
    for ext in (computing, remembering):
        before = _evaluations()
        for i in range(4):
            for name in ("sla-gt", "spread-spot", "cni-semver-affinity"):
                _wire(ext, _replica(name, i), NAMES)
        deltas.append(_delta(before, _evaluations()))
    assert deltas[0] == deltas[1]
    assert deltas[0]  # something was counted


# --- nominated pods: identity matters -------------------------------------------------------

def _node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def _spread_pod(name: str, uid: str, nominated: str = "") -> dict:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
             "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "x"}}}]},
        "status": {"phase": "Pending"},
    }
    if nominated:
        pod["status"]["nominatedNodeName"] = nominated
    return pod


def test_a_nominated_pod_is_not_answered_as_its_replica():
    objects = [_node("n1"), _node("n2"), _spread_pod("p", "uid-p", nominated="n1")]
    snapshot = ClusterSnapshot.from_objects(objects)
    itself, replica = _spread_pod("p", "uid-p"), _spread_pod("q", "uid-q")
    shapes = {pod_shape(pod_from_dict(p, "scheduling-extender.io"), snapshot) for p in (itself, replica)}
    assert len(shapes) == 2  # the namespace has a nominated pod: identity is in the shape

    remembering = make_extender(objects, remember_answers=True)
    computing = make_extender(objects, remember_answers=False)
    seen = {}
    for pod in (replica, itself, replica, itself):
        got = _wire(remembering, pod, ["n1", "n2"])
        assert got == _wire(computing, pod, ["n1", "n2"])
        seen[pod["metadata"]["uid"]] = orjson.loads(got[0])["NodeNames"]
    # the replica must see p on n1 (skew 2 there); p itself does not count itself
    assert seen == {"uid-q": ["n2"], "uid-p": ["n1", "n2"]}


def test_answers_are_not_reused_across_snapshots():
    """A bind (a new snapshot) changes spreading: the answer must be computed again,
    even though the NodeNames list and the pod's shape are the same."""
    empty = [_node("n1"), _node("n2")]
    bound = {**_spread_pod("b", "uid-b"), "spec": {**_spread_pod("b", "uid-b")["spec"], "nodeName": "n1"},
             "status": {"phase": "Running"}}
    source = StaticSource(ClusterSnapshot.from_objects(empty))
    remembering = Extender(Config(), source, remember_answers=True)
    first = orjson.loads(_wire(remembering, _spread_pod("q", "uid-q"), ["n1", "n2"])[0])
    source.set(ClusterSnapshot.from_objects([*empty, bound]))
    second = orjson.loads(_wire(remembering, _spread_pod("r", "uid-r"), ["n1", "n2"])[0])
    assert first["NodeNames"] == ["n1", "n2"]
    assert second["NodeNames"] == ["n2"]


def test_a_pod_whose_shape_cannot_be_written_is_answered_without_reuse(example_objects):
    pod = example_pod("spread-spot")
    deep: dict = {}
    for _ in range(300):  # deeper than orjson writes
        deep = {"x": deep}
    pod["spec"]["topologySpreadConstraints"][0]["unknownField"] = deep
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": NAMES}, separators=(",", ":")).encode()
    remembering = make_extender(example_objects, remember_answers=True)
    computing = make_extender(example_objects, remember_answers=False)
    answers = {remembering.filter_bytes(decode_args(body)), computing.filter_bytes(decode_args(body))}
    assert len(answers) == 1
    assert orjson.loads(answers.pop())["NodeNames"]  # answered, not an error


def test_answer_reuse_is_off_by_default_and_can_be_switched_on(example_objects):
    from extender.service import SHAPE_ANSWERS

    snapshot = ClusterSnapshot.from_objects(example_objects)
    ext = Extender(Config(), StaticSource(snapshot))
    assert not ext.remember_answers
    _wire(ext, _replica("sla-gt", 0), NAMES)
    assert SHAPE_ANSWERS not in snapshot._memo  # nothing kept
    on = Extender(Config(remember_answers=True), StaticSource(snapshot))
    _wire(on, _replica("sla-gt", 0), NAMES)
    assert SHAPE_ANSWERS in snapshot._memo
