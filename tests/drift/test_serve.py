"""`extender serve` with the drift report, in file mode and with two workers: the tracker
sees the file's objects from the first load (in gunicorn's master, before the fork), each
worker settles and serves `/drift`, a reload of a changed file is applied object by
object through the store's hook, and the gauge is exported once per label set."""

from __future__ import annotations

import json
import time

import orjson
import pytest
from objects import SLA, node, pod, taint

from testing.live import free_port, request, start, stop

GT_750 = {"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}
DEADLINE = 60.0

pytestmark = pytest.mark.gunicorn


def write(path, sla: str) -> None:
    items = [node("n1", [taint(SLA, sla)]), pod("gt", "n1", tolerations=[GT_750]),
             pod("tolerant", "n1", tolerations=[{"operator": "Exists"}])]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def wait_for(port: int, names: set[str]) -> dict:
    deadline = time.monotonic() + DEADLINE
    while True:
        code, body = request(port, "GET", "/drift?namespace=default")
        if code == 429:  # /drift is rate-limited per user (--explain-rate): wait, as a client does
            assert time.monotonic() < deadline, body
            time.sleep(1.0)
            continue
        assert code == 200, body
        report = orjson.loads(body)
        if {p["name"] for p in report["pods"]} == names:
            return report
        assert time.monotonic() < deadline, report
        time.sleep(0.05)


def test_file_mode_with_two_workers(tmp_path):
    cluster = tmp_path / "cluster.json"
    write(cluster, "500")
    metrics = free_port()
    port, proc = start(cluster, "--workers", "2", "--drift-endpoint", "true", "--reload-interval", "0.2",
                       "--metrics-listen", f"127.0.0.1:{metrics}", tmpdir=tmp_path)
    try:
        report = wait_for(metrics, {"gt"})  # from the master's load, settled in the worker
        assert report["state"]["mode"] == "file"
        for _ in range(6):  # any worker answers the same (SO_REUSEPORT)
            assert {p["name"] for p in wait_for(metrics, {"gt"})["pods"]} == {"gt"}
        text = request(metrics, "GET", "/metrics")[1].decode()
        lines = [line for line in text.splitlines() if line.startswith("extender_pods_violating{")]
        required = [line for line in lines if 'plugin="TaintToleration"' in line and 'severity="required"' in line]
        assert required and all("pid=" not in line for line in lines)
        assert required[0].endswith(" 1.0"), required
        write(cluster, "900")  # reloaded: the node changed, its pods re-evaluated
        wait_for(metrics, set())
        code, body = request(metrics, "GET", "/explain/default/gt")
        assert code == 404 and "--explain-endpoint=true" in orjson.loads(body)["error"]
    finally:
        stop(proc)
