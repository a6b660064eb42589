"""Scheduling first: kube-scheduler's calls before an admin's report.

One worker process serves the verbs (kube-scheduler's `/filter`, `/prioritize`,
`/bind`) and its side listener (`/drift`, `/explain`, `/metrics`) under one GIL. Two
cores do not help there: while a side thread runs Python, a `/filter` that arrives
waits for the GIL, then shares it with that thread one switch interval at a time, so
a report built beside it doubles or triples its latency. Admin work can wait a few
milliseconds; kube-scheduler's sequential scheduling cycle cannot.

So the verbs' listener says when it is at work (`enter`/`leave`: its event loop from
the moment `select` returns events until it goes back to wait, a pool thread of its while
it answers), and admin work calls `yield_to()` at its checkpoints (a queued side request
before it starts, the side listener's loop before each event, a report before it is
written out, the drift report's sort between runs): while the verbs' listener is at work
it waits, releasing the GIL and not asking for it back, at most `MOST` seconds per
checkpoint (the side loop less: it answers the health probes), so admin answers are
delayed, never starved, by a busy scheduler.
"""

from __future__ import annotations

import threading

#: The longest one checkpoint waits for the verbs' loop (seconds): a scheduler that is
#: at work without a pause delays an admin request by this much per checkpoint, not more.
MOST = 0.02


class Foreground:
    """Whether the verbs' loop is at work now, and a place for admin work to wait
    until it is not."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.working: dict[int, int] = {}  # thread -> turns at work now (a loop's thread)
        self.waiting = 0  # admin threads waiting now

    def enter(self) -> None:
        me = threading.get_ident()
        with self._cond:
            self.working[me] = self.working.get(me, 0) + 1

    def leave(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self.working[me] == 1:
                del self.working[me]
            else:
                self.working[me] -= 1
            if not self.working and self.waiting:
                self._cond.notify_all()

    def yield_to(self, most: float | None = None) -> bool:
        """Wait while the verbs' loop is at work, at most `most` seconds (`MOST`); True if it
        was idle when this returned (at once when it was idle: one read, no lock; and
        on the loop's own thread, which never waits for itself)."""
        if not self.working or threading.get_ident() in self.working:
            return True
        with self._cond:
            self.waiting += 1
            try:
                return self._cond.wait_for(lambda: not self.working, MOST if most is None else most)
            finally:
                self.waiting -= 1


#: The process's one foreground: the verbs' listeners mark it, admin work yields to it.
FOREGROUND = Foreground()

__all__ = ["FOREGROUND", "MOST", "Foreground"]
