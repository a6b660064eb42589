"""Events with the detail (`--record-events`): when the filter leaves a pod with no
feasible node, one Warning Event on the pod says why in the extender's words, e.g.

    0/1200 candidate nodes pass the extender's filter: taint node.example.com/sla=500:NoSchedule
    is not tolerated; toleration[0] node.example.com/sla Gt '750' (NoSchedule): does not
    tolerate: taint value 500 is not greater than 750 (1,200 nodes)

next to kube-scheduler's own `FailedScheduling` (which only counts reasons).

Never on the filter's path: the verb only offers (pod, candidates) to a bounded queue
that keeps the latest offer per pod (`offer`, a dict write under a lock); a background
thread computes the explanation on the then-current state (`extender.explain`, not
counted in the scheduler_* metrics; nothing is recorded if a node fits by then) and
writes the event. Bounded three ways: the queue (oldest offers
dropped), an explanation budget (a token bucket: at most EXPLAIN_RATE explanations per
second, so a burst of unschedulable pods never takes the verbs' CPU), and client-go's
event correlator (`Correlator`: per-object spam filter of 25 events then one per 5
minutes, identical events counted with a PATCH instead of created again, more than 10
distinct messages within 10 minutes combined into one). An explanation is reused while
the pod, the state and the candidates are unchanged.

core/v1 Events (what client-go's `record` package writes, with `count`); RBAC: events
create and patch (manifests/base/rbac.yaml).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cachetools import LRUCache

from extender import metrics
from extender.api.candidates import resolve
from extender.explain import diagnose, key_details, summarize
from extender.ratelimit import TokenBucket
from extender.request.deadline import DeadlineExceeded, request_deadline

log = logging.getLogger("extender.events")

COMPONENT = "scheduling-extender"
REASON = "ExtenderUnschedulable"
MAX_MESSAGE = 1024  # events.k8s.io's note limit; core/v1 messages are kept as short
QUEUE = 256  # pods waiting for an explanation (the latest offer per pod)
EXPLAIN_RATE, EXPLAIN_BURST = 2.0, 10  # explanations per second for events
API_TIMEOUT = (3.0, 5.0)

# client-go tools/record/events_cache.go defaults
LRU_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED = "(combined from similar events): "


# --- client-go's event correlator ------------------------------------------------------


def _join(*parts: Any) -> str:
    return "".join(str(p or "") for p in parts)


def event_key(event: dict[str, Any]) -> str:
    """Identical events (client-go `getEventKey`): source, object, type, reason, message."""
    obj, src = event["involvedObject"], event.get("source") or {}
    return _join(src.get("component"), src.get("host"), obj.get("kind"), obj.get("namespace"), obj.get("name"),
                 obj.get("fieldPath"), obj.get("uid"), obj.get("apiVersion"), event.get("type"),
                 event.get("reason"), event.get("message"))


def spam_key(event: dict[str, Any]) -> str:
    """One source about one object (`getSpamKey`)."""
    obj, src = event["involvedObject"], event.get("source") or {}
    return _join(src.get("component"), src.get("host"), obj.get("kind"), obj.get("namespace"), obj.get("name"),
                 obj.get("uid"), obj.get("apiVersion"))


def aggregate_key(event: dict[str, Any]) -> str:
    """Similar events: all but the message (`EventAggregatorByReasonFunc`)."""
    obj, src = event["involvedObject"], event.get("source") or {}
    return _join(src.get("component"), src.get("host"), obj.get("kind"), obj.get("namespace"), obj.get("name"),
                 obj.get("uid"), obj.get("apiVersion"), event.get("type"), event.get("reason"),
                 event.get("reportingComponent"), event.get("reportingInstance"))


@dataclass(slots=True)
class Correlated:
    event: dict[str, Any]
    patch: dict[str, Any] | None  # set: the same event again, PATCH count/lastTimestamp/message


class Correlator:
    """client-go's `EventCorrelator`: aggregate similar events, count identical ones,
    then the per-object spam filter (applied last, as upstream: a filtered event still
    counts)."""

    def __init__(self, clock: Callable[[], float] = time.time, burst: int = SPAM_BURST,
                 qps: float = SPAM_QPS) -> None:
        self.clock = clock
        self.burst, self.qps = burst, qps
        self._aggregates: LRUCache = LRUCache(LRU_ENTRIES)  # aggregate key -> (messages, last seen)
        self._observed: LRUCache = LRUCache(LRU_ENTRIES)  # event key -> dict(count, first, name, rv)
        self._spam: LRUCache = LRUCache(LRU_ENTRIES)  # spam key -> TokenBucket
        self._lock = threading.Lock()

    def _bucket(self, key: str) -> TokenBucket:
        bucket = self._spam.get(key)
        if bucket is None:
            bucket = self._spam[key] = TokenBucket(self.qps, self.burst, self.clock)
        return bucket

    def may_record(self, event: dict[str, Any]) -> bool:
        """Whether the spam filter would let an event about this object through now
        (no token taken): lets the recorder skip computing an explanation."""
        with self._lock:
            return self._bucket(spam_key(event)).tokens() >= 1.0

    def correlate(self, event: dict[str, Any]) -> Correlated | None:
        """The event to create (or patch), or None when the spam filter drops it."""
        with self._lock:
            event, key = self._aggregate(event)
            event, patch = self._observe(event, key)
            if self._bucket(spam_key(event)).try_take():
                return None
            return Correlated(event, patch)

    def _aggregate(self, event: dict[str, Any]) -> tuple[dict[str, Any], str]:
        now = self.clock()
        group = aggregate_key(event)
        messages, last = self._aggregates.get(group, (set(), None))
        if last is None or now - last > AGGREGATE_INTERVAL:
            messages = set()
        messages.add(event["message"])
        self._aggregates[group] = (messages, now)
        if len(messages) < AGGREGATE_MAX_EVENTS:
            return event, event_key(event)
        messages.pop()  # never grow past the threshold
        stamp = _timestamp(now)
        combined = {**event, "metadata": {**event["metadata"], "name": _event_name(event, now)},
                    "message": _clip(COMBINED + event["message"]), "count": 1,
                    "firstTimestamp": stamp, "lastTimestamp": stamp}
        return combined, group

    def _observe(self, event: dict[str, Any], key: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        last = self._observed.get(key)
        patch = None
        if last is not None and last["count"] > 0:
            event = {**event, "metadata": {**event["metadata"], "name": last["name"],
                                           "resourceVersion": last["rv"]},
                     "firstTimestamp": last["first"], "count": last["count"] + 1}
            patch = {"count": event["count"], "lastTimestamp": event["lastTimestamp"], "message": event["message"]}
        self._observed[key] = {"count": event["count"], "first": event["firstTimestamp"],
                               "name": event["metadata"]["name"], "rv": event["metadata"].get("resourceVersion", "")}
        return event, patch

    def update_state(self, event: dict[str, Any]) -> None:
        """Remember what the server holds (`UpdateState`): its name, count, version."""
        meta = event.get("metadata") or {}
        with self._lock:
            self._observed[event_key(event)] = {
                "count": event.get("count") or 1, "first": event.get("firstTimestamp"),
                "name": meta.get("name", ""), "rv": meta.get("resourceVersion", "")}


# --- the event -------------------------------------------------------------------------


def _timestamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event_name(event: dict[str, Any], at: float) -> str:
    """`<object name>.<hex unix nanoseconds>`, as client-go names events."""
    return f"{event['involvedObject']['name']}.{int(at * 1e9):x}"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def event_message(summary: dict[str, Any]) -> str:
    """The extender's reasons, biggest groups first: `<detail> (<n> nodes)`, as many as
    fit in MAX_MESSAGE characters."""
    head = f"{summary['feasible']}/{summary['candidates']} candidate nodes pass the extender's filter: "
    groups = [(g["nodes"], "; ".join(key_details(g["details"])) or entry["reason"])
              for entry in summary.get("reasons", ()) for g in entry["groups"]]
    for entry in summary.get("reasons", ()):
        if "moreGroups" in entry:
            more = entry["moreGroups"]
            groups.append((more["nodes"], f"{entry['reason']} ({more['groups']} more distinct details)"))
    groups.sort(key=lambda g: -g[0])
    text = head
    for i, (n, line) in enumerate(groups):
        part = f"{'' if i == 0 else ' | '}{line} ({n:,} node{'s' if n != 1 else ''})"
        rest = len(groups) - i - 1
        tail = f" | (+{rest} more)" if rest else ""
        if len(text) + len(part) + len(tail) > MAX_MESSAGE:
            if i == 0:
                return _clip(text + part)
            return text + f" | (+{len(groups) - i} more)"
        text += part
    return text


def pod_event(namespace: str, name: str, uid: str, message: str, at: float, instance: str,
              reason: str = REASON) -> dict[str, Any]:
    stamp = _timestamp(at)
    obj = {"kind": "Pod", "namespace": namespace, "name": name, "uid": uid, "apiVersion": "v1"}
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"namespace": namespace},
             "involvedObject": obj, "reason": reason, "message": _clip(message), "type": "Warning",
             "source": {"component": COMPONENT}, "firstTimestamp": stamp, "lastTimestamp": stamp,
             "count": 1, "reportingComponent": COMPONENT, "reportingInstance": instance}
    event["metadata"]["name"] = _event_name(event, at)
    return event


# --- writing ---------------------------------------------------------------------------


class SinkError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ApiEventSink:
    """core/v1 Events through the kubernetes client (the live source's API access)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api = client.CoreV1Api(api_client)

    def _call(self, what: str, call: Callable[[], Any]) -> dict[str, Any]:
        import orjson
        from kubernetes.client.exceptions import ApiException

        try:
            response = call()
            try:
                return orjson.loads(response.data)
            finally:
                response.release_conn()
        except ApiException as exc:
            raise SinkError(exc.status, f"{what}: {exc.status} {exc.reason}") from None
        except Exception as exc:  # unreachable server, timeout
            raise SinkError(0, f"{what}: {exc}") from None

    def create(self, event: dict[str, Any]) -> dict[str, Any]:
        namespace = event["metadata"]["namespace"]
        body = {**event, "metadata": {k: v for k, v in event["metadata"].items() if k != "resourceVersion"}}
        return self._call("creating an event", lambda: self.api.create_namespaced_event(
            namespace, body, _preload_content=False, _request_timeout=API_TIMEOUT))

    def patch(self, event: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        meta = event["metadata"]
        return self._call("patching an event", lambda: self.api.patch_namespaced_event(
            meta["name"], meta["namespace"], patch, _content_type="application/strategic-merge-patch+json",
            _preload_content=False, _request_timeout=API_TIMEOUT))


def write_event(correlator: Correlator, sink: Any, event: dict[str, Any]) -> str:
    """Correlate `event` (client-go's `EventCorrelator`), then create it or patch the
    one the server holds (created again if that expired); returns what happened:
    skipped (the spam filter), created, patched or error (logged)."""
    correlated = correlator.correlate(event)
    if correlated is None:
        return "skipped"
    try:
        if correlated.patch is not None:
            try:
                correlator.update_state(sink.patch(correlated.event, correlated.patch))
                return "patched"
            except SinkError as exc:
                if exc.status != 404:
                    raise
                # gone (expired): create it again, as client-go does
        correlator.update_state(sink.create(correlated.event))
        return "created"
    except SinkError as exc:
        obj = event["involvedObject"]
        log.warning("cannot record an event", extra={"pod": f"{obj['namespace']}/{obj['name']}", "error": str(exc)})
        return "error"


@dataclass(slots=True)
class Offer:
    """What the filter answered for, without its snapshot: a queued offer must not pin
    a cluster state (a pod layer per version). The explanation is computed on the
    state current when its turn comes, and only recorded if still no node fits."""

    pod: Any  # extender.model.Pod
    names: Sequence[str] = ()  # NodeNames mode: the candidates (shared lists, not copied)
    unknown: Sequence[str] = ()
    cands: Any = None  # Nodes mode: the Candidates parsed from the request's node objects

    @classmethod
    def of(cls, pod: Any, cands: Any) -> Offer:
        if cands.raw_by_name is not None:
            return cls(pod, cands=cands)
        return cls(pod, cands.nodes.order, cands.unknown)


class OfferQueue:
    """The latest offer per key (the oldest dropped past `queue_size`), handled one at a
    time by a thread of its own, started in the process that offers (threads do not
    survive a fork): `offer` never waits for the handling. Subclasses handle
    (`_handle`), and count drops (`_dropped`) and failures (`_failed`)."""

    thread_name = "offers"

    def __init__(self, queue_size: int) -> None:
        self.queue_size = queue_size
        self._pending: OrderedDict[Any, Any] = OrderedDict()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._stop = False
        self._busy = False

    def _enqueue(self, key: Any, item: Any) -> None:
        with self._cond:
            if key not in self._pending and len(self._pending) >= self.queue_size:
                self._pending.popitem(last=False)  # the oldest offer goes
                self._dropped()
            self._pending[key] = item
            self._pending.move_to_end(key)
            self._cond.notify()
        if self._pid != os.getpid():  # first offer in this process (threads do not survive a fork)
            self._start()

    def _start(self) -> None:
        with self._cond:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until the queue is empty (tests)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                if not self._cond.wait(max(0.0, deadline - time.monotonic())):
                    return False
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                key, item = self._pending.popitem(last=False)
                self._busy = True
            try:
                self._handle(key, item)
            except Exception:  # noqa: BLE001 - a bug here must not end the thread
                log.exception("handling an offer failed", extra={"thread": self.thread_name})
                self._failed()
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _handle(self, key: Any, item: Any) -> None:
        raise NotImplementedError

    def _dropped(self) -> None:
        """An offer was dropped (the queue was full)."""

    def _failed(self) -> None:
        """Handling an offer raised (logged)."""


class EventRecorder(OfferQueue):
    """The queue, the background thread and the correlator (see the module docstring)."""

    thread_name = "event-recorder"

    def __init__(self, extender: Any, sink: Any, clock: Callable[[], float] = time.time,
                 queue_size: int = QUEUE, explain_rate: float = EXPLAIN_RATE,
                 explain_burst: int = EXPLAIN_BURST) -> None:
        super().__init__(queue_size)
        self.extender = extender
        self.sink = sink
        self.clock = clock
        self.correlator = Correlator(clock)
        self.budget = TokenBucket(explain_rate, explain_burst, clock)
        self.instance = socket.gethostname()
        self._explained: LRUCache = LRUCache(LRU_ENTRIES)  # pod -> (inputs, message)

    # -- on the filter's path: O(1), never blocks on work

    def offer(self, pod: Any, cands: Any) -> None:
        self._enqueue((pod.namespace, pod.name), Offer.of(pod, cands))

    # -- the background thread

    def _handle(self, key: Any, offer: Offer) -> None:
        self.record(offer)

    def _dropped(self) -> None:
        metrics.EVENTS_TOTAL.labels("dropped").inc()

    def _failed(self) -> None:
        metrics.EVENTS_TOTAL.labels("error").inc()

    def record(self, offer: Offer) -> str:
        """Explain, correlate, write; returns what happened (the metric's result)."""
        pod = offer.pod
        now = self.clock()
        probe = pod_event(pod.namespace, pod.name, pod.uid, "", now, self.instance)
        if not self.correlator.may_record(probe):
            return self._count("skipped")
        message = self._message(offer)
        if message is None:
            return self._count("skipped")
        event = pod_event(pod.namespace, pod.name, pod.uid, message, now, self.instance)
        return self._count(write_event(self.correlator, self.sink, event))

    def _message(self, offer: Offer) -> str | None:
        """The explanation's message, computed once per (pod, state, candidates) and
        within the explanation budget; None when it cannot be (budget, deadline, no
        longer unschedulable)."""
        pod = offer.pod
        snapshot = self.extender.source.snapshot()
        names = [*(offer.cands.nodes.order if offer.cands is not None else offer.names), *offer.unknown]
        inputs = (pod.uid, snapshot.versions, hash(tuple(names)), offer.cands is None)
        hit = self._explained.get((pod.namespace, pod.name))
        if hit is not None and hit[0] == inputs:
            return hit[1]
        if self.budget.try_take():
            return None
        cands = offer.cands if offer.cands is not None else resolve(snapshot, names)
        try:
            with request_deadline(self.extender.config.request_deadline):
                diag = diagnose(self.extender, pod, snapshot, cands)
        except DeadlineExceeded:
            return None
        if diag.wire.error or diag.wire.feasible_names or not diag.names:
            return None
        message = event_message(summarize(diag, [], examples=0))
        self._explained[(pod.namespace, pod.name)] = (inputs, message)
        return message

    @staticmethod
    def _count(result: str) -> str:
        metrics.EVENTS_TOTAL.labels(result).inc()
        return result


def recorder_for(extender: Any) -> EventRecorder | None:
    """The recorder `--record-events` asks for, writing through the live source's API
    access; None when off, or in file mode (no API to write to: said once)."""
    if not extender.config.record_events:
        return None
    api_client = extender.source.api_client
    if api_client is None:
        log.warning("--record-events needs API access (--kubeconfig or --in-cluster): no events recorded")
        return None
    return EventRecorder(extender, ApiEventSink(api_client))
