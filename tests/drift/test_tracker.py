"""The drift tracker: what it reports for each toleration kind, affinity and volume, with
which severity and words, and that it re-evaluates only what a change can affect."""

from __future__ import annotations

import pytest
from objects import (
    AFFINITY,
    KERNEL,
    SLA,
    TOLERATIONS,
    Cluster,
    expr,
    node,
    pod,
    pv,
    pvc,
    required,
    selector,
    taint,
)

from extender import metrics
from extender.config import Config
from extender.drift.evaluate import ByProfile
from extender.drift.tracker import gauge_labels

UNTOLERATED = "node(s) had untolerated taint(s)"
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
VOLUME_REASON = "node(s) had volume node affinity conflict"
GT_750 = {"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}
SEMVER_AFFINITY = required(expr(KERNEL, "SemverGt", "5.10.0"))
CEL = [{"expression": f"taint.key == '{SLA}' && int(taint.value) > 800"}]


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(objects=[
        node("n1", [taint(SLA, "900")], **{KERNEL: "5.15.0"}),
        node("n2", [taint(SLA, "900")], **{KERNEL: "5.15.0"}),
        pod("gt", "n1", tolerations=[GT_750]),
        pod("cel", "n2", annotations={TOLERATIONS: CEL}),
        pod("semver-tol", "n2", annotations={TOLERATIONS: [
            {"key": SLA, "operator": "SemverGt", "value": "800.0.0", "effect": "NoSchedule"}]}),
        pod("affinity", "n1", tolerations=[{"operator": "Exists"}], annotations={AFFINITY: SEMVER_AFFINITY}),
        pod("plain", "n2", tolerations=[{"operator": "Exists"}]),
    ])


def test_nothing_drifts_while_every_node_still_fits(cluster):
    assert cluster.settle() == {}
    assert cluster.tracker.tracked == 5


def test_a_lowered_sla_drifts_exactly_the_pods_that_no_longer_tolerate_it(cluster):
    cluster.settle()
    cluster.put(node("n2", [taint(SLA, "700")], **{KERNEL: "5.15.0"}))
    report = cluster.settle()
    assert set(report) == {("default", "cel"), ("default", "semver-tol")}  # gt and plain are on n1 / tolerate all
    (details,) = report[("default", "cel")].values()
    assert details == ("taint example.com/sla=700:NoSchedule is not tolerated",
                       f"{TOLERATIONS}[0] expression \"taint.key == '{SLA}' && int(taint.value) > 800\": "
                       "expression returned false")
    assert list(report[("default", "semver-tol")]) == [("TaintToleration", UNTOLERATED, "required")]
    cluster.put(node("n1", [taint(SLA, "500")], **{KERNEL: "5.15.0"}))
    report = cluster.settle()
    assert report[("default", "gt")][("TaintToleration", UNTOLERATED, "required")] == (
        "taint example.com/sla=500:NoSchedule is not tolerated",
        "toleration[0] example.com/sla Gt '750' (NoSchedule): does not tolerate: taint value 500 is not greater than 750")
    cluster.put(node("n1", [taint(SLA, "900")], **{KERNEL: "5.15.0"}))
    cluster.put(node("n2", [taint(SLA, "900")], **{KERNEL: "5.15.0"}))
    assert cluster.settle() == {}


def test_a_relabelled_kernel_drifts_the_semver_affinity(cluster):
    cluster.settle()
    cluster.put(node("n1", [taint(SLA, "900")], **{KERNEL: "5.4.0"}))
    report = cluster.settle()
    assert report == {("default", "affinity"): {("NodeAffinity", AFFINITY_REASON, "required"): (
        f"metadata.annotations[{AFFINITY}].requiredDuringSchedulingIgnoredDuringExecution: "
        f'{KERNEL} SemverGt [5.10.0]: the node\'s value is "5.4.0"',)}}
    cluster.put(node("n1", [taint(SLA, "900")]))  # the label gone
    (details,) = cluster.settle()[("default", "affinity")].values()
    assert details[0].endswith("the node has no such label")
    cluster.put(node("n1", [taint(SLA, "900")], **{KERNEL: "6.1.0"}))
    assert cluster.settle() == {}


def test_node_selector_and_spec_affinity_are_named_where_the_pod_says_them():
    cluster = Cluster(objects=[
        node("n1", disk="hdd", gen="3"),
        pod("both", "n1", node_selector={"disk": "ssd"}, affinity=required(expr("gen", "Gt", "4"))),
    ])
    (details,) = cluster.settle()[("default", "both")].values()
    assert details == ('nodeSelector disk=ssd: the node\'s value is "hdd"',
                       "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: "
                       'gen Gt [4]: the node\'s value is "3"')


def test_the_severities_noexecute_evicts_prefer_no_schedule_is_preferred():
    cluster = Cluster(objects=[
        node("n1", [taint("soft", "x", "PreferNoSchedule"), taint("hard", "x", "NoExecute")]),
        pod("p", "n1"),
        # a NoExecute taint counts as tolerated only by what the kubelet sees (spec, API operators)
        pod("annotated", "n1", annotations={TOLERATIONS: [{"key": "hard", "operator": "Exists"}]}),
        pod("spec", "n1", tolerations=[{"key": "hard", "operator": "Exists"},
                                       {"key": "soft", "operator": "Exists"}]),
    ])
    report = cluster.settle()
    assert set(report[("default", "p")]) == {("TaintToleration", UNTOLERATED, "evicting"),
                                             ("TaintToleration", UNTOLERATED, "preferred")}
    evicting = report[("default", "annotated")][("TaintToleration", UNTOLERATED, "evicting")]
    assert "the kubelet checks NoExecute taints against spec.tolerations only" in evicting[1]
    assert ("default", "spec") not in report


def test_volumes_drift_when_their_annotation_changes_and_only_their_pods_are_evaluated():
    fast = selector(expr(KERNEL, "SemverGt", "5.10.0"))
    cluster = Cluster(objects=[
        node("n1", **{KERNEL: "5.15.0"}), node("n2", **{KERNEL: "5.15.0"}),
        pv("pv-a", annotation={"required": fast}, claim=("default", "data-a")), pvc("data-a", "pv-a"),
        pv("pv-b", claim=("default", "data-b")), pvc("data-b", "pv-b"),
        pod("db-a", "n1", claims=("data-a",)), pod("db-b", "n1", claims=("data-b",)), pod("other", "n2"),
    ])
    assert cluster.settle() == {}
    calls = count_evaluations(cluster)
    cluster.put(pv("pv-a", annotation={"required": selector(expr(KERNEL, "SemverGt", "6.0.0"))},
                   claim=("default", "data-a")))
    report = cluster.settle()
    assert calls == [("default", "db-a")]
    assert report == {("default", "db-a"): {("VolumeNodeAffinity", VOLUME_REASON, "required"): (
        'claim "data-a" is bound to PersistentVolume "pv-a": metadata.annotations[scheduling-extender.io/'
        f'node-affinity].required: {KERNEL} SemverGt [6.0.0]: the node\'s value is "5.15.0"',)}}
    cluster.delete("PersistentVolumeClaim", "data-a")  # not a question of the node: nothing said
    assert cluster.settle() == {}


def test_an_invalid_volume_annotation_is_counted_under_a_bounded_reason():
    cluster = Cluster(objects=[node("n1"), pv("pv-a", claim=("default", "data")), pvc("data", "pv-a"),
                               pod("db", "n1", claims=("data",))])
    cluster.settle()
    broken = pv("pv-a", claim=("default", "data"))
    broken["metadata"]["annotations"][AFFINITY] = "{not json"
    cluster.put(broken)
    ((plugin, reason, severity),) = cluster.settle()[("default", "db")]
    assert plugin == "VolumeNodeAffinity" and reason.startswith('PersistentVolume "pv-a" is invalid: ')
    assert cluster.tracker.counts() == {("VolumeNodeAffinity", "invalid PersistentVolume node affinity",
                                         "required"): 1}


def count_evaluations(cluster: Cluster) -> list:
    """Record which pods the tracker evaluates from now on (one call per distinct
    (node, shape, claims): pods are told apart here by their claims or node)."""
    calls: list = []
    evaluate = ByProfile.evaluate
    tracker = cluster.tracker
    pods = tracker._pods

    def spy(self, shape, node_, namespace, claims, volumes, name=""):
        for key, running in pods.items():
            if running.shape is shape and running.node == node_.name and running.claims == claims:
                calls.append(key)
        return evaluate(self, shape, node_, namespace, claims, volumes, name)

    tracker.evaluator.evaluate = spy.__get__(tracker.evaluator)
    return calls


def test_a_node_change_evaluates_only_the_pods_on_that_node():
    objects = [node(f"n{i}", [taint(SLA, "900")]) for i in range(4)]
    objects += [pod(f"p{i}-{j}", f"n{i}", tolerations=[GT_750] if j else [{"operator": "Exists"}])
                for i in range(4) for j in range(3)]
    cluster = Cluster(objects=objects)
    cluster.settle()
    calls = count_evaluations(cluster)
    cluster.put(node("n2", [taint(SLA, "100")]))
    report = cluster.settle()
    assert sorted(calls) == [("default", "p2-0"), ("default", "p2-1"), ("default", "p2-2")]  # one call, 2 shapes
    assert set(report) == {("default", "p2-1"), ("default", "p2-2")}
    calls.clear()
    cluster.put(node("n3", [taint(SLA, "900")], extra="label"))  # relabel: its pods, once per shape
    cluster.settle()
    assert sorted(calls) == [("default", "p3-0"), ("default", "p3-1"), ("default", "p3-2")]
    calls.clear()
    heartbeat = node("n3", [taint(SLA, "900")], extra="label")
    heartbeat["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    cluster.put(heartbeat)  # nothing a plugin reads: the store drops it, nothing is evaluated
    cluster.settle()
    assert calls == []


def test_a_pod_change_evaluates_that_pod_and_status_updates_evaluate_nothing(cluster):
    cluster.settle()
    calls = count_evaluations(cluster)
    raw = pod("gt", "n1", tolerations=[GT_750])
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    cluster.put(raw)
    cluster.settle()
    assert calls == []
    # the annotation channel can change on a running pod: that pod only
    cluster.put(pod("plain", "n2", tolerations=[{"operator": "Exists"}],
                    annotations={AFFINITY: required(expr(KERNEL, "SemverGt", "9.0.0"))}))
    report = cluster.settle()
    assert calls == [("default", "plain")]
    assert list(report) == [("default", "plain")]


def test_pods_that_do_not_run_are_not_reported(cluster):
    cluster.settle()
    cluster.put(node("n1", [taint(SLA, "100")], **{KERNEL: "5.15.0"}))
    assert ("default", "gt") in cluster.settle()
    cluster.put(pod("gt", "n1", tolerations=[GT_750], phase="Succeeded"))
    assert ("default", "gt") not in cluster.settle()
    cluster.put(pod("gt", "n1", tolerations=[GT_750], deleting=True))
    assert ("default", "gt") not in cluster.settle()
    cluster.put(pod("pending", "", tolerations=[GT_750]))
    cluster.put(pod("elsewhere", "n-unknown", tolerations=[GT_750]))  # its node not in the state
    report = cluster.settle()
    assert ("default", "pending") not in report and ("default", "elsewhere") not in report
    cluster.put(node("n-unknown", [taint(SLA, "100")]))  # the node arrives: its pods are evaluated
    assert ("default", "elsewhere") in cluster.settle()
    cluster.delete("Node", "n-unknown")
    assert ("default", "elsewhere") not in cluster.settle()
    cluster.delete("Pod", "elsewhere")
    assert cluster.tracker.tracked == 4  # gt is being deleted


def test_the_gauge_counts_pods_per_label_set_and_starts_at_zero():
    cluster = Cluster(objects=[node("n1"), pv("pv-1", claim=("default", "a")), pvc("a", "pv-1"),
                               pv("pv-2", claim=("default", "b")), pvc("b", "pv-2"),
                               pod("db", "n1", claims=("a", "b")), pod("web", "n1")])
    cluster.tracker.export_zeros()
    labels = ("VolumeNodeAffinity", VOLUME_REASON, "required")
    assert {lab for lab in gauge_labels()} >= {labels, ("TaintToleration", UNTOLERATED, "preferred")}
    assert metrics.read(metrics.PODS_VIOLATING, "extender_pods_violating", plugin=labels[0], reason=labels[1],
                        severity=labels[2]) == 0
    cluster.settle()
    bad = {"required": selector(expr("zone", "In", "b"))}
    cluster.put(pv("pv-1", annotation=bad, claim=("default", "a")))
    cluster.put(pv("pv-2", annotation=bad, claim=("default", "b")))
    cluster.settle()
    value = metrics.read(metrics.PODS_VIOLATING, "extender_pods_violating", plugin=labels[0], reason=labels[1],
                         severity=labels[2])
    assert value == 1  # one pod, two failing volumes
    assert len(cluster.report()[("default", "db")]) == 1
    cluster.put(pv("pv-1", claim=("default", "a")))
    cluster.put(pv("pv-2", claim=("default", "b")))
    cluster.settle()
    assert metrics.read(metrics.PODS_VIOLATING, "extender_pods_violating", plugin=labels[0], reason=labels[1],
                        severity=labels[2]) == 0


def test_a_pod_changed_while_it_was_evaluated_waits_for_the_next_settle(cluster):
    """The snapshot is taken after the marks; a mark made during an evaluation is not
    lost: the result of the stale evaluation is not written."""
    cluster.settle()
    evaluate = cluster.tracker.evaluator.evaluate

    def racing(shape, node_, namespace, claims, volumes, name=""):
        cluster.put(node("n1", [taint(SLA, "100")], **{KERNEL: "5.15.0"}))  # arrives meanwhile
        return evaluate(shape, node_, namespace, claims, volumes, name)

    cluster.tracker.evaluator.evaluate = racing
    cluster.put(pod("gt", "n1", tolerations=[GT_750], annotations={"x": "y"}, uid="new-uid"))
    assert cluster.settle() == {}  # evaluated on n1 at 900: stale, not written
    cluster.tracker.evaluator.evaluate = evaluate
    assert ("default", "gt") in cluster.settle()


def test_the_thread_settles_within_a_deadline():
    cluster = Cluster(objects=[node("n1", [taint(SLA, "900")]), pod("gt", "n1", tolerations=[GT_750])])
    cluster.tracker.start()
    try:
        assert cluster.tracker.wait_settled(30)
        cluster.put(node("n1", [taint(SLA, "100")]))
        assert cluster.tracker.wait_settled(30)
        assert list(cluster.report()) == [("default", "gt")]
    finally:
        cluster.tracker.stop()


def test_the_scheduler_enforced_affinity_counts_too():
    config = Config(drift_report=True, plugin_args={"NodeAffinity": {"addedAffinity": required(
        expr("pool", "In", "batch"))}})
    cluster = Cluster(config, [node("n1", pool="batch"), pod("p", "n1")])
    assert cluster.settle() == {}
    cluster.put(node("n1", pool="web"))
    report = cluster.settle()
    assert list(report[("default", "p")]) == [("NodeAffinity", "node(s) didn't match scheduler-enforced node affinity",
                                               "required")]


def test_the_store_reports_every_applied_change_at_one_point():
    """`Store.observer`: nodes and volumes once applied (not when nothing changed), pods
    on every upsert, deletions, and a cluster file's (re)load object by object."""
    from extender.state.store import Store

    seen: list[tuple] = []

    class Recorder:
        def changed(self, kind, namespace, name, raw, model):
            seen.append((kind, namespace, name, raw is not None, model is not None))

        def start(self):
            pass

    store = Store()
    store.observer = Recorder()
    store.upsert("Node", node("n1"))
    store.upsert("Node", node("n1"))  # unchanged: not reported
    store.upsert("Pod", pod("p", "n1"))
    store.upsert("Pod", pod("p", "n1"))  # reported: the constraints are not in the slim model
    store.upsert("PersistentVolume", pv("v"))
    store.upsert("PersistentVolumeClaim", pvc("c", "v"))
    store.delete("Pod", "default", "p")
    store.delete("Pod", "default", "p")  # gone already: reported (the observer forgets it too)
    assert seen == [("Node", "", "n1", True, True), ("Pod", "default", "p", True, True),
                    ("Pod", "default", "p", True, True), ("PersistentVolume", "", "v", True, True),
                    ("PersistentVolumeClaim", "default", "c", True, True), ("Pod", "default", "p", False, False),
                    ("Pod", "default", "p", False, False)]
    seen.clear()
    store.load([node("n1", [taint(SLA, "1")]), pod("q", "n1"), pvc("c", "v")])
    assert sorted(seen) == [("Node", "", "n1", False, True), ("PersistentVolume", "", "v", False, False),
                            ("Pod", "default", "q", True, False)]


def test_the_report_reads_pods_in_order_whether_a_settle_changed_few_or_many(monkeypatch):
    """The tracker keeps the drifted pods' keys sorted: a settle changing at most
    REORDER_AT of them updates the order in place, a bigger one has it sorted again (in
    runs of SORT_RUN) when next read; `first` and `entries` read it."""
    import random

    from extender.drift import tracker as tracker_module

    monkeypatch.setattr(tracker_module, "REORDER_AT", 3)
    monkeypatch.setattr(tracker_module, "SORT_RUN", 4)
    names = [f"p{i:02d}" for i in range(30)]
    random.Random(7).shuffle(names)
    cluster = Cluster(objects=[node("n1", []), node("n2", []),
                               *(pod(name, "n1" if i % 3 else "n2") for i, name in enumerate(names))])
    tracker = cluster.tracker

    def check() -> None:
        expected = sorted(tracker.drifted.items())
        first, count, totals = tracker.first(5)
        assert first == expected[:5] and count == len(expected)
        assert totals == tracker.counts()
        for limit in (5, 3, 50, 1):  # the kept joined texts: cut, then grown, then cut
            text, shown, count, totals = tracker.first_text(limit)
            assert text == b"[%s]" % b",".join(d.json for _, d in expected[:limit])
            assert shown == len(expected[:limit]) and count == len(expected) and totals == tracker.counts()
        assert tracker.entries() == expected
        assert tracker.entries("other") == []

    assert cluster.settle() == {}  # (`cluster.settle` reads the report: `tracker.settle` below)
    check()
    cluster.put(node("n1", [taint(SLA, "100")]))  # 20 pods at once: sorted again when read
    tracker.settle()
    assert len(tracker.drifted) == 20 and tracker._order is None
    check()
    cluster.put(node("n2", [taint(SLA, "100")]))  # 10 more at once
    tracker.settle()
    check()
    cluster.delete("Pod", names[0])  # one removed, two added: in place
    cluster.put(pod("p99", "n2"))
    cluster.put(pod("a00", "n1"))  # one that sorts first
    tracker.settle()
    assert tracker._order is not None
    assert len(tracker.drifted) == 31 and tracker.first(1)[0][0][0] == ("default", "a00")
    check()
    cluster.put(node("n1", []))  # the pods of n1 fit again: many at once
    tracker.settle()
    assert tracker._order is None
    check()
    assert len(tracker.drifted) == 10


def test_a_settle_that_drifts_many_pods_freezes_them_when_serving(monkeypatch):
    """In the serving process (`freeze`), a settle that drifts FREEZE_AT pods or more
    moves them out of the cyclic collector's reach; fewer, or outside it, nothing. Each
    drifted pod carries its report text from then on."""
    import orjson

    from extender.drift import report
    from extender.drift import tracker as tracker_module

    frozen = []
    monkeypatch.setattr(tracker_module, "FREEZE_AT", 5)
    monkeypatch.setattr(tracker_module.gcfreeze, "freeze_loaded_state", lambda: frozen.append(1))
    cluster = Cluster(objects=[node("n1", []), node("n2", []),
                               *(pod(f"p{i}", "n1" if i < 6 else "n2") for i in range(10))])
    tracker = cluster.tracker
    cluster.settle()
    tracker.freeze = True
    cluster.put(node("n2", [taint(SLA, "100")]))  # 4 pods drift
    tracker.settle()
    assert len(tracker.drifted) == 4 and frozen == []
    cluster.put(node("n1", [taint(SLA, "100")]))  # 6 more
    tracker.settle()
    assert len(tracker.drifted) == 10 and frozen == [1]
    for key, drifted in tracker.drifted.items():
        assert drifted.json == orjson.dumps(report._pod_json(key, drifted.node, drifted.uid, drifted.since,
                                                             drifted.violations))
    tracker.freeze = False
    cluster.put(node("n1", [taint(SLA, "50")]))  # the 6 drift otherwise: not frozen
    tracker.settle()
    assert frozen == [1]
