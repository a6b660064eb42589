"""NodeAffinityArgs.addedAffinity (upstream TestNodeAffinity / TestNodeAffinityPriority
"added affinity" rows, ported as data) and its validation at start-up."""

from __future__ import annotations

import pytest
from plugin_harness import snapshot_backed, verdict

from extender.config import ConfigError, build_config
from extender.features import FeatureGates
from extender.framework import Code, CycleState, NodeScore, Status
from extender.framework.handle import Handle
from extender.framework.verdicts import failing
from extender.model.parse import node_from_dict
from extender.plugins.nodeaffinity import ERR_REASON_ENFORCED, ERR_REASON_POD, NodeAffinity
from extender.validation.pod import pod_from_dict


def plugin(added: dict | None) -> NodeAffinity:
    args = {} if added is None else {"addedAffinity": added}
    return NodeAffinity(Handle(FeatureGates(), None, {"NodeAffinity": args}))


def node(name: str, labels: dict) -> object:
    return node_from_dict({"metadata": {"name": name, "labels": labels}})


def required(*terms: dict) -> dict:
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}


def expr(key: str, op: str, *values: str) -> dict:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


NAME_IS_NODE2 = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node2"]}]}

FILTER_ROWS = [
    ("Matches added affinity and Pod's node affinity",
     required(expr("zone", "In", "foo")), required(NAME_IS_NODE2), (Code.SUCCESS, "")),
    ("Matches added affinity but not Pod's node affinity",
     required(expr("zone", "In", "bar")), required(NAME_IS_NODE2),
     (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_POD)),
    ("Doesn't match added affinity",
     None, required(expr("zone", "In", "bar")),
     (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_ENFORCED)),
]


@pytest.mark.parametrize("name, pod_affinity, added, want", FILTER_ROWS, ids=[r[0] for r in FILTER_ROWS])
def test_filter_with_added_affinity(name, pod_affinity, added, want):
    spec = {"affinity": {"nodeAffinity": pod_affinity}} if pod_affinity else {}
    the_pod = pod_from_dict({"metadata": {"name": "p"}, "spec": spec})
    n = node("node2", {"zone": "foo"})
    p = plugin(added)
    state = CycleState()
    _, pre = p.pre_filter(state, the_pod, None)
    assert pre.code is Code.SUCCESS  # never Skip: the added selector always applies
    assert verdict(p.filter(state, the_pod, n)) == want
    batch_state, nodes = snapshot_backed([n])
    p.pre_filter(batch_state, the_pod, nodes)
    assert verdict(failing(p.filter_nodes(batch_state, the_pod, nodes), nodes).get("node2", Status())) == want


AFFINITY1 = {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 2, "preference": expr("foo", "In", "bar")}]}
LABEL1, LABEL2 = {"foo": "bar"}, {"key": "value"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}

SCORE_ROWS = [
    ("added affinity", None, AFFINITY1, [("node1", LABEL1), ("node2", LABEL2)], [100, 0]),
    ("added affinity and pod has default affinity", AFFINITY1,
     {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 3, "preference": expr("key", "In", "value")}]},
     [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL5)], [40, 60, 100]),
]


@pytest.mark.parametrize("name, pod_affinity, added, nodes, want", SCORE_ROWS, ids=[r[0] for r in SCORE_ROWS])
def test_score_with_added_affinity(name, pod_affinity, added, nodes, want):
    spec = {"affinity": {"nodeAffinity": pod_affinity}} if pod_affinity else {}
    the_pod = pod_from_dict({"metadata": {"name": "p"}, "spec": spec})
    node_objs = [node(n, labels) for n, labels in nodes]
    p = plugin(added)
    state, node_set = snapshot_backed(node_objs)
    assert p.pre_score(state, the_pod, node_set).code is Code.SUCCESS
    scores = [NodeScore(n.name, p.score(state, the_pod, n)[0]) for n in node_objs]
    p.normalize_score(state, the_pod, scores)
    assert [s.score for s in scores] == want
    raw = p.score_nodes(state, the_pod, node_set)
    assert list(p.normalize_values(state, the_pod, node_set, raw)) == want


def test_pre_score_skips_only_without_any_preferred_terms():
    the_pod = pod_from_dict({"metadata": {"name": "p"}})
    assert plugin(None).pre_score(CycleState(), the_pod, None).code is Code.SKIP
    assert plugin(AFFINITY1).pre_score(CycleState(), the_pod, None).code is Code.SUCCESS


@pytest.mark.parametrize(
    "args, fragment",
    [
        ({"addedAffinity": required(expr("bad key", "In", "x"))}, "addedAffinity"),
        ({"addedAffinity": required()}, "must have at least one node selector term"),
        ({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": expr("a", "In", "b")}]}}, "weight: must be in the range 1-100"),
        ({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}}, "expected an object"),
        ({"unknown": 1}, "unknown field(s) unknown"),
    ],
)
def test_bad_added_affinity_is_rejected_at_start_up(tmp_path, args, fragment):
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"pluginConfig": [{"name": "NodeAffinity", "args": args}]}))
    with pytest.raises(ConfigError) as info:
        build_config({}, env={}, config_file=str(path))
    assert fragment in str(info.value)
    assert "pluginConfig[0].args" in str(info.value)


def test_taint_toleration_takes_no_arguments(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("pluginConfig:\n- name: TaintToleration\n  args: {foo: 1}\n")
    with pytest.raises(ConfigError, match="takes no arguments"):
        build_config({}, env={}, config_file=str(path))
