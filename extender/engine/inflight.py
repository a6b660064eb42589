"""Pods in flight: answered by our `filter`, not yet visible as bound in cluster state.

kube-scheduler *assumes* pod A in its cache and starts pod B's scheduling cycle while
A's binding runs in a goroutine; in-tree PodTopologySpread counts A at once. We learn
A's node only from our `bind` verb (or, without `bindVerb`, from the watch), so a burst
of replicas would otherwise see the same counts and violate maxSkew.

The design (docs/reference/bind-preempt.md):

* **pending**: after answering `filter` for A with at least one feasible node, A is
  pending: it will come back through `bind` (kube-scheduler runs one scheduling cycle
  at a time, so by the time B's `filter` arrives A's cycle is over).
* **settle**: before answering `filter`/`prioritize`/`preempt` for B, wait for the
  pending pods that can change B's answer, and only those: same namespace *and*
  selected by one of B's DoNotSchedule spread constraints (the pod's own, or the
  cluster defaults where they apply, `matchLabelKeys` included: `selectors`). Every
  other pod goes straight on: kube-scheduler runs one cycle at a time, so each wait
  stalls every pod behind it. A pending pod is waited for until `wait` seconds after
  it was answered (and at least `GRACE` after B arrived: after a pause, A's bind may
  be queued right behind B). One still pending then is *not* dropped: kube-scheduler
  counts A however long its PreBind or Permit take, so B's `filter` answers an Error
  (`Unconfirmed`; kube-scheduler retries B with back-off) instead of a verdict
  without A. A pending pod is done when the state shows it bound (anywhere),
  terminating, or deleted after it was seen; when it is filtered again (its previous
  cycle ended without a bind: kube-scheduler never runs two cycles of one pod); or,
  as a last resort, `GIVE_UP` seconds after it was answered, well past
  kube-scheduler's own timeouts and back-off (it is then never waited for again).
* **assumed**: `bind` turns A into an assumed pod on its node *before* calling the API
  (as kube-scheduler's `assume`), in the cluster state's `Store` (its assumed-pods
  overlay on the pod layer). An assumption ends when the state shows the pod (bound,
  deleted, or absent from a relist) or when the API call fails (`forget`), never by a
  timer. A source without a store (a static snapshot: explain, unit tests) records
  none.

Waiting never happens on a thread that must not block (the gunicorn worker's event
loop, which must stay free to read A's `bind`): `may_block()` says whether the current
thread may wait; the verbs' port answers `bind`, and any verb while pods are pending,
on a pool thread (`extender.server.app.App.place`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from extender import metrics
from extender.engine.gate import StateNotReady
from extender.model import Pod
from extender.request import lane
from extender.state import ClusterSource

log = logging.getLogger("extender.inflight")

Key = tuple[str, str]  # (namespace, name)
GIVEN_UP = 10_000  # pods remembered as "did not come back in time" (oldest forgotten first)
# A pending pod is counted this long at most: well past kube-scheduler's httpTimeout for
# the extender (5 s), its longest back-off (podMaxBackoffSeconds, 10 s) and a binding
# cycle's usual PreBind; only a pod rejected after our filter without a new cycle (a
# Permit or Reserve failure whose retry waits in the unschedulable queue) stays so long.
GIVE_UP = 60.0
GRACE = 0.25  # seconds a verb waits for pending binds at least, from its own arrival


class Unconfirmed(StateNotReady):
    """Pods answered before this one can change its answer and are not bound yet."""


class Selector(Protocol):
    """What `settle` needs of a label selector (`podtopologyspread.selector.LabelSelector`)."""

    def matches(self, labels) -> bool: ...


# pod -> the selectors of its DoNotSchedule spread constraints (empty: it waits for nobody)
Selectors = Callable[[Pod], Sequence[Selector]]


@dataclass(slots=True)
class _Pending:
    pod: Pod
    since: float
    seen: bool  # the state held the pod when it was answered (its absence later: deleted)


def may_block() -> bool:
    """Only pool threads wait: never an event loop (the main thread of a gunicorn worker
    runs the verbs' one; a request answered on a loop runs in `lane.LOOP`)."""
    return threading.current_thread() is not threading.main_thread() and not lane.on_loop()


def _everyone(pod: Pod) -> Sequence[Selector]:
    """Without a spread plugin to ask: every pod of the namespace may matter."""
    return (_ALL,)


class _All:
    def matches(self, labels) -> bool:
        return True


_ALL = _All()


class InFlight:
    """Pending pods of one process, and assumptions through the source's store."""

    def __init__(self, source: ClusterSource, wait: float = 1.0, selectors: Selectors = _everyone,
                 clock=time.monotonic) -> None:
        self.source = source
        self.store = source.store  # FileSource and LiveSource have one
        self.wait = wait
        self.selectors = selectors
        self.clock = clock
        self._cond = threading.Condition()
        self._pending: dict[Key, _Pending] = {}
        self._given_up: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.wait > 0

    # --- filter: pending ------------------------------------------------------------

    def answered(self, pod: Pod, snapshot=None) -> None:
        """A's filter answer named at least one feasible node: A will come back (unless
        A already failed to come back in time once)."""
        if not self.enabled:
            return
        key = (pod.namespace, pod.name)
        snapshot = snapshot if snapshot is not None else self.source.snapshot()
        seen = snapshot.pod_layer.get(*key) is not None
        with self._cond:
            if (pod.namespace, pod.name, pod.uid) in self._given_up:
                return
            self._pending[key] = _Pending(pod, self.clock(), seen)
            self._gauge()

    def has_pending(self) -> bool:
        return bool(self._pending)

    def refiltered(self, pod: Pod) -> None:
        """`pod`'s filter is asked again: its previous scheduling cycle is over, and if
        it was pending, no bind is coming from that cycle."""
        key = (pod.namespace, pod.name)
        if key in self._pending:
            with self._cond:
                if self._pending.pop(key, None) is not None:
                    self._gauge()

    def settle(self, pod: Pod, strict: bool = True) -> list[Key]:
        """Block until no pending pod that can change `pod`'s answer is left, or until
        each has had its time (see the module docstring). Returns the pods still
        pending then; with `strict`, raises `Unconfirmed` naming them instead."""
        if not self.enabled or not self._pending or not may_block():
            return []
        key = (pod.namespace, pod.name)
        with self._cond:
            others = [(k, p.pod.labels) for k, p in self._pending.items() if k[0] == pod.namespace and k != key]
        if not others:
            return []
        selectors = self.selectors(pod)
        relevant = [k for k, labels in others if any(s.matches(labels) for s in selectors)]
        if not relevant:
            return []
        started = self.clock()
        waited: dict[Key, float] = {}
        with self._cond:
            while True:
                now = self.clock()
                self._expire(now)
                blocking = [k for k in relevant if k in self._pending]
                if blocking:
                    blocking = self._unconfirmed(blocking)
                if not blocking:
                    break
                deadline = max(min(self._pending[k].since for k in blocking) + self.wait,
                               started + min(GRACE, self.wait))
                if now >= deadline:
                    waited = {k: now - self._pending[k].since for k in blocking}
                    break
                self._cond.wait(timeout=min(deadline - now, 0.005))
        metrics.INFLIGHT_WAIT_SECONDS.observe(self.clock() - started)
        if blocking and strict:
            oldest = max(blocking, key=waited.get)
            raise Unconfirmed(
                f"{len(blocking)} pod(s) answered before this one and selected by its topology spread "
                f"constraints are not bound yet (e.g. {oldest[0]}/{oldest[1]}, answered "
                f"{waited[oldest]:.1f} s ago): kube-scheduler counts them while it binds them; "
                "retry once their binds arrive")
        return blocking

    def _unconfirmed(self, blocking: list[Key]) -> list[Key]:
        """Under the lock: drop the pending pods the state shows bound (by us, or,
        without bindVerb, seen by the watch), terminating, or gone after being seen."""
        layer = self.source.snapshot().pod_layer
        left = []
        for k in blocking:
            seen = layer.get(*k)
            if (seen is None and self._pending[k].seen) or (seen is not None and (seen.node_name or seen.terminating)):
                del self._pending[k]
            else:
                left.append(k)
        if len(left) != len(blocking):
            self._gauge()
        return left

    def _expire(self, now: float) -> None:
        """Under the lock: give up on pods answered more than `GIVE_UP` ago, and never
        wait for them again."""
        late = [k for k, p in self._pending.items() if now - p.since >= GIVE_UP]
        for k in late:
            log.warning("pod answered but never bound; no longer waiting for it, nor when it is filtered again",
                        extra={"pod": f"{k[0]}/{k[1]}", "waited": GIVE_UP})
            pod = self._pending.pop(k).pod
            self._given_up[(pod.namespace, pod.name, pod.uid)] = None
            if len(self._given_up) > GIVEN_UP:
                self._given_up.popitem(last=False)
            metrics.INFLIGHT_EXPIRED_TOTAL.inc()
        if late:
            self._gauge()

    def _gauge(self) -> None:
        metrics.INFLIGHT_PODS.set(len(self._pending))
        self._cond.notify_all()

    # --- bind: assumed --------------------------------------------------------------

    def assume(self, namespace: str, name: str, uid: str, node: str) -> bool:
        """A's bind: count it on `node` from now on (before the API call), and only then
        release the pods waiting for it (the other order lets one of them read a
        snapshot without A). False when there is nothing to assume: no store, or a pod
        we know nothing of (never filtered here, not in the cluster state)."""
        key = (namespace, name)
        with self._cond:
            pending = self._pending.get(key)
        pod = pending.pod if pending is not None else None
        assumed = False
        if self.store is not None:
            if pod is None:
                pod = self.source.snapshot().pod_layer.get(namespace, name)
            if pod is not None:
                self.store.assume(replace(pod, uid=uid or pod.uid), node)
                assumed = True
        with self._cond:
            self._pending.pop(key, None)
            self._given_up.pop((namespace, name, uid), None)
            self._gauge()
        return assumed

    def bound(self, namespace: str, name: str) -> None:
        """The binding call succeeded: the assumption now ends only by observation."""
        if self.store is not None:
            self.store.bound(namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        """The binding failed: the pod is neither pending nor assumed any more."""
        with self._cond:
            self._pending.pop((namespace, name), None)
            self._gauge()
        if self.store is not None:
            self.store.forget(namespace, name)

    def counts(self) -> dict[str, int]:
        assumed = len(self.store.assumed()) if self.store is not None else 0
        with self._cond:
            return {"pending": len(self._pending), "assumed": assumed}


def inflight_wait(config, binder) -> float:
    """`--inflight-wait`, or 0 without API access (file mode, `binder` None): nothing can
    ever show a pending pod bound there (`bind` answers an Error, a file is re-read every
    few seconds), so every pod would wait the full `--inflight-wait` for the one before."""
    if binder is None and config.inflight_wait > 0:
        log.debug("in-flight accounting off: no API access to bind pods or watch binds",
                  extra={"inflight_wait": config.inflight_wait})
        return 0.0
    return config.inflight_wait
