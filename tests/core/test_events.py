"""Events on pods the filter leaves without a node: client-go's correlator (aggregation,
counting, spam filter), the recorder's queue and budget, and the message."""

from __future__ import annotations

import threading
import time

import orjson
import pytest
from conftest import example_pod

from extender.api.candidates import resolve
from extender.api.wire import decode_args
from extender.config import Config
from extender.engine import Extender
from extender.events import (
    AGGREGATE_INTERVAL,
    COMBINED,
    MAX_MESSAGE,
    REASON,
    SPAM_BURST,
    Correlator,
    EventRecorder,
    Offer,
    SinkError,
    event_message,
    pod_event,
    recorder_for,
)
from extender.explain import diagnose, summarize
from extender.state import StaticSource

NAMES = ["od-a1", "od-a2", "od-b1", "od-b2", "od-c1", "od-c2", "spot-a1", "spot-b1", "spot-c1", "dev-a1"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """What the API server would hold: events by name; `create`/`patch` as its answers."""

    def __init__(self) -> None:
        self.events: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.gate: threading.Event | None = None
        self.version = 0

    def _stamp(self, event: dict) -> dict:
        self.version += 1
        return {**event, "metadata": {**event["metadata"], "resourceVersion": str(self.version)}}

    def create(self, event: dict) -> dict:
        if self.gate is not None:
            self.gate.wait(10)
        self.calls.append(("create", event["metadata"]["name"]))
        self.events[event["metadata"]["name"]] = self._stamp(event)
        return self.events[event["metadata"]["name"]]

    def patch(self, event: dict, patch: dict) -> dict:
        name = event["metadata"]["name"]
        self.calls.append(("patch", name))
        if name not in self.events:
            raise SinkError(404, "not found")
        self.events[name] = self._stamp({**self.events[name], **patch})
        return self.events[name]


def event(message: str, clock: Clock, name: str = "p", uid: str = "u1") -> dict:
    return pod_event("default", name, uid, message, clock(), "host")


def test_identical_events_are_counted_with_a_patch():
    clock = Clock()
    correlator = Correlator(clock)
    first = correlator.correlate(event("m", clock))
    assert first.patch is None and first.event["count"] == 1
    clock.now += 5
    second = correlator.correlate(event("m", clock))
    assert second.event["metadata"]["name"] == first.event["metadata"]["name"]
    assert second.event["firstTimestamp"] == first.event["firstTimestamp"]
    assert second.patch == {"count": 2, "lastTimestamp": second.event["lastTimestamp"], "message": "m"}
    assert second.event["lastTimestamp"] != first.event["lastTimestamp"]
    other = correlator.correlate(event("another explanation", clock))
    assert other.patch is None and other.event["metadata"]["name"] != first.event["metadata"]["name"]


def test_more_than_ten_distinct_messages_in_ten_minutes_are_combined():
    clock = Clock()
    correlator = Correlator(clock, burst=1000)
    results = []
    for i in range(12):
        clock.now += 1
        results.append(correlator.correlate(event(f"explanation {i}", clock)))
    assert all(not r.event["message"].startswith(COMBINED) for r in results[:9])
    combined = results[9:]
    assert all(r.event["message"].startswith(COMBINED) for r in combined)
    assert combined[0].patch is None  # the aggregate event is created once...
    assert combined[1].patch is not None and combined[1].event["count"] == 2  # ...then counted
    assert combined[1].event["metadata"]["name"] == combined[0].event["metadata"]["name"]
    clock.now += AGGREGATE_INTERVAL + 1  # a quiet interval starts over
    assert not correlator.correlate(event("explanation 99", clock)).event["message"].startswith(COMBINED)


def test_spam_filter_25_then_one_per_5_minutes_per_object():
    clock = Clock()
    correlator = Correlator(clock)
    sent = [correlator.correlate(event(f"m{i % 3}", clock)) for i in range(SPAM_BURST + 5)]
    assert sum(r is not None for r in sent) == SPAM_BURST
    assert correlator.correlate(event("m", clock, name="other")) is not None  # per object
    assert not correlator.may_record(event("", clock))
    clock.now += 300
    assert correlator.may_record(event("", clock))
    assert correlator.correlate(event("m0", clock)) is not None
    assert correlator.correlate(event("m0", clock)) is None


def offer_for(extender: Extender, pod_name: str, names: list[str]) -> Offer:
    pod = extender.parse_pod(example_pod(pod_name))
    return Offer.of(pod, resolve(extender.source.snapshot(), names))


def test_the_message_says_why_in_the_extenders_words(example_extender):
    pod = example_extender.parse_pod(example_pod("sla-gt"))
    snapshot = example_extender.source.snapshot()
    cands = resolve(snapshot, ["spot-c1", "od-c2", "dev-a1"])
    summary = summarize(diagnose(example_extender, pod, snapshot, cands), [], examples=0)
    message = event_message(summary)
    assert message.startswith("0/3 candidate nodes pass the extender's filter: ")
    assert ("taint node.example.com/sla=500:NoSchedule is not tolerated; toleration[0] node.example.com/sla "
            "Gt '750' (NoSchedule): does not tolerate: taint value 500 is not greater than 750 (1 node)") in message
    assert "node(s) were unschedulable (1 node)" in message
    assert "key does not match" not in message  # unrelated tolerations are left out


def test_long_messages_are_cut_to_the_limit():
    groups = [{"details": [f"detail {i} " + "x" * 200], "nodes": 1000 - i, "examples": []} for i in range(20)]
    summary = {"feasible": 0, "candidates": 20000,
               "reasons": [{"reason": "r", "plugin": "P", "code": "Unschedulable", "nodes": 20000, "groups": groups}]}
    message = event_message(summary)
    assert len(message) <= MAX_MESSAGE and message.endswith("more)")
    assert "detail 0 " in message and "(1,000 nodes)" in message


@pytest.fixture
def recorder(example_snapshot):
    extender = Extender(Config(), StaticSource(example_snapshot))
    clock = Clock()
    sink = Sink()
    rec = EventRecorder(extender, sink, clock=clock)
    yield extender, rec, sink, clock
    rec.stop()


def test_the_filter_offers_unschedulable_pods_and_one_event_is_written(recorder):
    extender, rec, sink, clock = recorder
    extender.events = rec
    body = {"Pod": example_pod("sla-gt"), "NodeNames": ["spot-c1", "dev-a1"]}
    answer = orjson.loads(extender.filter(decode_args(orjson.dumps(body))))
    assert answer["NodeNames"] == [] and answer["Error"] == ""
    assert rec.drain()
    ((created, name),) = sink.calls
    ev = sink.events[name]
    assert created == "create" and ev["reason"] == REASON and ev["type"] == "Warning"
    assert ev["involvedObject"] == {"kind": "Pod", "namespace": "default", "name": "sla-gt",
                                    "uid": "", "apiVersion": "v1"}
    assert "taint value 500 is not greater than 750 (1 node)" in ev["message"]
    # the same answer again: the same event, counted
    clock.now += 10
    extender.filter(decode_args(orjson.dumps(body)))
    assert rec.drain()
    assert sink.calls[-1] == ("patch", name) and sink.events[name]["count"] == 2
    # a feasible answer or an Error answer (invalid arguments) offers nothing
    extender.filter(decode_args(orjson.dumps({"Pod": example_pod("sla-gt"), "NodeNames": ["od-a1"]})))
    invalid = example_pod("sla-gt")
    invalid["metadata"]["labels"] = {"app": 5}
    assert orjson.loads(extender.filter(decode_args(orjson.dumps({"Pod": invalid, "NodeNames": ["od-a1"]}))))[
        "Error"]
    assert rec.drain() and len(sink.calls) == 2
    # a malformed annotation rejects every node: the event quotes the problem
    bad = example_pod("plain")
    bad["metadata"]["annotations"] = {"scheduling-extender.io/tolerations": "[not json"}
    extender.filter(decode_args(orjson.dumps({"Pod": bad, "NodeNames": ["od-a1"]})))
    assert rec.drain() and sink.calls[-1][0] == "create"
    assert "scheduling-extender.io/tolerations" in sink.events[sink.calls[-1][1]]["message"]


def test_an_expired_event_is_created_again(recorder):
    extender, rec, sink, clock = recorder
    offer = offer_for(extender, "plain", ["od-c2"])
    assert rec.record(offer) == "created"
    sink.events.clear()  # the API server expired it (events live an hour)
    clock.now += 1
    assert rec.record(offer) == "created"
    assert [c[0] for c in sink.calls] == ["create", "patch", "create"]


def test_offers_never_wait_for_the_api_and_the_queue_is_bounded(example_snapshot):
    extender = Extender(Config(), StaticSource(example_snapshot))
    sink = Sink()
    sink.gate = threading.Event()  # the API server hangs
    rec = EventRecorder(extender, sink, clock=Clock(), queue_size=3)
    try:
        pods = []
        for i in range(6):
            pod = example_pod("plain")
            pod["metadata"]["name"] = f"p{i}"
            pods.append(pod)
            cands = resolve(extender.source.snapshot(), ["od-c2"])
            parsed = extender.parse_pod(pod)
            rec.offer(parsed, cands)  # returns while the writer is stuck
            if i == 0:  # p0 is being written (stuck on the API) before the others come
                deadline = time.monotonic() + 10
                while not rec._busy and time.monotonic() < deadline:
                    time.sleep(0.01)
        # three wait, the oldest others were dropped
        assert sorted(rec._pending) == [("default", "p3"), ("default", "p4"), ("default", "p5")]
        for _ in range(3):  # offers for a queued pod replace it: no growth
            rec.offer(parsed, cands)
        assert len(rec._pending) <= 3
        sink.gate.set()
        assert rec.drain()
        written = {sink.events[n]["involvedObject"]["name"] for _, n in sink.calls}
        assert "p5" in written and len(written) == 4  # p0 (in flight) + the 3 newest
    finally:
        sink.gate.set()
        rec.stop()


def test_explanations_are_budgeted_and_reused(recorder):
    extender, _, sink, clock = recorder
    rec = EventRecorder(extender, sink, clock=clock, explain_rate=0.001, explain_burst=1)
    offer = offer_for(extender, "plain", ["od-c2"])
    assert rec.record(offer) == "created"
    clock.now += 1
    assert rec.record(offer) == "patched"  # same pod, state and candidates: reused, no budget
    other = offer_for(extender, "sla-gt", ["spot-c1"])
    assert rec.record(other) == "skipped"  # a new explanation, and the budget is spent


def test_events_need_api_access():
    extender = Extender(Config(record_events=True), StaticSource(None))
    assert extender.events is None  # file mode: nothing to write to (logged)
    assert recorder_for(Extender(Config(), StaticSource(None))) is None


def test_events_reach_the_api_server_and_are_counted_there(example_snapshot, tmp_path):
    """The real client against the API-server double: create, then PATCH count and
    lastTimestamp (strategic merge), then create again once the event expired."""
    from kubernetes import client, config

    from extender.events import ApiEventSink
    from testing.apiserver import FakeApiServer

    with FakeApiServer() as api:
        configuration = client.Configuration()
        config.load_kube_config(str(api.write_kubeconfig(tmp_path / "kubeconfig")),
                                client_configuration=configuration)
        extender = Extender(Config(), StaticSource(example_snapshot))
        clock = Clock()
        rec = EventRecorder(extender, ApiEventSink(client.ApiClient(configuration)), clock=clock)
        offer = offer_for(extender, "sla-gt", ["spot-c1", "od-c2"])
        assert rec.record(offer) == "created"
        clock.now += 30
        assert rec.record(offer) == "patched"
        (stored,) = api.objects("events")
        assert stored["count"] == 2 and stored["reason"] == REASON
        assert stored["firstTimestamp"] != stored["lastTimestamp"]
        assert "taint value 500 is not greater than 750 (1 node)" in stored["message"]
        assert any(r.startswith("PATCH /api/v1/namespaces/default/events/") for r in api.requests)
        api.delete("events", stored["metadata"]["name"], "default")
        clock.now += 30
        assert rec.record(offer) == "created"
        assert len(api.objects("events")) == 1


def test_offers_pin_no_state_and_are_explained_on_the_current_one(example_objects):
    """An offer keeps the pod and the candidate names, not the snapshot: when a node
    fits by the time the thread gets to it, nothing is recorded."""
    from extender.state import ClusterSnapshot

    source = StaticSource(ClusterSnapshot.from_objects(example_objects))
    extender = Extender(Config(), source)
    sink = Sink()
    rec = EventRecorder(extender, sink, clock=Clock())
    offer = offer_for(extender, "sla-gt", ["spot-c1"])
    assert not hasattr(offer, "snapshot") and offer.names == ["spot-c1"]
    relaxed = [dict(o) for o in example_objects]
    for obj in relaxed:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == "spot-c1":
            obj["spec"] = {**obj["spec"], "taints": [{"key": "node.example.com/sla", "value": "800",
                                                       "effect": "NoSchedule"}]}
    source.set(ClusterSnapshot.from_objects(relaxed))
    assert rec.record(offer) == "skipped" and sink.calls == []
    # Nodes mode (the request carried node objects): those are what is explained
    nodes = [o for o in example_objects if o["kind"] == "Node" and o["metadata"]["name"] == "spot-c1"]
    cands = resolve(source.snapshot(), None, nodes)
    nodes_offer = Offer.of(extender.parse_pod(example_pod("sla-gt")), cands)
    assert nodes_offer.cands is cands
    assert rec.record(nodes_offer) == "created"
    assert "taint value 500 is not greater than 750" in next(iter(sink.events.values()))["message"]
