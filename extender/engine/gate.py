"""No verdict on a partial or stale cluster state: "Error, never a guess".

kube-scheduler trusts every answer and calls its extender whatever our `/readyz` says
(a sidecar on loopback is not behind a Service). Right after a start or restart, before
every watched kind has listed once, a filter would judge against a partial state (no
pods: every spread looks balanced); after the API server stopped confirming the state
for `--max-staleness`, against a frozen one. In both cases each verb refuses instead:
`filter` and `bind` answer an `Error` (kube-scheduler fails the cycle or the binding
and retries the pod with backoff), `prioritize` and `preempt`, which have no Error
field, answer HTTP 503 (kube-scheduler fails the preemption attempt; a failed
prioritize only loses our scores). A verdict also waits for the kinds it reads to be
confirmed current when the live source doubts them (`check_current`: a bind the watch
did not show in time, a relist). Every refusal counts in
`extender_unready_answers_total{verb,reason}`; a warning line says so at most every
`LOG_EVERY` seconds per reason, with the number of refusals since the last line.
"""

from __future__ import annotations

import logging
import threading
import time

from extender import metrics
from extender.state import ClusterSource

log = logging.getLogger("extender.state")

LOG_EVERY = 10.0


class StateNotReady(RuntimeError):
    """The cluster state cannot give a verdict now; the message says why."""


class Gate:
    """Asks the source whether a verdict may be computed (its `unready()`: the live
    source's and the unconfigured one's can say no)."""

    def __init__(self, source: ClusterSource) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._logged: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def refusal(self, verb: str) -> str | None:
        """None when `verb` may answer; otherwise the Error message (counted, logged)."""
        why = self.source.unready()
        if why is None:
            return None
        return self.refuse(verb, *why)

    def refuse(self, verb: str, reason: str, message: str) -> str:
        """Count and (at most every `LOG_EVERY` seconds per reason) log a refusal;
        returns `message`."""
        metrics.child(metrics.UNREADY_ANSWERS_TOTAL, verb, reason).inc()
        now = time.monotonic()
        with self._lock:
            if now - self._logged.get(reason, -LOG_EVERY) < LOG_EVERY:
                self._quiet[reason] = self._quiet.get(reason, 0) + 1
                return message
            self._logged[reason] = now
            suppressed = self._quiet.pop(reason, 0)
        log.warning("cluster state cannot give a verdict; answering Error",
                    extra={"verb": verb, "reason": reason, "state": message, "refused_since_last_line": suppressed})
        return message

    def check(self, verb: str) -> None:
        """Raise StateNotReady when `verb` may not answer."""
        message = self.refusal(verb)
        if message is not None:
            raise StateNotReady(message)

    def check_current(self, verb: str, kinds) -> None:
        """Raise StateNotReady when a kind among `kinds`, which the verdict reads, is
        not confirmed current (the source's `unconfirmed`: a recheck or a relist)."""
        why = self.source.unconfirmed(kinds)
        if why is not None:
            raise StateNotReady(self.refuse(verb, *why))
