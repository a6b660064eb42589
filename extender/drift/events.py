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

import socket
import time
from collections.abc import Callable
from typing import Any

from extender import metrics
from extender.drift.evaluate import REQUIRED
from extender.drift.shapes import Key
from extender.events import Correlator, OfferQueue, pod_event, write_event
from extender.ratelimit import TokenBucket

REASON = "NodeConstraintsViolated"
QUEUE = 1024  # pods waiting for their event (the latest offer per pod)
RATE, BURST = 5.0, 20  # events written per second


def drift_message(node: str, violations: tuple) -> str:
    """What the event says: every `required` violation, with its details."""
    parts = ["; ".join([f"{v.plugin}: {v.reason}", *v.details]) for v in violations if v.severity == REQUIRED]
    return f"node {node} no longer satisfies this pod's scheduling constraints: " + " | ".join(parts)


class DriftEvents(OfferQueue):
    """The queue, the thread and the correlator (see the module docstring)."""

    thread_name = "drift-events"

    def __init__(self, sink: Any, clock: Callable[[], float] = time.time, rate: float = RATE,
                 burst: int = BURST, queue_size: int = QUEUE) -> None:
        super().__init__(queue_size)
        self.sink = sink
        self.clock = clock
        self.correlator = Correlator(clock)
        self.budget = TokenBucket(rate, burst)
        self.instance = socket.gethostname()

    def offer(self, key: Key, drifted: Any) -> None:
        """A pod newly drifted (from the tracker's thread): queued, never waited for."""
        self._enqueue(key, drifted)

    def _handle(self, key: Key, drifted: Any) -> None:
        wait = self.budget.try_take()
        while wait and not self._stop:
            time.sleep(wait)
            wait = self.budget.try_take()
        self.record(key, drifted)

    def record(self, key: Key, drifted: Any) -> str:
        event = pod_event(key[0], key[1], drifted.uid, drift_message(drifted.node, drifted.violations),
                          self.clock(), self.instance, reason=REASON)
        return self._count(write_event(self.correlator, self.sink, event))

    def _dropped(self) -> None:
        self._count("dropped")

    def _failed(self) -> None:
        self._count("error")

    @staticmethod
    def _count(result: str) -> str:
        metrics.DRIFT_EVENTS_TOTAL.labels(result).inc()
        return result
