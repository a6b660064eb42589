"""Preemption through the simulator: victims are evicted only where the preemptor then
schedules (kube-scheduler's DefaultPreemption asks our `preempt` verb, which drops the
candidates our filters would still reject once the victims are gone).

Nodes have 1 CPU; "filler" pods (priority 0) take all of it, so NodeResourcesFit
rejects every node (Unschedulable: a preemption candidate) before our filter runs.
"""

from __future__ import annotations

import orjson
from harness import ZONE, cluster, hard_spread, node, pod

WEB = {"app": "web"}
TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}


def filler(name: str, on: str, priority: int = 0, labels=None, cpu: str = "1") -> dict:
    return pod(name, labels or {"app": "filler"}, cpu=cpu, priority=priority, node_name=on)


def preemptor(**kw) -> dict:
    return pod("preemptor", kw.pop("labels", WEB), cpu="500m", priority=1000, **kw)


def outcome(api, sched):
    stats = sched.run(timeout=30)
    assert not sched.errors, sched.errors
    return stats, api.get("pods", "preemptor", "default")["spec"].get("nodeName", "")


def test_tainted_full_node_is_not_preempted(tmp_path):
    objects = [node("t1", "a", cpu="1", taints=[TAINT]), filler("f1", "t1")]
    with cluster(objects, tmp_path) as (api, _, sched):
        sched.submit([preemptor()])
        stats, bound = outcome(api, sched)
        assert bound == ""
        assert stats.evicted == [] and stats.preemptions == 0
        assert api.get("pods", "f1", "default") is not None


def test_tainted_full_node_is_skipped_for_an_untainted_one(tmp_path):
    objects = [node("t1", "a", cpu="1", taints=[TAINT]), filler("f1", "t1"),
               node("u1", "b", cpu="1"), filler("f2", "u1")]
    with cluster(objects, tmp_path) as (api, _, sched):
        sched.submit([preemptor()])
        stats, bound = outcome(api, sched)
        assert stats.evicted == ["default/f2@u1"]
        assert bound == "u1"
        assert api.get("pods", "f1", "default") is not None


def test_affinity_excluded_full_node_is_not_preempted(tmp_path):
    objects = [node("hdd1", "a", cpu="1", labels={"disk": "hdd"}), filler("f1", "hdd1"),
               node("ssd1", "b", cpu="1", labels={"disk": "ssd"}), filler("f2", "ssd1")]
    with cluster(objects, tmp_path) as (api, _, sched):
        sched.submit([preemptor(node_selector={"disk": "ssd"})])
        stats, bound = outcome(api, sched)
        assert stats.evicted == ["default/f2@ssd1"]
        assert bound == "ssd1"


def test_skew_that_eviction_cannot_fix_evicts_nothing(tmp_path):
    """a1 holds a high-priority web pod and a low-priority filler; b1 is full of
    high-priority pods. Evicting the filler frees room on a1, but a web pod there
    would make zone a 2 vs zone b 0: the extender drops a1, nothing is evicted."""
    objects = [node("a1", "a", cpu="1"), filler("web-hi", "a1", priority=2000, labels=WEB, cpu="500m"),
               filler("f-a1", "a1", cpu="500m"),
               node("b1", "b", cpu="1"), filler("hi-b1", "b1", priority=2000)]
    with cluster(objects, tmp_path) as (api, _, sched):
        sched.submit([preemptor(spread=[hard_spread(ZONE, WEB)])])
        stats, bound = outcome(api, sched)
        assert bound == ""
        assert stats.evicted == []
        assert api.get("pods", "f-a1", "default") is not None


def test_skew_that_eviction_fixes_is_preempted(tmp_path):
    """a1's only pod is a low-priority web pod: with it, a1 fails the spread (zone a
    1+1 vs zone b 0); without it (the victim) a1 is fine, so a1 is kept, the victim is
    evicted and the preemptor lands on a1."""
    objects = [node("a1", "a", cpu="1"), filler("web-lo", "a1", labels=WEB),
               node("b1", "b", cpu="1"), filler("hi-b1", "b1", priority=2000)]
    with cluster(objects, tmp_path) as (api, served, sched):
        the_pod = preemptor(spread=[hard_spread(ZONE, WEB)])
        # with the victim still there, our filter rejects a1 for the skew (nothing fits
        # and a1 hosts a lower-priority pod: answered unresolvable, extender.preemption;
        # the scheduler's own cycle never asks, NodeResourcesFit rejects a1 first)
        before = sched.ext.call("filter", {"Pod": the_pod, "NodeNames": ["a1"]})
        assert before["FailedAndUnresolvableNodes"] == {"a1": "node(s) didn't match pod topology spread constraints"}
        sched.submit([the_pod])
        stats, bound = outcome(api, sched)
        assert stats.evicted == ["default/web-lo@a1"]
        assert bound == "a1"


def test_no_execute_tolerated_only_by_annotation_stays_pending(tmp_path):
    """The kubelet would reject the pod on a NoExecute node it tolerates only through
    the annotation channel: the scheduler must not bind it there."""
    taint = {"key": "maintenance", "value": "soon", "effect": "NoExecute"}
    objects = [node("ne1", "a", taints=[taint])]
    annotated = preemptor()
    annotated["metadata"]["annotations"] = {
        "scheduling-extender.io/tolerations": orjson.dumps([{"key": "maintenance", "operator": "Exists"}]).decode()}
    spec_tolerated = pod("spec-tolerated", {"app": "x"}, tolerations=[{"key": "maintenance", "operator": "Exists"}])
    with cluster(objects, tmp_path, max_attempts=2) as (api, _, sched):
        sched.submit([annotated, spec_tolerated])
        sched.run(timeout=30)
        assert api.get("pods", "preemptor", "default")["spec"].get("nodeName", "") == ""
        assert api.get("pods", "spec-tolerated", "default")["spec"].get("nodeName") == "ne1"
