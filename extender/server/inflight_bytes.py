"""In-flight request bytes: each listener's own limit, never borrowed by another.

`--memory-limit-bytes` bounds the caches; these bound the requests. Every byte a
connection holds for a request (its head and body as they arrive, then what its body
becomes once parsed: `extender.api.expansion`) counts against its listener's budget. A
request that would take its budget over the limit is shed: 503 with `Retry-After`,
before more of it is read.

One budget shared by the whole process would let stalled bodies on the unauthenticated
metrics port take every byte, and kube-scheduler's `/filter` and the kubelet's probes
would be shed with them. So:

* the verbs' listener owns `--max-inflight-bytes` (`VERBS_INFLIGHT_BYTES`), with the last
  `SMALL_RESERVE` bytes kept for small requests (at most `SMALL_REQUEST` bytes: every
  NodeNames request kube-scheduler sends at 15,000 nodes);
* `--metrics-listen` (`SIDE_LIMIT`) and the webhook (`WEBHOOK_LIMIT`), reachable by
  clients the extender does not authenticate, each have a small budget of their own and
  no reserve: filling one sheds only its own listener's requests;
* a request that cannot be charged first makes room (`extender.server.connections`):
  incomplete requests holding more than it needs, of the client holding the most, are
  closed. So a client holding stalled bodies never locks a probe out of its own
  listener either.

Charges are held bytes, not declared sizes: a client that declares 30 MB and stalls
holds what it sent, for at most the request deadline (and the minimum send rate).

The RSS ceiling (docs/operate/hardening.md) is cluster state + caches
(`--memory-limit-bytes`) + 7 x the budgets of the listeners started.
"""

from __future__ import annotations

import threading
import weakref

from extender import metrics
from extender.config import SMALL_REQUEST, SMALL_RESERVE
from extender.state import gcfreeze

DEFAULT_LIMIT = 48 << 20  # one --max-body-bytes request (32 MiB) and the reserve for small ones
SIDE_LIMIT = 2 << 20  # --metrics-listen: heads, and POST /explain bodies of at most 1 MiB
WEBHOOK_LIMIT = 10 << 20  # one AdmissionReview of the 8 MiB limit, with its head
RETRY_AFTER_SECONDS = 1

_ALL: weakref.WeakSet[InflightBytes] = weakref.WeakSet()  # the process's budgets: the gauge is their sum
_ALL_LOCK = threading.Lock()
_untrimmed = [0]  # bytes of large requests released since the C heap was last trimmed


class InflightBytes:
    """The in-flight byte budget of one listener: bytes held for its requests (`reserve`: the last bytes only
    requests of at most `SMALL_REQUEST` may take)."""

    def __init__(self, limit: int = DEFAULT_LIMIT, reserve: int = 0, name: str = "") -> None:
        self.limit = limit
        self.reserve = reserve
        self.name = name
        self.held = 0
        self._lock = threading.Lock()
        with _ALL_LOCK:
            _ALL.add(self)

    def configure(self, limit: int) -> None:
        self.limit = limit

    def cap(self, total: int) -> int:
        """What a request holding `total` bytes may take the budget up to."""
        return self.limit if total <= SMALL_REQUEST else max(self.limit - self.reserve, 0)

    def fits_ever(self, total: int) -> bool:
        """Whether a request of `total` bytes fits in this budget when it is empty."""
        return total <= self.cap(total)

    def available(self, total: int) -> int:
        """Bytes a request that would hold `total` may still take."""
        return max(0, self.cap(total) - self.held)

    def acquire(self, size: int, total: int) -> bool:
        """Take `size` more bytes for a request that holds `total` bytes with them; False
        (nothing taken) if that would pass the limit (for a large request, the limit
        less the reserve kept for small ones)."""
        if size <= 0:
            return True
        cap = self.cap(total)
        with self._lock:
            if self.held + size > cap:
                return False
            self.held += size
        _export()
        return True

    def release(self, size: int) -> None:
        if size <= 0:
            return
        with self._lock:
            self.held -= size
        held = _export()
        if size > SMALL_REQUEST or _untrimmed[0]:
            _trim_when_idle(size if size > SMALL_REQUEST else 0, held)

    def charge(self, holder, total: int) -> bool:
        """Set the bytes `holder` (an object with a `charged` attribute) holds to
        `total`: shrinking always works, growing may be refused (then nothing changes)."""
        had = getattr(holder, "charged", 0)
        if total <= had:
            self.release(had - total)
            holder.charged = total
            return True
        if not self.acquire(total - had, total):
            return False
        holder.charged = total
        return True


def _export() -> int:
    with _ALL_LOCK:
        held = sum(b.held for b in _ALL)
    metrics.INFLIGHT_REQUEST_BYTES.set(held)
    return held


def _trim_when_idle(large: int, held: int) -> None:
    """Once large requests' bytes were released and no listener holds any (`held`
    0), trim the C heap (`gcfreeze.trim_heap`). Bodies that are buffered and never
    parsed (stalled, refused, cut) leave their pages with the allocator otherwise, and
    the worker's RSS creeps up round after round of them. Small
    requests never trigger it (kube-scheduler's NodeNames requests stay under
    `SMALL_REQUEST`), so ordinary traffic never pays for it."""
    with _ALL_LOCK:
        _untrimmed[0] += large
        due = held == 0 and _untrimmed[0] > 0
        if due:
            _untrimmed[0] = 0
    if due:
        gcfreeze.trim_heap()


def shed(listener: str) -> None:
    """Count one shed request (`extender_requests_shed_total{listener}`)."""
    metrics.REQUESTS_SHED_TOTAL.labels(listener).inc()


# the verbs' listener's: `configure`d from --max-inflight-bytes by the app
VERBS_INFLIGHT_BYTES = InflightBytes(DEFAULT_LIMIT, SMALL_RESERVE, "verbs")
