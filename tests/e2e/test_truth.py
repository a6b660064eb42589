"""The truth checker is only as good as its rules: on random clusters it must admit
exactly the nodes the extender's reference engine (`fast=False`, no caches) admits. The
two share no code, so a disagreement is a bug in one of them. No kube-scheduler needed."""

from __future__ import annotations

import random

import orjson
import pytest

from extender.api.wire import decode_args
from extender.state import ClusterSnapshot, StaticSource
from perf.engine import default_config, new_extender
from testing.apiserver import Change
from testing.harness import CORDON_TAINT, HOST, PREFIX, ZONE, node, pod, spread
from testing.truth import ClusterView, Violation, key_of, replay
from testing.wiretap import KEPT_ANSWER, Decision, WireTap

SLA, KERNEL = "example.com/sla", "example.com/kernel"
CEL = "taint.key == 'example.com/sla' && int(taint.value) > 900"
ORACLES = {CEL: lambda key, value, effect: key == SLA and int(value) > 900}


def random_taints(rng: random.Random) -> list[dict]:
    choices = [
        [], [], [],
        [{"key": SLA, "value": str(rng.choice([800, 900, 950])), "effect": rng.choice(["NoSchedule", "NoExecute"])}],
        [{"key": KERNEL, "value": rng.choice(["5.10.0", "6.8.0"]), "effect": "NoSchedule"}],
        [{"key": "dedicated", "value": "gpu", "effect": rng.choice(["NoSchedule", "PreferNoSchedule"])}],
    ]
    return rng.choice(choices)


def random_tolerations(rng: random.Random) -> tuple[list[dict], dict]:
    spec = rng.choice([[], [{"key": SLA, "operator": rng.choice(["Gt", "Lt"]), "value": "850"}],
                       [{"key": SLA, "operator": "Exists"}], [{"key": "dedicated", "operator": "Equal",
                                                              "value": "gpu", "effect": "NoSchedule"}]])
    ann = rng.choice([{}, {f"{PREFIX}/tolerations": [{"key": KERNEL, "operator": "SemverGt", "value": "6.0.0"}]},
                      {f"{PREFIX}/tolerations": [{"expression": CEL}]},
                      {f"{PREFIX}/tolerations": [{"key": SLA, "operator": "Exists"}]}])
    return spec, ann


