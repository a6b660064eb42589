"""`--drift-events`: one Warning Event on a pod when its node stops meeting a required
constraint, written through client-go's correlator (the same event again is a count
PATCH, not a new object), off the tracker's thread."""

from __future__ import annotations

from objects import SLA, Cluster, node, pod, taint

from extender import metrics
from extender.drift.events import REASON, DriftEvents
from tests.core.test_events import Sink

GT_750 = {"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}


def drifted_cluster() -> tuple[Cluster, DriftEvents, Sink]:
    cluster = Cluster(objects=[node("n1", [taint(SLA, "900")]), pod("gt", "n1", tolerations=[GT_750]),
                               pod("soft", "n1", tolerations=[{"operator": "Exists", "effect": "NoSchedule"}])])
    sink = Sink()
    events = DriftEvents(sink, rate=1000, burst=1000)
    cluster.tracker.on_drift = events.offer
    cluster.tracker.settle()
    return cluster, events, sink


def test_a_pod_that_drifts_gets_one_event_in_explains_words():
    cluster, events, sink = drifted_cluster()
    cluster.put(node("n1", [taint(SLA, "500"), taint("cost", "high", "PreferNoSchedule")]))
    cluster.tracker.settle()
    assert events.drain()
    (event,) = sink.events.values()  # `soft` only drifts in preference: no event
    assert event["reason"] == REASON and event["type"] == "Warning"
    assert event["involvedObject"] == {"kind": "Pod", "namespace": "default", "name": "gt",
                                       "uid": "uid-default-gt", "apiVersion": "v1"}
    assert event["message"] == (
        "node n1 no longer satisfies this pod's scheduling constraints: TaintToleration: node(s) had untolerated "
        f"taint(s); taint {SLA}=500:NoSchedule is not tolerated; toleration[0] {SLA} Gt '750' (NoSchedule): "
        "does not tolerate: taint value 500 is not greater than 750")


def test_the_same_drift_again_is_counted_not_created_again():
    cluster, events, sink = drifted_cluster()
    before = metrics.read(metrics.DRIFT_EVENTS_TOTAL, "extender_drift_events_total", result="patched")
    for value in ("500", "900", "500"):  # drifts, recovers, drifts the same way again
        cluster.put(node("n1", [taint(SLA, value)]))
        cluster.tracker.settle()
        assert events.drain()
    assert [call for call, _ in sink.calls] == ["create", "patch"]
    (event,) = sink.events.values()
    assert event["count"] == 2
    assert metrics.read(metrics.DRIFT_EVENTS_TOTAL, "extender_drift_events_total", result="patched") == before + 1


def test_unchanged_violations_are_not_offered_again():
    cluster, events, sink = drifted_cluster()
    cluster.put(node("n1", [taint(SLA, "500")]))
    cluster.tracker.settle()
    cluster.put(node("n1", [taint(SLA, "500")], extra="relabel"))  # re-evaluated, same verdict
    cluster.tracker.settle()
    assert events.drain()
    assert [call for call, _ in sink.calls] == ["create"]
