"""Extender wire shapes ported as data from upstream tests.

Source (kubernetes/kubernetes, facts only):
staging/src/k8s.io/kube-scheduler/extender/v1/types_test.go: TestCompatibility — the exact JSON
encoding of the extender types and their all-lower-case round trip. We only decode
ExtenderArgs and encode ExtenderFilterResult / HostPriority(List) (extender/api/wire.py), so
those three rows are ported; semantics.md §1.1 adds FailedAndUnresolvableNodes (a field newer than
that test), the never-omitted fields, and Go's decoding rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import orjson
import pytest

from extender.api.wire import (
    WireError,
    decode_args,
    encode,
    error_filter_result,
    filter_result,
    go_fields,
    host_priority_list,
)
from extender.config import Config
from extender.engine import Extender
from extender.framework import Code, Status
from extender.state import ClusterSnapshot, StaticSource

POD_JSON = '{"metadata":{"name":"podname","creationTimestamp":null},"spec":{"containers":null},"status":{}}'
NODE_JSON = (
    '{"metadata":{"name":"nodename","creationTimestamp":null},"spec":{},"status":{"daemonEndpoints"'
    ':{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"",'
    '"kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"",'
    '"kubeProxyVersion":"","operatingSystem":"","architecture":""}}}'
)
# TestCompatibility, ExtenderArgs row
EXTENDER_ARGS_JSON = (
    '{"Pod":' + POD_JSON + ',"Nodes":{"metadata":{},"items":[' + NODE_JSON + ']},'
    '"NodeNames":["node1"]}'
)
# TestCompatibility, ExtenderFilterResult row, with FailedAndUnresolvableNodes (§1.1) inserted
# before Error: we never omit a field and send an empty map rather than null.
EXTENDER_FILTER_RESULT_JSON = (
    '{"Nodes":{"metadata":{},"items":[' + NODE_JSON + ']},"NodeNames":["node1"],'
    '"FailedNodes":{"foo":"bar"},"FailedAndUnresolvableNodes":{},"Error":"myerror"}'
)
HOST_PRIORITY_JSON = '{"Host":"myhost","Score":1}'


@pytest.mark.parametrize("lower", [False, True], ids=["as-encoded", "lower-cased"])
def test_extender_args_decode(lower):
    body = EXTENDER_ARGS_JSON.lower() if lower else EXTENDER_ARGS_JSON
    args = decode_args(body.encode())
    assert args.pod["metadata"]["name"] == "podname"
    assert args.node_names == ["node1"]
    assert args.nodes is not None and len(args.nodes) == 1
    assert args.nodes[0]["metadata"]["name"] == "nodename"
    if not lower:
        assert args.pod == json.loads(POD_JSON)
        assert args.nodes == [json.loads(NODE_JSON)]


def test_filter_result_encoding_is_upstream_shape():
    node = json.loads(NODE_JSON)
    result = filter_result(
        ["node1"], [node], {"foo": Status(Code.UNSCHEDULABLE, ("bar",))}, error="myerror"
    )
    assert list(result) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                            "Error"]
    assert encode(result).decode() == EXTENDER_FILTER_RESULT_JSON


def test_filter_result_lower_cased_round_trip():
    """Go decodes the lower-cased JSON case-insensitively back to identical values."""
    node = json.loads(NODE_JSON)
    statuses = {
        "foo": Status(Code.UNSCHEDULABLE, ("bar",)),
        "baz": Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("qux",)),
    }
    encoded = encode(filter_result(["node1"], [node], statuses, error="myerror")).decode()
    names = ("Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error")
    decoded = go_fields(orjson.loads(encoded.lower()), names)
    assert decoded["NodeNames"] == ["node1"]
    assert decoded["FailedNodes"] == {"foo": "bar"}
    assert decoded["FailedAndUnresolvableNodes"] == {"baz": "qux"}
    assert decoded["Error"] == "myerror"
    assert go_fields(decoded["Nodes"], ("Items",))["Items"][0]["metadata"]["name"] == "nodename"


def test_filter_result_codes_split_into_the_two_maps():
    statuses = {
        "a": Status(Code.UNSCHEDULABLE, ("x", "y")),
        "b": Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) were unschedulable",)),
    }
    result = filter_result(["c"], None, statuses)
    assert result == {
        "Nodes": None,
        "NodeNames": ["c"],
        "FailedNodes": {"a": "x, y"},
        "FailedAndUnresolvableNodes": {"b": "node(s) were unschedulable"},
        "Error": "",
    }


def test_error_filter_result_never_omits_fields():
    assert encode(error_filter_result("myerror")).decode() == (
        '{"Nodes":null,"NodeNames":null,"FailedNodes":null,"FailedAndUnresolvableNodes":null,'
        '"Error":"myerror"}'
    )


def test_host_priority_encoding():
    assert encode({"Host": "myhost", "Score": 1}).decode() == HOST_PRIORITY_JSON
    assert encode(host_priority_list(["myhost"], [1])).decode() == "[" + HOST_PRIORITY_JSON + "]"
    lowered = go_fields(orjson.loads(HOST_PRIORITY_JSON.lower()), ("Host", "Score"))
    assert lowered == {"Host": "myhost", "Score": 1}


# --- Go encoding/json decoding rules (semantics §1.1) ------------------------------------------


def test_duplicate_keys_last_wins_case_insensitively():
    body = b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a"],"nodenames":["b"]}'
    assert decode_args(body).node_names == ["b"]


def test_unknown_keys_ignored_and_trailing_bytes_ignored():
    body = b'{"Pod":{"metadata":{"name":"p"}},"Extra":1,"NodeNames":["a"]} trailing garbage'
    args = decode_args(body)
    assert args.node_names == ["a"] and args.nodes is None


def test_null_lists_decode_to_none():
    args = decode_args(b'{"Pod":{"metadata":{"name":"p"}},"Nodes":null,"NodeNames":null}')
    assert args.nodes is None and args.node_names is None


@pytest.mark.parametrize("body", [b"", b"   ", b"{not json"])
def test_malformed_bodies_are_errors(body):
    with pytest.raises(WireError) as info:
        decode_args(body)
    assert info.value.malformed


# --- end to end through the engine -----------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    matched: bool
    kind: str = "false"
    message: str = ""


class NeverCel:
    def evaluate(self, expression, taint):
        return _Outcome(False)


def _extender(nodes, slim: bool = True):
    snapshot = ClusterSnapshot.from_objects([{"kind": "Node", **n} for n in nodes])
    return Extender(Config(slim_answers=slim), StaticSource(snapshot), cel=NeverCel())


@pytest.mark.parametrize("slim", [True, False])
def test_engine_answers_in_both_modes_with_upstream_shapes(slim):
    nodes = [
        {"metadata": {"name": "ok"}},
        {"metadata": {"name": "cordoned"}, "spec": {"unschedulable": True}},
        {"metadata": {"name": "tainted"}, "spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}},
    ]
    ext = _extender(nodes, slim)
    pod = {"metadata": {"name": "p"}, "spec": {}}
    # slim: a node fits, so no failing node is listed (kube-scheduler reads them only when none fits)
    failing = {} if slim else {"cordoned": "node(s) were unschedulable"}

    by_name = orjson.loads(ext.filter(decode_args(orjson.dumps({"Pod": pod, "NodeNames": ["ok", "cordoned"]}))))
    assert list(by_name) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                             "Error"]
    assert by_name["Nodes"] is None and by_name["NodeNames"] == ["ok"]
    assert by_name["FailedAndUnresolvableNodes"] == failing and by_name["FailedNodes"] == {}

    full = orjson.loads(ext.filter(decode_args(orjson.dumps(
        {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes[:2]}, "NodeNames": None}))))
    assert list(full) == list(by_name)
    assert full["NodeNames"] is None
    assert full["Nodes"] == {"metadata": {}, "items": [nodes[0]]}
    assert full["FailedAndUnresolvableNodes"] == failing and full["FailedNodes"] == {}

    prio = orjson.loads(ext.prioritize(decode_args(orjson.dumps({"Pod": pod, "NodeNames": ["ok", "tainted"]}))))
    assert all(list(h) == ["Host", "Score"] and isinstance(h["Score"], int) for h in prio)
    # slim: the lowest score (tainted's, an untolerated PreferNoSchedule taint) shifted to 0 and left out
    assert prio == ([{"Host": "ok", "Score": 30}] if slim else
                    [{"Host": "ok", "Score": 30}, {"Host": "tainted", "Score": 0}])


@pytest.mark.parametrize("fast", [True, False])
def test_a_repeated_candidate_fails_wherever_it_appears(fast):
    """A name the request repeats is one node: failing, it is never also feasible."""
    nodes = [{"metadata": {"name": "ok"}}, {"metadata": {"name": "cordoned"}, "spec": {"unschedulable": True}}]
    snapshot = ClusterSnapshot.from_objects([{"kind": "Node", **n} for n in nodes])
    ext = Extender(Config(slim_answers=False), StaticSource(snapshot), cel=NeverCel(), fast=fast)
    pod = {"metadata": {"name": "p"}, "spec": {}}
    names = ["cordoned", "ok", "cordoned"]
    by_name = orjson.loads(ext.filter(decode_args(orjson.dumps({"Pod": pod, "NodeNames": names}))))
    assert by_name["NodeNames"] == ["ok"]
    assert by_name["FailedAndUnresolvableNodes"] == {"cordoned": "node(s) were unschedulable"}
    items = [nodes[1], nodes[0], nodes[1]]
    full = orjson.loads(ext.filter(decode_args(orjson.dumps({"Pod": pod, "Nodes": {"items": items}}))))
    assert full["Nodes"]["items"] == [nodes[0]]