def random_case(rng: random.Random) -> tuple[list[dict], dict]:
    zones = rng.choice(["ab", "abc", "abcd"])
    nodes = []
    for i in range(rng.randint(3, 9)):
        labels = {"disk": rng.choice(["ssd", "hdd"])}
        n = node(f"n{i}", rng.choice(zones), taints=random_taints(rng), labels=labels,
                 unschedulable=rng.random() < 0.1)
        if rng.random() < 0.1:
            del n["metadata"]["labels"][ZONE]
        nodes.append(n)
    labels = {"app": "web"}
    bound = [pod(f"p{j}", labels if rng.random() < 0.8 else {"app": "other"},
                 node_name=rng.choice(nodes)["metadata"]["name"]) for j in range(rng.randint(0, 12))]
    constraints = []
    for key in rng.sample([ZONE, HOST], rng.randint(0, 2)):
        fields = {}
        if rng.random() < 0.5:
            fields["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3:
            fields["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3:
            fields["minDomains"] = rng.randint(1, 5)
        constraints.append(spread(key, labels, max_skew=rng.randint(1, 2), **fields))
    tols, ann = random_tolerations(rng)
    selector = {"disk": "ssd"} if rng.random() < 0.3 else None
    pending = pod("pending", labels, spread=constraints, tolerations=tols, annotations=ann, node_selector=selector)
    pending["metadata"]["uid"] = "uid-pending"
    return [*nodes, *bound], pending


def reference_feasible(objects: list[dict], pending: dict) -> set[str]:
    engine = new_extender(default_config(), StaticSource(ClusterSnapshot.from_objects(objects)), fast=False)
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    answer = orjson.loads(engine.filter(decode_args(orjson.dumps({"Pod": pending, "Nodes": None, "NodeNames": names}))))
    assert not answer.get("Error"), answer
    return set(answer.get("NodeNames") or [])


def truth_feasible(objects: list[dict], pending: dict) -> set[str]:
    view = ClusterView(PREFIX, ORACLES)
    for o in objects:
        if o["kind"] == "Node":
            view.put_node(o)
        else:
            view.put_pod(o, key_of(o))
    return {name for name in view.nodes if not view.violations(pending, name)}


@pytest.mark.parametrize("seed", range(300))
def test_truth_admits_the_nodes_the_reference_engine_admits(seed):
    objects, pending = random_case(random.Random(seed))
    assert truth_feasible(objects, pending) == reference_feasible(objects, pending)


def test_a_violation_names_its_rule():
    v = Violation("default/p", "n1", "TaintToleration", "untolerated a=b:NoSchedule", raced=True)
    assert str(v) == "default/p on n1: TaintToleration: untolerated a=b:NoSchedule (raced a node change)"


class Journal:
    """What `replay` reads of an API server: its journal."""

    def __init__(self, changes: list[Change]) -> None:
        self.journal = changes


def with_rv(obj: dict, rv: int) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


def cordon_mid_burst_journal() -> list[Change]:
    """Nodes a0 (zone a, 2 pods), b0 (zone b, 1 pod), b1 (zone b, 3 pods); b1 cordoned
    at rv 11 (with the lifecycle controller's taint); pod x, spread over zones with
    nodeTaintsPolicy Honor, bound to b0 at rv 13. In the order a real API server's
    journal can hold it: the pod stream's rv 12 delivered before the node stream's 11."""
    labels = {"app": "web"}
    a0, b0, b1 = node("a0", "a"), node("b0", "b"), node("b1", "b")
    bound = [pod(f"on-{where}-{i}", labels, node_name=where)
             for where, count in (("a0", 2), ("b0", 1), ("b1", 3)) for i in range(count)]
    x = pod("x", labels, spread=[spread(ZONE, labels, nodeTaintsPolicy="Honor")])
    cordoned = {**b1, "spec": {"unschedulable": True, "taints": [CORDON_TAINT]}}
    other = pod("elsewhere", {"app": "other"}, namespace="other")
    setup = [Change(rv, 0.0, "nodes" if o["kind"] == "Node" else "pods", "ADDED", with_rv(o, rv))
             for rv, o in enumerate([a0, b0, b1, *bound, x], start=1)]  # rvs 1..10
    return [*setup,
            Change(12, 1.0, "pods", "ADDED", with_rv(other, 12)),  # the pod stream ahead
            Change(11, 1.0, "nodes", "MODIFIED", with_rv(cordoned, 11)),
            Change(13, 1.2, "pods", "MODIFIED", with_rv({**x, "spec": {**x["spec"], "nodeName": "b0"}}, 13))]


def test_a_state_version_is_read_in_resource_version_order_whatever_order_the_journal_holds():
    """A real API server's journal is recorded from one watch per resource, appended as
    each thread delivers (`testing.realapi`): a node write can follow pod writes of
    later versions. The extender's verdict at Node=11 includes the cordon written at 11
    (its taint takes b1 out of zone b under nodeTaintsPolicy Honor), so `x` on b0 is
    within maxSkew (b 1, a 2); read as journal positions, Node=11 ended before the
    cordon (bisected among the pods' later versions) and the judge counted b1: b 4."""
    journal = cordon_mid_burst_journal()
    decisions = {("default", "x"): [Decision(1.1, {"Node": 11, "Pod": 12})]}
    binds = {("default", "x"): [(1.15, "b0")]}
    report = replay(Journal(journal), decisions=decisions, binds=binds)
    assert report.binds == 1 and len(report.checked) == 1
    assert report.violations == [], [str(v) for v in report.violations]
    # a verdict whose version lacks the cordon is still judged without it
    early = {("default", "x"): [Decision(1.1, {"Node": 10, "Pod": 12})]}
    late = replay(Journal(journal), decisions=early, binds=binds)
    (violation,) = late.violations
    assert violation.rule == "PodTopologySpread" and "domain b has 4, minimum 2" in violation.detail
    # what the judge saw, for the failure's message (`E2ECluster.explain`)
    judged = late.judged[("default", "x")]
    assert judged.versions == {"Node": 10, "Pod": 12} and judged.node == "b0"
    assert judged.domains == [f"{ZONE}: {{'a': 2, 'b': 4}}"]
    assert [w.split(" at ")[0] for w in judged.node_writes] == ["rv 1 ADDED a0", "rv 2 ADDED b0", "rv 3 ADDED b1",
                                                                 "rv 11 MODIFIED b1"]
    assert [w.endswith("not applied") for w in judged.node_writes] == [False, False, False, True]
    assert judged.assumed == []  # x itself is the only placement


def test_a_placement_is_judged_at_the_filter_call_that_arrived_last_before_its_bind():
    """A filter kube-scheduler stopped waiting for (httpTimeout 5 s, while the extender
    waited up to `--inflight-wait` 10 s for a pod in flight) is answered after the
    retry that decided the pod, so the wiretap lists it last. The decision is the
    retry's (kube-scheduler asks again only once a cycle ended): judged at Node=11 with
    the cordon, x on b0 is right; at the stale call's Node=10 it would not be."""
    journal = cordon_mid_burst_journal()
    binds = {("default", "x"): [(1.15, "b0")]}
    answered_in_order = [Decision(1.12, {"Node": 11, "Pod": 12}),  # the retry, answered at once
                         Decision(1.05, {"Node": 10, "Pod": 12})]  # the call given up on, answered last
    report = replay(Journal(journal), decisions={("default", "x"): answered_in_order}, binds=binds)
    assert [c.versions for c in report.checked] == [{"Node": 11, "Pod": 12}]
    assert report.violations == [], [str(v) for v in report.violations]


def test_a_wrong_no_node_fits_is_a_violation_judged_at_its_state():
    """A filter answered "no node fits" (no feasible name, no Error) is judged like a
    placement, at its state version: for x at Node=11 (b1 cordoned), b0 admits it
    (zone b 1, a 2: within maxSkew), so the refusal is a `NoNodeFits` violation; asked
    only about b1 (cordoned) it is right. A frozen or lagging watch must cost time,
    never a wrong "no node fits"."""
    journal = cordon_mid_burst_journal()[:-1]  # x never bound
    x = ("default", "x")
    wrong = replay(Journal(journal), refusals={x: [(Decision(1.1, {"Node": 11, "Pod": 12}), ("a0", "b0", "b1"))]})
    (violation,) = wrong.violations
    assert (violation.rule, violation.node) == ("NoNodeFits", "b0"), str(violation)
    assert wrong.judged[x].versions == {"Node": 11, "Pod": 12}
    right = replay(Journal(journal), refusals={x: [(Decision(1.1, {"Node": 11, "Pod": 12}), ("b1",))]})
    assert right.violations == [], [str(v) for v in right.violations]
    unknown = replay(Journal(journal), refusals={x: [(Decision(1.1, {"Node": 11, "Pod": 12}), None)]})
    assert [v.rule for v in unknown.violations] == ["NoNodeFits"]  # names unknown: every node of the state


def test_the_wiretap_keeps_small_answers_and_tells_a_pods_story():
    """A failure's explanation reads the wiretap: each call's feasible names or scores
    (kept while small), and the pods answered before a moment and bound after it."""
    tap = WireTap(upstream_port=1).start()
    try:
        args = orjson.dumps({"Pod": pod("a"), "NodeNames": ["n1", "n2"]})
        tap.record("filter", args, 10.0, 0.01, "Node=5,Pod=7", answer=orjson.dumps(
            {"NodeNames": ["n2"], "FailedNodes": {"n1": "x"}, "Error": ""}))
        tap.record("prioritize", args, 10.02, 0.01, "Node=5,Pod=7",
                   answer=orjson.dumps([{"Host": "n2", "Score": 7}]))
        tap.record("filter", orjson.dumps({"Pod": pod("b"), "NodeNames": ["n1"]}), 10.05, 0.01, "Node=5,Pod=8",
                   answer=orjson.dumps({"NodeNames": [], "Error": ""}))
        tap.record("bind", orjson.dumps({"PodName": "a", "PodNamespace": "default", "Node": "n2"}), 10.2, 0.01)
        big = orjson.dumps({"NodeNames": [f"n{i}" for i in range(KEPT_ANSWER + 1)], "Error": ""})
        tap.record("filter", orjson.dumps({"Pod": pod("c")}), 10.3, 0.01, answer=big)
        first, scores, nothing, bound, unkept = tap.calls
        assert (first.answer, scores.answer, nothing.answer, unkept.answer) == (("n2",), (("n2", 7),), (), None)
        assert tap.refusals() == {("default", "b"): [(Decision(10.05, {"Node": 5, "Pod": 8}), ("n1",))]}
        assert first.versions == {"Node": 5, "Pod": 7} and bound.node == "n2"
        assert tap.story(("default", "a"), since=10.0) == [
            "filter at +0.000s (10 ms, 2 nodes) state {'Node': 5, 'Pod': 7} -> ['n2']",
            "prioritize at +0.020s (10 ms, 2 nodes) state {'Node': 5, 'Pod': 7} -> [('n2', 7)]",
            "bind at +0.200s (10 ms, 1 nodes) state None n2",
        ]
        # answered out of arrival order (a call kube-scheduler gave up on): listed as they arrived
        tap.record("filter", args, 9.0, 1.5, "Node=4,Pod=6", answer=orjson.dumps({"NodeNames": ["n1"]}))
        assert [d.at for d in tap.decisions()[("default", "a")]] == [9.0, 10.0]
        assert tap.decision_times()[("default", "a")] == [9.0, 10.0]
        # at 10.1 pod a was answered and not bound yet; b had no feasible node
        assert tap.in_flight(10.1) == [(("default", "a"), 10.0, 10.2, "n2")]
        assert tap.in_flight(10.25) == []
    finally:
        tap.stop()
