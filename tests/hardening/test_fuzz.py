"""A slice of `make fuzz` in every test run: generated requests (hypothesis, and
schemathesis over docs/reference/openapi.yaml) against a live server, on every verb and
as raw HTTP, after one request of each fixed class (`every_class`: the classes issue #28
found answered 500, every pathological body on every verb, raw requests with every path,
method, version, framing and odd header); 0 5xx, 0 non-JSON answers, 0 answers slower
than the request deadline + 1 s, retried filters answered as the first, 0 worker
restarts, the canary's answer unchanged.

`make test` sends 1,000 generated bodies per worker class: the fixed classes no longer
depend on the slice's size, and every generator still gets its share (at least 20
bodies for the smallest one). `make test-long` (CI) sends 5,000 to the inline worker,
`make fuzz` 100,000."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from hardening.fuzzer import RAW, SLOW, drain, every_class, fuzz

from testing.live import start, stop


@pytest.mark.gunicorn
@pytest.mark.parametrize(("worker_class", "bodies"), [
    ("inline", 1000), ("pool", 1000), pytest.param("inline", 5000, marks=pytest.mark.long)])
def test_generated_bodies_get_json_4xx_or_answers(worker_class, bodies):
    port, proc = start(EXAMPLES / "cluster.yaml", "--worker-class", worker_class, "--log-level", "error")
    drain(proc)  # error logs must not fill the pipe and block the server
    try:
        report = fuzz(port, proc.pid, bodies, seed_value=20261126)
    finally:
        stop(proc)
    assert report.bodies >= bodies + len(every_class())
    assert report.by_source["classes"]["bodies"] == len(every_class())
    assert report.failures == []
    assert max(report.by_status) < 500, report.by_status
    assert report.slowest <= SLOW
    assert report.by_status.get(200, 0) > bodies // 10  # the generators reach real answers
    for path in ("/bind", "/preempt", RAW):  # every verb, and raw HTTP
        assert report.by_path.get(path, 0) > bodies // 100, report.by_path
    assert report.retries > 0
