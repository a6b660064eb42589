"""The documented RSS ceiling holds under the memory attacks (docs/operate/hardening.md):
a worker's resident memory stays under

    cluster state and process (measured before the attack) + --memory-limit-bytes
    + 7 x the in-flight budgets (--max-inflight-bytes for the verbs, 2 MiB for
      --metrics-listen, 10 MiB for the webhook)

and returns to within 10% of where it started once the attack is over. Issue #28's
attacks run at once (before the budget, 8 concurrent 21 MB Nodes-mode requests took the
worker to 1,048 MB); issue #35's one by one: bodies of empty lists, which grow ~18x
once parsed (a 31 MiB one took a worker from 47 MB to over 1 GB), and a flood of 8 MiB
reviews (which left 169-197 MB resident). Small limits keep the tests quick; `make
test-long` sends the full-size empty-list body against the defaults, and `python -m
perf.attacks` measures every scenario.

No verdict rests on the clock (issue 36): an attack runs for its seconds and until the
scheduler's ordinary /filter has been answered ANSWERS times, however long a busy machine
takes, and the health probe's timeout scales with the probe's own latency measured before
the attack."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from extender.server.inflight_bytes import DEFAULT_LIMIT, SIDE_LIMIT, WEBHOOK_LIMIT
from perf import attacks
from testing import kubelet

MIB = 1 << 20
MEMORY_LIMIT = 16 * MIB
INFLIGHT = 24 * MIB
MAX_BODY = 8 * MIB
SMALL = ["--memory-limit-bytes", str(MEMORY_LIMIT), "--max-inflight-bytes", str(INFLIGHT),
         "--max-body-bytes", str(MAX_BODY)]
RETURNED = 1.10  # RSS back within 10% of its start
RETURN_SECONDS = 60.0  # waited for at most ("a minute later"); it returns at once
ANSWERS = 5  # the scheduler's /filter answered at least this often while an attack runs
GIVE_UP = 600.0  # seconds: only a worker that stopped answering gets here
HANG_GUARD = 30.0  # a probe's timeout: only a worker that stopped answering waits this long


def healthz(port: int, timeout: float) -> int:
    """GET /healthz as the kubelet sends it (OSError on a timeout)."""
    return kubelet.http_probe("HTTP", "127.0.0.1", port, "/healthz", timeout)


def ceiling(memory_limit: int = MEMORY_LIMIT, inflight: int = INFLIGHT) -> int:
    return memory_limit + 7 * (inflight + SIDE_LIMIT + WEBHOOK_LIMIT)


def attacked(server_args: list[str], jobs: list[Callable[[attacks.Target, threading.Event], None]],
             seconds: float = 8.0) -> tuple[int, int, int, list[int]]:
    """(base, peak, settled RSS, the statuses of kube-scheduler's /filters) of a worker
    under `jobs` for `seconds`, probed meanwhile: each probe must be answered. The peak
    is net of the noise a control phase measures first on the same worker (as much
    ordinary traffic, no attack): the margin is this machine's variance, not a guess."""
    target = attacks.Target(Path(tempfile.mkdtemp(prefix="rss-ceiling-")), ["--log-level", "error", *server_args])
    target.start()
    stop = threading.Event()
    try:
        worker = target.worker()
        verbs, probe, review = attacks.streams(target)
        for _ in range(20):  # warm: what ordinary traffic keeps (caches, buffers) is in the base
            assert verbs.call() == 200 and probe.call() == 200 and review.call() == 200
        base = worker.memory_info().rss
        rss = attacks.PeakRSS(worker)  # the control: ordinary traffic alone moves RSS this much
        for _ in range(20):
            assert verbs.call() == 200 and probe.call() == 200 and review.call() == 200
        noise = max(0, rss.close() - base)
        base = worker.memory_info().rss
        rss = attacks.PeakRSS(worker)
        threads = [threading.Thread(target=job, args=(target, stop), daemon=True) for job in jobs]
        for t in threads:
            t.start()
        answered = []
        started = time.monotonic()
        while (time.monotonic() < started + seconds or len(answered) < ANSWERS) and \
                time.monotonic() < started + GIVE_UP:
            assert healthz(target.metrics_port, HANG_GUARD) == 200  # answered: "answers", not "is fast"
            answered.append(verbs.call())
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        peak = rss.close()
        until = time.monotonic() + RETURN_SECONDS
        while (settled := worker.memory_info().rss) > RETURNED * base and time.monotonic() < until:
            time.sleep(0.5)
        assert target.alive()
    finally:
        stop.set()
        target.stop()
    return base, peak - noise, settled, answered


def assert_bounded(base: int, peak: int, settled: int, limit: int) -> None:
    """`peak` less the control's noise (what ordinary traffic alone moved RSS by)."""
    assert peak - base <= limit, f"{(peak - base) / MIB:.0f} MiB over the base, ceiling {limit / MIB:.0f} MiB"
    assert settled <= RETURNED * base, f"RSS {settled / MIB:.0f} MiB a minute later, {base / MIB:.0f} MiB at the start"


@pytest.mark.gunicorn
def test_rss_stays_under_the_ceiling_under_every_memory_attack_at_once():
    base, peak, settled, answered = attacked(SMALL, [
        lambda t, s: attacks.nodes_mode(t, s, count=8, size=7 * MIB),
        lambda t, s: attacks.stalled_bodies(t, s, count=16, size=7 * MIB),
        lambda t, s: attacks.reviews(t, s, count=6)], seconds=12.0)
    assert_bounded(base, peak, settled, ceiling())
    assert len(answered) >= ANSWERS and set(answered) == {200}  # the scheduler's ordinary /filter went through


@pytest.mark.gunicorn
def test_empty_list_bodies_are_charged_what_they_become():
    """4 clients sending 8 MiB Nodes-mode bodies of empty lists (~150 MB each once
    parsed): refused (413) before they are parsed."""
    base, peak, settled, answered = attacked(SMALL, [lambda t, s: attacks.empty_lists(t, s, count=4)])
    assert_bounded(base, peak, settled, ceiling())
    assert len(answered) >= ANSWERS and set(answered) == {200}


@pytest.mark.gunicorn
def test_a_flood_of_maximum_size_reviews_leaves_nothing_behind():
    """6 clients sending 8 MiB AdmissionReviews back to back: the webhook's budget holds
    one at a time, and the memory returns afterwards."""
    base, peak, settled, answered = attacked(SMALL, [lambda t, s: attacks.reviews(t, s, count=6)])
    assert_bounded(base, peak, settled, ceiling())
    assert len(answered) >= ANSWERS and set(answered) == {200}


@pytest.mark.gunicorn
@pytest.mark.long
def test_the_full_size_empty_list_body_against_the_defaults():
    """The issue's own body: 31 MiB of empty lists under the default limits."""
    base, peak, settled, _ = attacked([], [lambda t, s: attacks.empty_lists(t, s, count=2, size=31 * MIB)])
    assert_bounded(base, peak, settled, ceiling(256 * MIB, DEFAULT_LIMIT))
