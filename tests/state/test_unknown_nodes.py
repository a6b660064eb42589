"""Nodes the state has not seen, or cannot read, are Unschedulable (retryable)."""

from __future__ import annotations

import orjson
from conftest import example_pod

from extender import metrics
from extender.api.candidates import ERR_UNPARSEABLE_NODE
from extender.api.wire import decode_args
from extender.engine.extender import ERR_UNKNOWN_NODE


def _filter(engine, body: dict) -> dict:
    return orjson.loads(engine.filter(decode_args(orjson.dumps(body))))


def test_unknown_names_are_unschedulable_and_counted(example_extender):
    before = metrics.UNKNOWN_NODES_TOTAL._value.get()
    result = _filter(example_extender, {"Pod": example_pod("plain"), "NodeNames": ["od-a1", "new-1", "new-2"]})
    assert result["NodeNames"] == ["od-a1"]
    assert result["FailedNodes"] == {"new-1": ERR_UNKNOWN_NODE, "new-2": ERR_UNKNOWN_NODE}
    assert result["FailedAndUnresolvableNodes"] == {}
    assert metrics.UNKNOWN_NODES_TOTAL._value.get() == before + 2


def test_unreadable_node_objects_in_nodes_mode_are_unschedulable(example_extender):
    good = {"metadata": {"name": "good", "labels": {}}, "spec": {}}
    bad = {"metadata": {"name": "bad"}, "spec": {"taints": "not-a-list"}}
    before = metrics.UNKNOWN_NODES_TOTAL._value.get()
    result = _filter(example_extender, {"Pod": example_pod("plain"), "Nodes": {"items": [good, bad]}})
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["good"]
    assert result["FailedNodes"]["bad"].startswith(ERR_UNPARSEABLE_NODE + ": ")
    assert "taints" in result["FailedNodes"]["bad"]
    assert metrics.UNKNOWN_NODES_TOTAL._value.get() == before + 1
    nameless = {"metadata": {}, "spec": {"taints": 3}}
    result = _filter(example_extender, {"Pod": example_pod("plain"), "Nodes": {"items": [good, nameless]}})
    assert "Nodes.items[1]" in result["Error"]  # nothing to answer for: the request is invalid
