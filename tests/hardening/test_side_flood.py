"""Issue #48's attacks on the side listener (`--metrics-listen`: the liveness probe of
both containers, Prometheus's scrapes, `/explain`). Before: once its 1,024 connection
slots held requests queued for its two threads, it stopped accepting, nothing was
evicted, and the probes' connections were reset (8 addresses x 128 connections of
`GET /metrics`: 113 of 142 probes failed, 13 of 13 scrapes; random tokens with a hung
TokenReview, or a known user with slow SubjectAccessReviews: every probe failed); queued
requests ran after their clients had gone, TokenReviews included.

Now each lane's queue is bounded, per client address too (503 with Retry-After past
it), served in turn by address; `/metrics` has a thread of its own; a queued request
whose client has gone never starts; each loop turn takes a few events of each address.

Each attack runs from 127.0.0.2-9 (128 connections each, in a process of its own, as
attackers are other machines) until 100 probes have been sent; pass/fail is decided on
counts only (latencies: `python -m perf.side_flood`, docs/operate/hardening.md). A probe
or scrape "fails" when it gets no 200 within 10 s (a hang detector, not a latency
bound)."""

from __future__ import annotations

import sys
import time

import pytest

from perf.side_flood import SCRAPER, FloodProcess, Reviews, probe, side_listener

PROBES = 100
ATTACKS = {"metrics": {}, "unknown-tokens": {"hang": True}, "slow-access": {"slow": True}}
GIVE_UP = 120.0  # seconds: a condition never met fails the test instead of hanging it


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + GIVE_UP
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


@pytest.fixture
def switch_interval():
    """Every serving worker switches the GIL every 1 ms (extender.server.launcher)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize("attack", ATTACKS)
def test_probes_and_scrapes_are_answered_under_8_x_128_connections(attack, switch_interval):
    reviews = Reviews(**ATTACKS[attack])
    listener = side_listener(reviews)
    flood = FloodProcess(listener.port, attack, reviews.token).start()
    try:
        wait_for(lambda: flood.answered() >= 1024, "the attack under way")
        probes, scrapes = [], []
        while len(probes) < PROBES:
            probes.append(probe(listener.port)[0])
            if len(probes) % 10 == 0:
                scrapes.append(probe(listener.port, "/metrics", SCRAPER)[0])
        answers = flood.stop()  # every attacker's connection closed (reset)
        asked = len(reviews.asked)
        assert probes.count(200) >= 0.99 * PROBES, probes
        assert scrapes == [200] * len(scrapes)
        assert answers.get(503, 0) > 0  # the bounds at work: refused at once, not held
        # every request the attackers left behind is dropped or finished ...
        wait_for(lambda: all(pool.idle() for pool in listener.pools.values())
                 and not any(c.client != "127.0.0.1" for c in list(listener.conns.values())),
                 "the attackers' requests dropped or finished")
        # ... and no review was sent for them: at most those a thread had taken before the
        # listener saw the close (one per thread of the lane)
        assert len(reviews.asked) - asked <= listener.pool_sizes["work"], reviews.asked[asked:]
        assert probe(listener.port)[0] == 200
    finally:
        reviews.released.set()
        flood.stop()
        listener.stop()


def test_an_honest_users_explain_is_answered_during_an_unknown_token_flood(switch_interval):
    """Random tokens from 8 addresses (the API server answers them at once: invalid)
    spend those addresses' review budgets and queue places; a user of another address
    is reviewed on its own budget and served in its turn."""
    reviews = Reviews()
    listener = side_listener(reviews)
    flood = FloodProcess(listener.port, "unknown-tokens").start()
    try:
        wait_for(lambda: flood.answered() >= 1024, "the attack under way")
        answers = [probe(listener.port, f"/explain/default/sla-gt?try={i}", headers={
            "Authorization": f"Bearer {reviews.token}"})[0] for i in range(5)]
        flood_answers = flood.stop()
        assert answers == [200] * 5
        assert flood_answers.get(429, 0) + flood_answers.get(503, 0) > 0  # the flood was refused
    finally:
        flood.stop()
        listener.stop()
