"""A slice of `make fuzz` in every test run: 5,000 generated requests (hypothesis, and
schemathesis over docs/reference/openapi.yaml) against a live server, on every verb and
as raw HTTP, the classes issue #28 found answered 500 included; 0 5xx, 0 non-JSON
answers, 0 answers slower than the request deadline + 1 s, retried filters answered as
the first, 0 worker restarts, the canary's answer unchanged. A smaller run for the
gthread class."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from hardening.fuzzer import RAW, SLOW, drain, fuzz

from testing.live import start, stop


@pytest.mark.gunicorn
@pytest.mark.parametrize(("worker_class", "bodies"), [("inline", 5000), ("gthread", 1000)])
def test_generated_bodies_get_json_4xx_or_answers(worker_class, bodies):
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", worker_class, "--log-level", "error")
    drain(proc)  # error logs must not fill the pipe and block the server
    try:
        report = fuzz(port, proc.pid, bodies, seed_value=20261126)
    finally:
        stop(proc)
    assert report.bodies >= bodies
    assert report.failures == []
    assert max(report.by_status) < 500, report.by_status
    assert report.slowest <= SLOW
    assert report.by_status.get(200, 0) > bodies // 10  # the generators reach real answers
    for path in ("/bind", "/preempt", RAW):  # every verb, and raw HTTP
        assert report.by_path.get(path, 0) > bodies // 100, report.by_path
    assert report.retries > 0
