"""Pods in flight: answered by our `filter`, not yet visible as bound in cluster state.

kube-scheduler *assumes* pod A in its cache and starts pod B's scheduling cycle while
A's binding runs in a goroutine; in-tree PodTopologySpread counts A at once. We learn
A's node only from our `bind` verb (or, without `bindVerb`, from the watch), so a burst
of replicas would otherwise see the same counts and violate maxSkew.

The design (docs/reference/bind-preempt.md):

* **pending**: after answering `filter` for A with at least one feasible node, A is
  pending: it will come back through `bind` (kube-scheduler runs one scheduling cycle
  at a time, so by the time B's `filter` arrives A's cycle is over).
* **settle**: before answering `filter`/`prioritize`/`preempt` for B, wait until no
  other pod of B's namespace is pending (only same-namespace pods are ever counted by
  topology spread), up to `wait` seconds after that pod was answered. A pod that never
  comes back (another extender or a Reserve plugin rejected it, it was deleted, the
  scheduler restarted) therefore costs the next pod of its namespace at most `wait`.
* **assumed**: `bind` turns A into an assumed pod on its node *before* calling the API
  (as kube-scheduler's `assume`), in the cluster state's `Store` (its assumed-pods
  overlay on the pod layer). An assumption ends when the watch shows the pod bound,
  when the API call fails (`forget`), or `ttl` seconds after the bind (a watch that
  lags longer than that undercounts; the default is far above its normal latency).
  A source without a store (a static snapshot: explain, unit tests) records none.

Waiting never happens on a thread that must not block (the gunicorn worker's event
loop, which must stay free to read A's `bind`): `may_block()` says whether the current
thread may wait; InlineWorker hands `bind`, and any verb while pods are pending, to
its pool (`extender.server.verbs.off_loop`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from extender import metrics
from extender.model import Pod

log = logging.getLogger("extender.inflight")

Key = tuple[str, str]  # (namespace, name)


@dataclass(slots=True)
class _Pending:
    pod: Pod
    since: float


def may_block() -> bool:
    """Only pool threads wait: the main thread of a gunicorn worker runs its event loop."""
    return threading.current_thread() is not threading.main_thread()


class InFlight:
    """Pending pods of one process, and assumptions through the source's store."""

    def __init__(self, source, wait: float = 1.0, ttl: float = 30.0, clock=time.monotonic) -> None:
        self.source = source
        self.store = getattr(source, "store", None)  # FileSource and LiveSource have one
        self.wait = wait
        self.ttl = ttl
        self.clock = clock
        self._cond = threading.Condition()
        self._pending: dict[Key, _Pending] = {}

    @property
    def enabled(self) -> bool:
        return self.wait > 0

    # --- filter: pending ------------------------------------------------------------

    def answered(self, pod: Pod) -> None:
        """A's filter answer named at least one feasible node: A will come back."""
        if not self.enabled:
            return
        with self._cond:
            self._pending[(pod.namespace, pod.name)] = _Pending(pod, self.clock())
            self._gauge()

    def has_pending(self) -> bool:
        return bool(self._pending)

    def settle(self, pod: Pod) -> None:
        """Block until no other pod of `pod`'s namespace is pending (each waited for at
        most `wait` seconds after it was answered). A pending pod the state already
        shows on a node is done (bound by us, or, without bindVerb, seen by the watch)."""
        if not self.enabled or not self._pending or not may_block():
            return
        key = (pod.namespace, pod.name)
        started = self.clock()
        with self._cond:
            while True:
                now = self.clock()
                self._expire(now)
                blocking = [k for k in self._pending if k[0] == pod.namespace and k != key]
                if blocking:
                    blocking = self._unconfirmed(blocking)
                if not blocking:
                    break
                deadline = min(self._pending[k].since for k in blocking) + self.wait
                self._cond.wait(timeout=min(max(deadline - now, 0.0), 0.005))
        metrics.INFLIGHT_WAIT_SECONDS.observe(self.clock() - started)

    def _unconfirmed(self, blocking: list[Key]) -> list[Key]:
        """Under the lock: drop the pending pods the state shows on a node."""
        layer = self.source.snapshot().pod_layer
        left = []
        for k in blocking:
            seen = layer.get(*k)
            if seen is not None and seen.node_name:
                del self._pending[k]
            else:
                left.append(k)
        if len(left) != len(blocking):
            self._gauge()
        return left

    def _expire(self, now: float) -> None:
        """Under the lock: stop waiting for pods answered more than `wait` ago."""
        late = [k for k, p in self._pending.items() if now - p.since >= self.wait]
        for k in late:
            log.warning("pod answered but never bound; no longer waiting for it",
                        extra={"pod": f"{k[0]}/{k[1]}", "waited": self.wait})
            del self._pending[k]
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
                self.store.assume(replace(pod, uid=uid or pod.uid), node, self.ttl)
                assumed = True
        with self._cond:
            self._pending.pop(key, None)
            self._gauge()
        return assumed

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
