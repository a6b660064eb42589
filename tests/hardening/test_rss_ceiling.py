"""The documented RSS ceiling holds under the memory attacks of issue #28
(docs/operate/hardening.md): a worker's resident memory stays under

    cluster state and process (measured before the attack) + --memory-limit-bytes
    + 7 x --max-inflight-bytes

while Nodes-mode requests, stalled bodies and large AdmissionReviews all arrive at
once, more than the budget holds (before the budget, 8 concurrent 21 MB Nodes-mode
requests took the worker to 1,048 MB). Small limits keep the test quick; `make perf`'s
`python -m perf.attacks` measures the defaults."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pytest

from perf import attacks

MIB = 1 << 20
MEMORY_LIMIT = 16 * MIB
INFLIGHT = 24 * MIB
MAX_BODY = 8 * MIB


@pytest.mark.gunicorn
def test_rss_stays_under_the_ceiling_under_every_memory_attack_at_once():
    target = attacks.Target(Path(tempfile.mkdtemp(prefix="rss-ceiling-")), [
        "--memory-limit-bytes", str(MEMORY_LIMIT), "--max-inflight-bytes", str(INFLIGHT),
        "--max-body-bytes", str(MAX_BODY)])
    target.start()
    stop = threading.Event()
    try:
        worker = target.worker()
        base = worker.memory_info().rss
        rss = attacks.PeakRSS(worker)
        jobs = [lambda: attacks.nodes_mode(target, stop, count=8, size=7 * MIB),
                lambda: attacks.stalled_bodies(target, stop, count=16, size=7 * MIB),
                lambda: attacks.reviews(target, stop, count=6)]
        threads = [threading.Thread(target=job, daemon=True) for job in jobs]
        for t in threads:
            t.start()
        probe, verbs = attacks.streams(target)[1::-1]
        answered = 0
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            assert probe.call() == 200  # within kubelet's 1 s timeout
            answered += verbs.call() == 200
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        peak = rss.close()
        assert target.alive()
    finally:
        stop.set()
        target.stop()
    ceiling = MEMORY_LIMIT + 7 * INFLIGHT
    assert peak - base <= ceiling, f"{(peak - base) / MIB:.0f} MiB over the base, ceiling {ceiling / MIB:.0f} MiB"
    assert answered >= 30  # the scheduler's ordinary /filter went through meanwhile
