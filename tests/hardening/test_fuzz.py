"""A slice of `make fuzz` in every test run: 5,000 generated bodies (hypothesis and
schemathesis over docs/reference/openapi.yaml) against a live server; 0 5xx, 0 non-JSON answers,
0 worker restarts, the canary's answer unchanged. A smaller run for the gthread class."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from hardening.fuzzer import drain, fuzz
from server.live import start, stop


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
    assert set(report.by_status) <= {200, 400, 413}, report.by_status
    assert report.by_status.get(200, 0) > bodies // 10  # the generators reach real answers
