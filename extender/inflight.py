"""Pods in flight: answered by our `filter`, not yet visible as bound in cluster state.

kube-scheduler *assumes* pod A in its cache and starts pod B's scheduling cycle while
A's binding runs in a goroutine; in-tree PodTopologySpread counts A at once. We learn
A's node only from our `bind` verb (or, without `bindVerb`, from the watch), so a burst
of replicas would otherwise see the same counts and violate maxSkew.

The design (README "Inside kube-scheduler"):

* **pending**: after answering `filter` for A with at least one feasible node, A is
  pending: it will come back through `bind` (kube-scheduler runs one scheduling cycle
  at a time, so by the time B's `filter` arrives A's cycle is over).
* **settle**: before answering `filter`/`prioritize`/`preempt` for B, wait until no
  other pod of B's namespace is pending (only same-namespace pods are ever counted by
  topology spread), up to `wait` seconds after that pod was answered. A pod that never
  comes back (another extender or a Reserve plugin rejected it, it was deleted, the
  scheduler restarted) therefore costs the next pod of its namespace at most `wait`.
* **assumed**: `bind` turns A into an assumed pod on its node *before* calling the API
  (as kube-scheduler's `assume`); every snapshot we serve is the source's plus the
  assumed pods it does not show yet. An assumption ends when the source shows the pod
  on a node (the watch confirmed it), when the API call fails (`forget`), or `ttl`
  seconds after the bind (a watch that lags longer than that undercounts; the default
  is far above the watch's normal latency).

Waiting never happens on a thread that must not block (the gunicorn worker's event
loop, which also has to answer A's `bind`): `may_block()` says whether the current
thread may wait; InlineWorker hands requests to its pool while pods are pending.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from extender import metrics
from extender.model import Pod
from extender.preemption import derived_snapshot
from extender.state import ClusterSnapshot

log = logging.getLogger("extender.inflight")

Key = tuple[str, str]  # (namespace, name)


@dataclass(slots=True)
class _Pending:
    pod: Pod
    since: float


@dataclass(slots=True)
class _Assumed:
    pod: Pod  # node_name set
    since: float


def may_block() -> bool:
    """Only pool threads wait: the main thread of a gunicorn worker runs its event loop."""
    return threading.current_thread() is not threading.main_thread()


class InFlight:
    """Pending and assumed pods of one process (see the module docstring)."""

    def __init__(self, wait: float = 1.0, ttl: float = 30.0, clock=time.monotonic) -> None:
        self.wait = wait
        self.ttl = ttl
        self.clock = clock
        self._cond = threading.Condition()
        self._pending: dict[Key, _Pending] = {}
        self._assumed: dict[Key, _Assumed] = {}
        self._version = 0
        self._overlay: tuple[int, int, ClusterSnapshot, ClusterSnapshot] | None = None

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
            metrics.INFLIGHT_PODS.labels("pending").set(len(self._pending))

    def has_pending(self) -> bool:
        return bool(self._pending)

    def settle(self, pod: Pod, snapshot_of=None) -> None:
        """Block until no other pod of `pod`'s namespace is pending (each waited for at
        most `wait` seconds after it was answered). `snapshot_of()` is consulted while
        waiting: a pending pod the source already shows on a node is done (no bindVerb,
        or a bind answered by another process)."""
        if not self.enabled or not self._pending or not may_block():
            return
        key = (pod.namespace, pod.name)
        started = self.clock()
        with self._cond:
            while True:
                now = self.clock()
                self._expire(now)
                blocking = [p for k, p in self._pending.items() if k[0] == pod.namespace and k != key]
                if blocking and snapshot_of is not None:
                    blocking = self._unconfirmed(blocking, snapshot_of())
                if not blocking:
                    break
                deadline = min(p.since for p in blocking) + self.wait
                self._cond.wait(timeout=min(max(deadline - now, 0.0), 0.005))
        metrics.INFLIGHT_WAIT_SECONDS.observe(self.clock() - started)

    def _unconfirmed(self, blocking: list[_Pending], snapshot: ClusterSnapshot) -> list[_Pending]:
        bound = bound_keys(snapshot)
        done = [p for p in blocking if (p.pod.namespace, p.pod.name) in bound]
        for p in done:
            self._pending.pop((p.pod.namespace, p.pod.name), None)
        return [p for p in blocking if p not in done]

    def _expire(self, now: float) -> None:
        """Under the lock: drop pendings older than `wait` and assumptions older than `ttl`."""
        late = [k for k, p in self._pending.items() if now - p.since >= self.wait]
        for k in late:
            log.warning("pod answered but never bound; no longer waiting for it",
                        extra={"pod": f"{k[0]}/{k[1]}", "waited": self.wait})
            del self._pending[k]
            metrics.INFLIGHT_EXPIRED_TOTAL.labels("pending").inc()
        old = [k for k, a in self._assumed.items() if now - a.since >= self.ttl]
        for k in old:
            log.warning("assumed pod never confirmed by the cluster state; forgetting it",
                        extra={"pod": f"{k[0]}/{k[1]}", "ttl": self.ttl})
            del self._assumed[k]
            metrics.INFLIGHT_EXPIRED_TOTAL.labels("assumed").inc()
        if late or old:
            self._changed()

    # --- bind: assumed --------------------------------------------------------------

    def assume(self, namespace: str, name: str, uid: str, node: str, known: Pod | None = None) -> bool:
        """A's bind: assume it on `node` (before the API call). False when we know
        nothing of the pod (never filtered here, not in the cluster state)."""
        key = (namespace, name)
        with self._cond:
            pending = self._pending.pop(key, None)
            pod = pending.pod if pending is not None else known
            if pod is None:
                self._cond.notify_all()
                return False
            self._assumed[key] = _Assumed(replace(pod, node_name=node, uid=uid or pod.uid, raw=None), self.clock())
            self._changed()
        return True

    def forget(self, namespace: str, name: str) -> None:
        """The binding failed: the pod is neither pending nor assumed any more."""
        with self._cond:
            self._pending.pop((namespace, name), None)
            if self._assumed.pop((namespace, name), None) is not None:
                self._changed()
            self._cond.notify_all()

    def pending_pod(self, namespace: str, name: str) -> Pod | None:
        with self._cond:
            p = self._pending.get((namespace, name))
            return p.pod if p is not None else None

    def _changed(self) -> None:
        self._version += 1
        metrics.INFLIGHT_PODS.labels("pending").set(len(self._pending))
        metrics.INFLIGHT_PODS.labels("assumed").set(len(self._assumed))
        self._cond.notify_all()

    # --- the snapshot we serve -----------------------------------------------------------

    def overlay(self, base: ClusterSnapshot) -> ClusterSnapshot:
        """`base` plus the assumed pods it does not show on a node yet (memoized per base
        snapshot and change). Assumptions the base confirms are dropped here."""
        if not self._assumed:
            return base
        with self._cond:
            self._expire(self.clock())
            cached = self._overlay
            if cached is not None and cached[0] == id(base) and cached[1] == self._version and cached[2] is base:
                return cached[3]
            bound = bound_keys(base)
            confirmed = [k for k in self._assumed if k in bound]
            for k in confirmed:
                del self._assumed[k]
            if confirmed:
                self._changed()
            if not self._assumed:
                self._overlay = None
                return base
            assumed = {k: a.pod for k, a in self._assumed.items()}
            pods = [p for p in base.pods if (p.namespace, p.name) not in assumed]
            pods.extend(assumed.values())
            snapshot = derived_snapshot(base, pods)
            self._overlay = (id(base), self._version, base, snapshot)
            return snapshot

    def counts(self) -> dict[str, int]:
        with self._cond:
            return {"pending": len(self._pending), "assumed": len(self._assumed)}


def bound_keys(snapshot: ClusterSnapshot) -> frozenset[Key]:
    """(namespace, name) of the snapshot's pods that are on a node (once per snapshot)."""
    return snapshot.derived("bound-pod-keys", lambda s: frozenset(
        (p.namespace, p.name) for p in s.pods if p.node_name))


class InFlightSource:
    """A `ClusterSource` serving the wrapped source's snapshot plus the assumed pods."""

    def __init__(self, base, inflight: InFlight) -> None:
        self.base = base
        self.inflight = inflight

    def snapshot(self) -> ClusterSnapshot:
        return self.inflight.overlay(self.base.snapshot())

    def ready(self) -> bool:
        return self.base.ready()

    def __getattr__(self, name: str):  # reload(), stop(), ... of the wrapped source
        return getattr(self.base, name)
