"""Events on drifted pods (`--drift-events`): when a running pod's node stops meeting a
`required` constraint, one Warning Event on the pod says which, in `extender explain`'s
words, e.g.

    node n-17 no longer satisfies this pod's scheduling constraints: TaintToleration:
    taint example.com/sla=500:NoSchedule is not tolerated; toleration[0]
    example.com/sla Gt '750' (NoSchedule): does not tolerate: taint value 500 is not
    greater than 750

Written the way `--record-events` writes its events (`extender.events`): client-go's
correlator (identical events counted with a PATCH, 25 per pod then one per 5 minutes,
similar ones combined), through the live source's API access, off every request path
(a queue keeping the latest offer per pod, its own thread, and a token bucket so that a
node change drifting thousands of pods does not flood the API server).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from extender.drift.evaluate import REQUIRED
from extender.drift.shapes import Key
from extender.events import Correlator, pod_event, write_event
from extender.ratelimit import TokenBucket

log = logging.getLogger("extender.drift")

REASON = "NodeConstraintsViolated"
QUEUE = 1024  # pods waiting for their event (the latest offer per pod)
RATE, BURST = 5.0, 20  # events written per second


def drift_message(node: str, violations: tuple) -> str:
    """What the event says: every `required` violation, with its details."""
    parts = ["; ".join([f"{v.plugin}: {v.reason}", *v.details]) for v in violations if v.severity == REQUIRED]
    return f"node {node} no longer satisfies this pod's scheduling constraints: " + " | ".join(parts)


class DriftEvents:
    """The queue, the thread and the correlator (see the module docstring)."""

    def __init__(self, sink: Any, clock: Callable[[], float] = time.time, rate: float = RATE,
                 burst: int = BURST, queue_size: int = QUEUE) -> None:
        self.sink = sink
        self.clock = clock
        self.correlator = Correlator(clock)
        self.budget = TokenBucket(rate, burst)
        self.queue_size = queue_size
        self.instance = socket.gethostname()
        self._pending: OrderedDict[Key, tuple[str, Any]] = OrderedDict()
        self._cond = threading.Condition()
        self._pid = 0
        self._busy = False
        self._stop = False

    def offer(self, key: Key, drifted: Any) -> None:
        """A pod newly drifted (from the tracker's thread): queued, never waited for."""
        with self._cond:
            if key not in self._pending and len(self._pending) >= self.queue_size:
                self._pending.popitem(last=False)
                self._count("dropped")
            self._pending[key] = (drifted.uid, drifted)
            self._pending.move_to_end(key)
            self._cond.notify()
        if self._pid != os.getpid():
            self._start()

    def _start(self) -> None:
        with self._cond:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="drift-events", daemon=True).start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def drain(self, timeout: float = 10.0) -> bool:
        """Until the queue is empty (tests)."""
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
                key, (uid, drifted) = self._pending.popitem(last=False)
                self._busy = True
            try:
                wait = self.budget.try_take()
                while wait and not self._stop:
                    time.sleep(wait)
                    wait = self.budget.try_take()
                self.record(key, uid, drifted)
            except Exception:  # noqa: BLE001 - a bug here must not end the thread
                log.exception("recording a drift event failed")
                self._count("error")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def record(self, key: Key, uid: str, drifted: Any) -> str:
        event = pod_event(key[0], key[1], uid, drift_message(drifted.node, drifted.violations), self.clock(),
                          self.instance, reason=REASON)
        return self._count(write_event(self.correlator, self.sink, event))

    @staticmethod
    def _count(result: str) -> str:
        from extender import metrics

        metrics.DRIFT_EVENTS_TOTAL.labels(result).inc()
        return result
