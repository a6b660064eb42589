"""Answers that read only node taints survive node events that change no taint (the
churn benchmark's node relabels), and are recomputed when taints or the node set
change; answers through the engine equal a state built from scratch."""

from __future__ import annotations

import copy

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from extender.api.wire import decode_args
from extender.config import Config
from extender.engine import Extender
from extender.state import ClusterSource, Reads, StaticSource, Store, load_objects


def _store(objects: list[dict]) -> Store:
    s = Store()
    s.load(copy.deepcopy(objects))
    return s


def _never() -> object:
    raise AssertionError("recomputed although no taint changed")


@pytest.fixture
def objects() -> list[dict]:
    return load_objects(EXAMPLES / "cluster.yaml")


def _nodes(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] == "Node"]


def test_relabel_keeps_taint_answers_and_drops_the_rest(objects):
    s = _store(objects)
    snap = s.snapshot()
    assert snap.memo("t", lambda: "taints", Reads.TAINTS) == "taints"
    assert snap.memo("l", lambda: "labels", Reads.NODES) == "labels"
    node = copy.deepcopy(_nodes(objects)[0])
    node["metadata"]["labels"]["relabelled"] = "yes"
    assert s.upsert("Node", node)
    after = s.snapshot()
    assert after.nodes is not snap.nodes
    assert after.memo("t", _never, Reads.TAINTS) == "taints"
    assert after.memo("l", lambda: "recomputed", Reads.NODES) == "recomputed"


@pytest.mark.parametrize("change", ["taint", "add", "delete"])
def test_taint_answers_are_recomputed_when_taints_or_nodes_change(objects, change):
    s = _store(objects)
    s.snapshot().memo("t", lambda: "old", Reads.TAINTS)
    node = copy.deepcopy(_nodes(objects)[0])
    if change == "taint":
        node.setdefault("spec", {})["taints"] = [{"key": "new.example.com/t", "effect": "NoSchedule"}]
        s.upsert("Node", node)
    elif change == "add":
        node["metadata"]["name"] = "brand-new-node"
        s.upsert("Node", node)
    else:
        s.delete("Node", "", node["metadata"]["name"])
    assert s.snapshot().memo("t", lambda: "new", Reads.TAINTS) == "new"


def _live_engine(objects):
    """A store loaded with `objects` and an engine reading its current snapshot (as the
    live source serves it), answers computed every time."""
    s = _store(objects)

    class Live(ClusterSource):
        def snapshot(self):
            return s.snapshot()

    return s, Extender(Config(), Live())


@pytest.mark.parametrize("pod_name", ["plain", "sla-gt", "cel-rack-regex", "cel-kernel-version",
                                      "annotation-tolerations", "spread-spot", "cordon-toleration"])
def test_answers_after_relabels_equal_a_fresh_state(objects, pod_name):
    """Warm every memo, relabel and re-taint nodes one event at a time, and compare the
    answers with an engine over a store loaded from the final objects."""
    s, engine = _live_engine(objects)
    names = [n["metadata"]["name"] for n in _nodes(objects)]
    body = orjson.dumps({"Pod": example_pod(pod_name), "NodeNames": names})
    final = copy.deepcopy(objects)
    for step, node in enumerate(_nodes(final)[:6]):
        engine.filter(decode_args(body))
        engine.prioritize(decode_args(body))
        node["metadata"].setdefault("labels", {})["topology.kubernetes.io/zone"] = f"z{step % 2}"
        if step == 3:
            node.setdefault("spec", {})["taints"] = [{"key": "step.example.com/t", "effect": "NoSchedule"}]
        s.upsert("Node", copy.deepcopy(node))
        fresh = Extender(Config(), StaticSource(_store(final).snapshot()))
        assert engine.filter(decode_args(body)) == fresh.filter(decode_args(body)), step
        assert engine.prioritize(decode_args(body)) == fresh.prioritize(decode_args(body)), step


def test_candidate_sets_follow_a_relabel_but_not_a_new_node(objects):
    """kube-scheduler's NodeNames list is resolved once per node layer; a relabel keeps
    every node in its place, so the set (its positions, encoded names and templates) is
    carried; a new node is not."""
    s, engine = _live_engine(objects)
    names = [n["metadata"]["name"] for n in _nodes(objects)]
    args = decode_args(orjson.dumps({"Pod": example_pod("plain"), "NodeNames": names}))
    engine.filter(args)
    before = s.snapshot().nodes.candidates(args.names_key, _never, len)
    node = copy.deepcopy(_nodes(objects)[1])
    node["metadata"]["labels"]["relabelled"] = "yes"
    s.upsert("Node", node)
    after = s.snapshot().nodes.candidates(args.names_key, _never, len)
    assert after.nodes.universe is s.snapshot().nodes and after.nodes.order == before.nodes.order
    assert after.nodes.templates is before.nodes.templates
    assert after.nodes.nodes[1].labels["relabelled"] == "yes"
    node["metadata"]["name"] = "another-node"
    s.upsert("Node", node)
    rebuilt = s.snapshot().nodes.candidates(args.names_key, lambda: "rebuilt", len)
    assert rebuilt == "rebuilt"
