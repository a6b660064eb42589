"""One in-flight byte budget for every request body a worker process holds.

`--memory-limit-bytes` bounds the caches; this bounds the requests: the bytes of every
request being received or answered, on every listener of the process (the verbs'
port, `--metrics-listen`, the webhook: `extender.server.listener`), count against
`--max-inflight-bytes`. A request that would take the total over it is shed: 503 with
`Retry-After` (kube-scheduler and the API server retry), before more of it is read.

The last `SMALL_RESERVE` bytes are kept for small requests (at most `SMALL_REQUEST`
bytes, head included: every NodeNames request kube-scheduler sends at 15,000 nodes, a
probe, an AdmissionReview of an ordinary pod), so large bodies in flight never shed the
scheduler's ordinary calls. Charges are held bytes, not declared sizes: a client that
declares 30 MB and stalls holds only what it sent, for at most the request deadline.

Answering a request costs memory too (a parsed Nodes-mode body and its answer are ~6x
its JSON, measured in docs/operate/hardening.md): the RSS ceiling is documented as
cluster state + caches (`--memory-limit-bytes`) + 7 x this budget.
"""

from __future__ import annotations

import threading

DEFAULT_LIMIT = 48 << 20  # one --max-body-bytes request (32 MiB) and the reserve for small ones
SMALL_REQUEST = 1 << 20  # head + body; a NodeNames request for 15,000 nodes is ~0.7 MiB
SMALL_RESERVE = 16 << 20
RETRY_AFTER_SECONDS = 1


class BodyBudget:
    """Bytes held for requests, all listeners of the process together."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def configure(self, limit: int) -> None:
        self.limit = limit

    def acquire(self, size: int, total: int) -> bool:
        """Take `size` more bytes for a request that holds `total` bytes with them; False
        (nothing taken) if that would pass the limit (for a large request, the limit
        less the reserve kept for small ones)."""
        if size <= 0:
            return True
        cap = self.limit if total <= SMALL_REQUEST else max(self.limit - SMALL_RESERVE, 0)
        with self._lock:
            if self.held + size > cap:
                shed = True
            else:
                self.held += size
                shed = False
        _export(self.held)
        return not shed

    def release(self, size: int) -> None:
        if size <= 0:
            return
        with self._lock:
            self.held -= size
        _export(self.held)

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


def _export(held: int) -> None:
    from extender import metrics  # not at import: multiprocess metrics are set up first

    metrics.INFLIGHT_REQUEST_BYTES.set(held)


def shed(listener: str) -> None:
    """Count one shed request (`extender_requests_shed_total{listener}`)."""
    from extender import metrics

    metrics.REQUESTS_SHED_TOTAL.labels(listener).inc()


BODIES = BodyBudget()  # the process's budget; `configure`d from the config by the app
