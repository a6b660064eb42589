"""When the live state may answer: readiness, liveness, and the suspicion raised when a
bind or a pod kube-scheduler asks about shows the watches behind.

A bind this extender made is a liveness probe of the watches as well (`check_binds`):
the Pod watch must show a pod the API bound within `bind_watch_timeout` seconds; so is
each pod kube-scheduler asks about (`await_version`): its informer's copy carries a
resourceVersion our Pod watch must reach within that time. When one does not, every
kind is suspect at once (`suspect`): each is probed right away (`Watchdog.probe`), in
parallel, and verdicts that read a suspect kind are refused (`unconfirmed`) until a
probe that started after the suspicion (or a relist) has found it current. A kind
being relisted is unconfirmed the same way: its objects are mid-replacement.

Readiness (and whether the verbs may answer at all, `unready`): every kind's initial
list has synced, and every kind was confirmed current (a list, an event, a bookmark or
a probe) within `max_staleness` seconds. Liveness (`liveness`): the state was ready
within the last `max_unready` seconds; a process whose state cannot recover (a wedged
client, a watch that never comes back) fails `/healthz` and is restarted.

Kept apart from the reflectors that feed the state: this module only reads their
health marks, and the kube-scheduler-facing verbs call it on every request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from extender import metrics
from extender.state.reflector import Reflector
from extender.state.store import KINDS, Store
from extender.state.watchdog import Watchdog

log = logging.getLogger("extender.state")

RECHECK_PAUSE, RECHECK_MAX_PAUSE = 0.1, 5.0  # between rounds of probes while a kind is unconfirmed
AWAIT_STEP = 0.002  # seconds between looks while a verdict waits for the watch to catch up


class Readiness:
    """The readiness, liveness and suspicion of a set of reflectors (`LiveSource`'s)."""

    store: Store
    reflectors: dict[str, Reflector]
    watchdogs: dict[str, Watchdog]

    def __init__(self, max_staleness: float, bind_watch_timeout: float, max_unready: float) -> None:
        """`bind_watch_timeout`: seconds the Pod watch may take to show a pod we bound (0:
        not checked). `max_unready`: seconds unready before `liveness` fails (0: never)."""
        self.max_staleness = max_staleness
        self.bind_watch_timeout = bind_watch_timeout
        self.max_unready = max_unready
        self._ready_at = time.monotonic()  # the state was last ready (or the process started)
        self._suspicion = threading.Lock()  # one round of probes at a time
        self._suspected_binds = 0.0  # binds before this were looked into already
        self._all_synced = False

    def unready(self) -> tuple[str, str] | None:
        """Why no verdict may be computed now, as (reason, message), or None: a kind has
        not listed once yet ("not_synced"), or a kind was last confirmed current more
        than `max_staleness` seconds ago ("stale"). Cheap: called on every verb."""
        reflectors = self.reflectors
        if not self._all_synced:
            waiting = [k for k, r in reflectors.items() if not r.synced.is_set()]
            if waiting:
                return "not_synced", "cluster state not synced yet: initial list pending for " + ", ".join(waiting)
            self._all_synced = True  # as an informer's HasSynced: a later relist keeps it
        now = time.monotonic()
        limit = self.max_staleness
        stale = [k for k, r in reflectors.items() if now - r.confirmed_at > limit]
        if not stale:
            self._ready_at = now
            return None
        detail = ", ".join(f"{k} ({now - reflectors[k].confirmed_at:.0f}s"
                           + (", failing" if reflectors[k].failing_since is not None else "") + ")" for k in stale)
        return "stale", f"cluster state stale: not confirmed by the API server within {limit:g}s: {detail}"

    def unconfirmed(self, kinds: Iterable[str] = KINDS) -> tuple[str, str] | None:
        """("unconfirmed", message) when a verdict reading `kinds` may not be computed
        now: one of them is suspect (`suspect`) or relisting; else None. Looks at the
        binds first (`check_binds`). Cheap: called on every verdict."""
        self.check_binds()
        now = time.monotonic()
        doubtful = []
        for kind in kinds:
            reflector = self.reflectors[kind]
            if reflector.relisting:
                doubtful.append(f"{kind} (relisting)")
            elif reflector.unconfirmed_since is not None:
                doubtful.append(f"{kind} (rechecking for {now - reflector.unconfirmed_since:.1f}s)")
        if not doubtful:
            return None
        return "unconfirmed", ("cluster state not confirmed current: " + ", ".join(doubtful)
                               + (f"; {self._suspect_why}" if self._suspect_why else ""))

    _suspect_why = ""

    def check_binds(self) -> None:
        """A pod the API bound for us that the Pod watch has not shown within
        `bind_watch_timeout`: the watches may be stuck; `suspect` every kind."""
        if self.bind_watch_timeout <= 0:
            return
        oldest = self.store.oldest_unconfirmed_bind(after=self._suspected_binds)
        if oldest is None:
            return
        (namespace, name), bound_at = oldest
        waited = time.monotonic() - bound_at
        if waited > self.bind_watch_timeout:
            self.suspect(f"the watch has not shown pod {namespace}/{name}, bound {waited:.1f}s ago")

    def behind(self, kind: str, rv: str) -> bool:
        """Is our `kind` state older than resourceVersion `rv` (an object's, as the
        scheduler holds it)? False when either is not a number (an API server whose
        resourceVersions are not etcd revisions) or `bind_watch_timeout` is off."""
        ours = self.store.version_of(kind)
        if self.bind_watch_timeout <= 0 or not ours.isdigit() or not rv.isdigit():
            return False
        return int(ours) < int(rv)

    def await_version(self, kind: str, rv: str, what: str) -> bool:
        """Wait until our `kind` state reaches `rv` (at most `bind_watch_timeout`): the
        scheduler's informer already saw `what` there, so a watch that cannot catch up
        is stuck, and every kind is suspected (`suspect`). True when caught up."""
        deadline = time.monotonic() + self.bind_watch_timeout
        while self.behind(kind, rv):
            if time.monotonic() >= deadline:
                self.suspect(f"the scheduler has {what} at resourceVersion {rv}; the {kind} watch is at "
                             f"{self.store.version_of(kind)}")
                return False
            time.sleep(AWAIT_STEP)
        return True

    def suspect(self, why: str) -> bool:
        """Every kind is unconfirmed from now until a probe (or relist) that starts
        after now finds it current; the probes start at once, in parallel. False when a
        round is already running."""
        if not self._suspicion.acquire(blocking=False):
            return False
        now = time.monotonic()
        self._suspected_binds = now
        self._suspect_why = why
        for reflector in self.reflectors.values():
            if reflector.unconfirmed_since is None:
                reflector.unconfirmed_since = now
        metrics.WATCH_SUSPICIONS_TOTAL.inc()
        log.warning("the watches may be behind; probing every kind and refusing verdicts that read an "
                    "unconfirmed one", extra={"why": why})
        threading.Thread(target=self._recheck, name="recheck", daemon=True).start()
        return True

    def _recheck(self) -> None:
        """Probe the unconfirmed kinds in parallel until every one is confirmed."""
        try:
            pause = RECHECK_PAUSE
            while True:
                waiting = [r for r in self.reflectors.values()
                           if r.unconfirmed_since is not None and not r.stopping.is_set()]
                if not waiting:
                    break
                threads = [threading.Thread(target=self.watchdogs[r.kind].probe, name=f"recheck-{r.kind}", daemon=True)
                           for r in waiting if r.synced.is_set() and not r.relisting and r.resource_version]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                if any(r.unconfirmed_since is not None for r in waiting):
                    if any(r.stopping.wait(pause) for r in waiting[:1]):
                        break
                    pause = min(pause * 2, RECHECK_MAX_PAUSE)
            log.info("every kind confirmed current again", extra={"why": self._suspect_why})
        finally:
            self._suspect_why = ""
            self._suspicion.release()

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): the verbs' condition (`unready`)."""
        metrics.CLUSTER_STATE_AGE.set(self.age())
        why = self.unready()
        return (True, "ok") if why is None else (False, why[1])

    def liveness(self) -> tuple[bool, str]:
        """(alive, why): false once the state has been unready for `max_unready` seconds
        (a process that cannot recover is better restarted)."""
        why = self.unready()
        if why is None or self.max_unready <= 0:
            return True, "ok"
        unready_for = time.monotonic() - self._ready_at
        if unready_for < self.max_unready:
            return True, "ok"
        return False, (f"cluster state unready for {unready_for:.0f}s (--max-unready {self.max_unready:g}): "
                       f"{why[1]}")

    def ready(self) -> bool:
        return self.readiness()[0]

    def age(self) -> float:
        """Seconds since the least recently confirmed kind was last confirmed current."""
        return max((r.unconfirmed_for() for r in self.reflectors.values()), default=0.0)
