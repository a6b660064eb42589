"""The explain summary: nodes grouped by the reason kube-scheduler counts, then by the
extender's detail; the trimmed view; explain runs not counted in scheduler_* metrics."""

from __future__ import annotations

import orjson
import pytest
from conftest import example_pod, make_extender
from kubectl_extender.render import render_summary

from extender import explain as explain_module
from extender import metrics
from extender.config import Config
from extender.explain import (
    MAX_GROUPS,
    explain,
    explain_pod,
    key_details,
    scheduler_message,
    trim,
)
from extender.ratelimit import TokenBucket

SLA = "node.example.com/sla"


def test_summary_counts_what_the_wire_answer_says(example_extender):
    result = explain_pod(example_extender, example_pod("spread-spot"), None)
    summary, wire = result["summary"], result["filter"]
    failed = {**wire["FailedNodes"], **wire["FailedAndUnresolvableNodes"]}
    assert summary["candidates"] == len(result["nodes"]) == 10
    assert summary["feasible"] == len(wire["NodeNames"]) == 2
    by_reason = {e["reason"]: e for e in summary["reasons"]}
    for reason, entry in by_reason.items():
        assert entry["nodes"] == sum(1 for r in failed.values() if r == reason)
        assert entry["nodes"] == sum(g["nodes"] for g in entry["groups"])
        named = [n for g in entry["groups"] for n in g["examples"]]
        assert all(failed[n] == reason for n in named)
    assert by_reason["node(s) had untolerated taint(s)"]["plugin"] == "TaintToleration"
    spread = by_reason["node(s) didn't match pod topology spread constraints"]
    assert spread["code"] == "Unschedulable" and spread["plugin"] == "PodTopologySpread"
    assert "skew 3 > maxSkew 1" in spread["groups"][0]["details"][0]
    # the scheduler's FitError text, with the reasons sorted as strings
    assert summary["message"] == ("2/10 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't "
                                  "match pod topology spread constraints, 5 node(s) had untolerated taint(s).")
    assert [t["node"] for t in summary["top"]] == ["spot-b1", "od-b1"]  # best score first


def test_scheduler_message_matches_fit_error_format():
    # Go sorts the "count reason" strings, so "12 ..." comes before "3 ..."
    assert scheduler_message(0, 15, {"b reason": 3, "a reason": 12}) == \
        "0/15 nodes are available: 12 a reason, 3 b reason."
    assert scheduler_message(4, 4, {}) == "4/4 nodes are available"


def test_toleration_details_name_the_toleration_and_the_comparison(example_extender):
    result = explain_pod(example_extender, example_pod("sla-gt"), None)
    groups = {tuple(g["examples"]): g for e in result["summary"]["reasons"] for g in e["groups"]}
    spot_c1 = groups[("spot-c1",)]["details"]
    assert spot_c1[0] == f"taint {SLA}=500:NoSchedule is not tolerated"
    assert spot_c1[1] == f"toleration[0] {SLA} Gt '750' (NoSchedule): does not tolerate: " \
                         "taint value 500 is not greater than 750"
    # unrelated tolerations are noise in tables and events, kept in the JSON
    od_c1 = groups[("od-c1",)]["details"]
    assert od_c1[1].endswith(": key does not match")
    assert key_details(od_c1) == [od_c1[0]]
    assert key_details(spot_c1) == spot_c1
    # the plugin's tables filter the report's details as the server's events do (the
    # filter is written in both: `extender serve` does not import the plugin)
    from kubectl_extender import render

    assert render._UNRELATED.pattern == explain_module._UNRELATED.pattern
    unrelated_only = [d for d in od_c1 if d.endswith(": key does not match")]
    for details in (od_c1, spot_c1, unrelated_only, []):
        assert render.key_details(details) == key_details(details)
    assert key_details(unrelated_only) == unrelated_only != []


def test_annotation_tolerations_are_named_by_their_annotation(example_extender):
    reasons = explain_pod(example_extender, example_pod("annotation-tolerations"), ["spot-c1"])["nodes"]["spot-c1"]
    lines = reasons["plugins"]["TaintToleration"]["reasons"]
    assert any(line.startswith("scheduling-extender.io/tolerations[0] ") and "not greater than 750" in line
               for line in lines)
    assert any(line.startswith("scheduling-extender.io/tolerations[1] expression") for line in lines)


def _big_cluster(n: int) -> list[dict]:
    objects = []
    for i in range(n):
        taints = [{"key": SLA, "value": str(i % 1000), "effect": "NoSchedule"}] if i % 5 else []
        labels = {"kubernetes.io/hostname": f"n{i}", "topology.kubernetes.io/zone": f"z{i % 3}"}
        objects.append({"kind": "Node", "metadata": {"name": f"n{i:04d}", "labels": labels},
                        "spec": {"taints": taints, "unschedulable": i % 50 == 0}})
    return objects


