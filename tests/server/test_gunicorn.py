"""End-to-end against a real `extender serve` (gunicorn, two workers)."""

from __future__ import annotations

import re
import signal
import time

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from testing.live import NAMES, request, start, stop

# one pytest-xdist worker runs the module: the module's server made once, not once per worker
pytestmark = [pytest.mark.gunicorn, pytest.mark.xdist_group("server/test_gunicorn")]


@pytest.fixture(scope="module")
def server():
    port, proc = start(EXAMPLES / "cluster.yaml", "--workers", "2", "--threads", "2",
                       "--max-body-bytes", "100000", "--log-level", "warning")
    yield port, proc
    stop(proc)


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total




def test_filter_and_prioritize_over_gunicorn_and_metrics_across_workers(server):
    port, proc = server
    body = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None, "NodeNames": NAMES})
    rounds = 20
    for _ in range(rounds):
        status, data = request(port, "POST", "/filter", body)
        assert status == 200
        assert orjson.loads(data)["NodeNames"] == ["od-a1", "od-b1", "spot-a1", "spot-b1"]
        status, data = request(port, "POST", "/prioritize", body)
        assert status == 200
        # slim answers: the hosts off the most common score, 30 (od-b1, spot-c1: PreferNoSchedule taints)
        assert orjson.loads(data) == [{"Host": h, "Score": -30} for h in ("od-b1", "spot-c1")]

    status, text = request(port, "GET", "/metrics")
    assert status == 200
    text = text.decode()
    # Requests were spread over two worker processes; the counters must add up.
    assert _metric(text, "extender_http_requests_total", verb="filter", code="200") == rounds
    assert _metric(text, "extender_http_requests_total", verb="prioritize", code="200") == rounds
    filter_evals = _metric(
        text, "scheduler_plugin_evaluation_total", plugin="TaintToleration", extension_point="Filter"
    )
    assert filter_evals == rounds * len(NAMES)
    rejected = _metric(
        text, "scheduler_plugin_evaluation_total", plugin="TaintToleration",
        extension_point="Filter", status="UnschedulableAndUnresolvable",
    )
    assert rejected == rounds * 2  # od-a2 (kernel-version taint) and spot-c1 (sla 500)
    assert "scheduler_framework_extension_point_duration_seconds_bucket" in text


def test_bad_requests_over_gunicorn(server):
    port, _ = server
    assert request(port, "POST", "/filter", b"{oops")[0] == 400
    status, data = request(port, "POST", "/filter", b"x" * 200_000)
    assert status == 413
    assert b"exceeds the limit" in data
    status, data = request(port, "POST", "/filter", b'{"NodeNames": []}')
    assert status == 200
    assert orjson.loads(data)["Error"]
    # and the server keeps serving
    assert request(port, "GET", "/healthz") == (200, b"ok")


def test_sighup_reloads_the_cluster_file_in_every_worker(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((EXAMPLES / "cluster.yaml").read_text())
    port, proc = start(cluster, "--workers", "2", "--reload-interval", "0", "--log-level", "info")
    try:
        body = orjson.dumps({"Pod": example_pod("plain"), "NodeNames": ["new-node"]})
        assert orjson.loads(request(port, "POST", "/filter", body)[1])["NodeNames"] == []
        cluster.write_text(cluster.read_text() + "\n---\napiVersion: v1\nkind: Node\nmetadata: {name: new-node}\n")
        proc.send_signal(signal.SIGHUP)
        consecutive = 0  # both workers must answer from the new file, many times in a row
        deadline = time.monotonic() + 60  # two new workers start and load the file: generous
        while time.monotonic() < deadline and consecutive < 10:
            try:
                names = orjson.loads(request(port, "POST", "/filter", body)[1])["NodeNames"]
            except (OSError, ValueError):
                names = None
            consecutive = consecutive + 1 if names == ["new-node"] else 0
            time.sleep(0.05)
        assert consecutive == 10, "workers did not all serve the reloaded file after SIGHUP"
    finally:
        stop(proc)
    lines = [line for line in proc.stderr.read().decode().splitlines() if line.strip()]
    records = [orjson.loads(line) for line in lines]  # every line is a JSON object
    messages = [r["msg"] for r in records]
    assert "cluster state loaded" in messages
    assert any("hup" in m.lower() for m in messages)


def test_serve_removes_the_metrics_directory_it_created(tmp_path):
    port, proc = start(EXAMPLES / "cluster.yaml", "--workers", "2", "--log-level", "warning",
                        tmpdir=tmp_path)
    try:
        (created,) = tmp_path.glob("extender-metrics-*")
        body = orjson.dumps({"Pod": example_pod("plain"), "NodeNames": ["od-a1"]})
        assert request(port, "POST", "/filter", body)[0] == 200
        assert any(created.glob("*.db")), "workers write their samples there"
    finally:
        stop(proc)
    assert proc.returncode is not None
    assert not created.exists()


def test_one_worker_keeps_its_metrics_in_memory(tmp_path):
    port, proc = start(EXAMPLES / "cluster.yaml", "--log-level", "warning", tmpdir=tmp_path)
    try:
        body = orjson.dumps({"Pod": example_pod("plain"), "NodeNames": ["od-a1"]})
        for _ in range(3):
            assert request(port, "POST", "/filter", body)[0] == 200
        status, text = request(port, "GET", "/metrics")
        assert status == 200
        assert _metric(text.decode(), "extender_http_requests_total", verb="filter", code="200") == 3
        assert _metric(text.decode(), "extender_cluster_state_objects", kind="nodes") > 0
        assert not list(tmp_path.glob("extender-metrics-*"))  # no multiprocess directory
    finally:
        stop(proc)