def test_a_5000_node_answer_stays_small_and_readable():
    extender = make_extender(_big_cluster(5000))
    pod = {"metadata": {"name": "p", "namespace": "default"},
           "spec": {"tolerations": [{"key": SLA, "operator": "Gt", "value": "900", "effect": "NoSchedule"}]}}
    result = explain_pod(extender, pod, None)
    summary = result["summary"]
    assert summary["candidates"] == 5000
    taints = next(e for e in summary["reasons"] if e["reason"] == "node(s) had untolerated taint(s)")
    assert len(taints["groups"]) == MAX_GROUPS  # ~900 distinct taint values: the rest counted
    assert taints["moreGroups"]["nodes"] + sum(g["nodes"] for g in taints["groups"]) == taints["nodes"]
    assert all(len(g["examples"]) <= 3 for g in taints["groups"])
    full = orjson.dumps(result)
    small = orjson.dumps(trim(result))
    assert len(full) > 1_000_000  # every node, every plugin
    assert len(small) < 32_000, len(small)  # ~40 example nodes with every plugin's verdict
    cut = trim(result)
    assert cut["omittedNodes"] == 5000 - len(cut["nodes"])
    # the trimmed view keeps the contract's shape, and every value in it is true
    assert list(cut["filter"]) == list(result["filter"])
    for name, reason in cut["filter"]["FailedAndUnresolvableNodes"].items():
        assert result["filter"]["FailedAndUnresolvableNodes"][name] == reason
        assert cut["nodes"][name] == result["nodes"][name]
    assert {h["Host"] for h in cut["prioritize"]} == set(cut["filter"]["NodeNames"])
    table = render_summary({"results": [cut]})
    assert "5000 nodes are available" in table and len(table.splitlines()) < 80


def test_explain_is_not_counted_as_scheduler_work(example_extender):
    def evaluations() -> float:
        return sum(s.value for m in metrics.PLUGIN_EVALUATION_TOTAL.collect() for s in m.samples
                   if s.name.endswith("_total"))

    before = evaluations()
    explain(example_extender, [example_pod("sla-gt"), example_pod("spread-spot")], None)
    assert evaluations() == before
    # the verbs still count (the quiet context ends with the explanation)
    from extender.api.wire import decode_args

    example_extender.filter(decode_args(orjson.dumps({"Pod": example_pod("plain"),
                                                            "NodeNames": ["od-a1", "spot-c1"]})))
    assert evaluations() > before


def test_prefilter_errors_are_summarized_as_errors():
    extender = make_extender([], Config())
    pod = example_pod("plain")
    pod["metadata"]["annotations"] = {"scheduling-extender.io/tolerations": "[not json"}
    result = explain_pod(extender, pod, ["ghost"])
    assert result["summary"]["candidates"] == 1
    (entry,) = result["summary"]["reasons"]
    assert "not seen yet" in entry["reason"] and entry["plugin"] == "ClusterState"


def test_token_bucket():
    now = [0.0]
    bucket = TokenBucket(2.0, 3, clock=lambda: now[0])
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.try_take() == pytest.approx(0.5)  # one token every 0.5 s
    now[0] += 0.5
    assert bucket.tokens() == pytest.approx(1.0)
    assert bucket.try_take() == 0.0
    now[0] += 100
    assert bucket.tokens() == 3.0  # never above burst
    with pytest.raises(ValueError):
        TokenBucket(0, 1)


def test_a_bound_pod_is_explained_as_if_it_were_not_there(example_objects):
    """Explaining a running pod: it must not count itself (spread), exactly as if the
    cluster had no pod of that name; the node layer is reused."""
    (raw,) = [o for o in example_objects if o["kind"] == "Pod" and o["metadata"]["name"] == "web-7d9f-0"]
    pod = {**raw, "spec": {**raw["spec"], "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}}]}}
    with_it = make_extender(example_objects)
    without = make_extender([o for o in example_objects if o is not raw])
    assert explain_pod(with_it, pod, None) == explain_pod(without, pod, None)
    from extender.explain import snapshot_without

    snapshot = with_it.source.snapshot()
    smaller = snapshot_without(snapshot, with_it.parse_pod(pod))
    assert smaller.nodes is snapshot.nodes and smaller.pod_layer.count == snapshot.pod_layer.count - 1
    assert snapshot_without(snapshot, with_it.parse_pod(example_pod("plain"))) is snapshot


def test_the_summary_view_is_built_directly(example_extender):
    """`every_node=False` builds verdicts for the example nodes only; the same answer
    as cutting down the full one."""
    for name in ("sla-gt", "spread-spot", "plain"):
        full = explain_pod(example_extender, example_pod(name), None)
        assert explain_pod(example_extender, example_pod(name), None, every_node=False) == trim(full)
