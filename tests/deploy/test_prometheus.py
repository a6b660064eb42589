"""The Prometheus rules against Debian's real Prometheus scraping a real `extender serve`.

Loads manifests/prometheus/rules.yaml as shipped, except that every `for:` is cut to 2 s
so an alert can fire within the test; checks through the HTTP API that every recording
rule returns series and that SchedulingExtenderDown fires once the extender is stopped.
`promtool check rules` and `promtool check metrics` must pass as well."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
import urllib.request

import orjson
import pytest
import yaml
from conftest import EXAMPLES, example_pod
from deploy_tools import MANIFESTS, ROOT, run, tool

from testing.live import NAMES, free_port, request, start, stop

RULES = MANIFESTS / "prometheus" / "rules.yaml"
RULES_TEST = ROOT / "tests" / "deploy" / "rules_test.yaml"
DASHBOARD = MANIFESTS / "components" / "prometheus-operator" / "grafana-dashboard.json"
JOB = "scheduling-extender"


def test_promtool_checks_the_rules():
    out = run([tool("promtool"), "check", "rules", str(RULES)])
    assert "SUCCESS" in out


def test_promtool_unit_tests_fire_every_alert():
    """tests/deploy/rules_test.yaml: each alert, the extender's and kube-scheduler's own
    (issue 25 item 6), fires on its failure; the healthy cases stay quiet."""
    out = run([tool("promtool"), "test", "rules", str(RULES_TEST)])
    assert "SUCCESS" in out
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    fired = {case["alertname"] for group in tests for case in group["alert_rule_test"] if case.get("exp_alerts")}
    quiet = {case["alertname"] for group in tests for case in group["alert_rule_test"] if not case.get("exp_alerts")}
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == fired, f"alerts without a firing unit test: {alerts - fired}"
    assert {a for a in alerts if a.startswith("ExtendedScheduler")} <= quiet
    assert {"ExtendedSchedulerLeaderless", "ExtendedSchedulerCrashLooping",
            "ExtendedSchedulerPendingPods"} <= alerts


def api(port: int, path: str, **params: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def _epoch(stamp: str) -> float:
    """Prometheus's RFC 3339 timestamp (nanoseconds, Z or an offset) in seconds."""
    import datetime

    base, fraction, zone = re.fullmatch(r"(.*?)(\.\d+)?(Z|[+-]\d\d:\d\d)", stamp).groups()
    when = datetime.datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    return when.timestamp() + float((fraction or ".0")[:10])


def wait_for(what: str, check, timeout: float = 180.0, done=bool):
    """Poll `check` until `done(result)`; fail naming `what` and the last result."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if done(last):
            return last
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})", pytrace=False)


def drive(port: int) -> None:
    """Traffic that touches every metric the rules use: answers, rejections, CEL
    lookups, and an HTTP 200 answer whose Error is set."""
    for name in ("sla-gt", "cel-kernel-version", "plain", "annotation-tolerations"):
        body = orjson.dumps({"Pod": example_pod(name), "Nodes": None, "NodeNames": NAMES})
        for verb in ("filter", "prioritize"):
            status, _ = request(port, "POST", f"/{verb}", body)
            assert status == 200
    status, data = request(port, "POST", "/filter", b'{"NodeNames": []}')
    assert status == 200 and orjson.loads(data)["Error"]


@pytest.fixture
def extender(tmp_path):
    port, proc = start(EXAMPLES / "cluster.yaml", "--workers", "2", "--scheduler-profile",
                       "extended-scheduler", "--log-level", "warning", "--drift-report", "true", tmpdir=tmp_path)
    yield port, proc
    if proc.poll() is None:
        stop(proc)


def test_promtool_checks_the_live_metrics(extender):
    port, _ = extender
    drive(port)
    status, text = request(port, "GET", "/metrics")
    assert status == 200
    proc = subprocess.run([tool("promtool"), "check", "metrics"], input=text,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    metrics = text.decode()
    assert 'profile="extended-scheduler"' in metrics
    assert re.search(r'^extender_error_answers_total\{verb="filter"\} [1-9]', metrics, re.M)
    assert re.search(r"^extender_cluster_state_ready 1\.0$", metrics, re.M)
    assert re.search(r"^process_resident_memory_bytes ", metrics, re.M), "process_* kept"
    for gauge in ("extender_cluster_state_objects", "extender_cel_program_cache_entries",
                  "extender_cluster_state_ready"):
        lines = [line for line in metrics.splitlines() if line.startswith(gauge + "{") or
                 line.startswith(gauge + " ")]
        assert lines and not any("pid=" in line for line in lines), f"{gauge}: {lines}"


def shortened_rules(tmp_path) -> str:
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "2s"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    return str(path)


@pytest.fixture
def prometheus(tmp_path, extender):
    port, _ = extender
    web = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [shortened_rules(tmp_path)],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for("prometheus to be ready", lambda: _ready(web) or proc.poll() is not None)
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
        yield web
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_rules_and_dashboard_return_series_and_the_down_alert_fires(extender, prometheus):
    port, proc = extender
    records = [r["record"] for g in yaml.safe_load(RULES.read_text())["groups"]
               for r in g["rules"] if "record" in r]
    assert records

    def scraped() -> bool:
        drive(port)
        return bool(api(prometheus, "query", query=f'up{{job="{JOB}"}} == 1')["result"])

    wait_for("the first scrape", scraped)

    def missing() -> list[str]:
        drive(port)  # rates need two samples with traffic between them
        return [r for r in records if not api(prometheus, "query", query=r)["result"]]

    wait_for("every recording rule to return series", missing, done=lambda m: not m)
    # kube-scheduler's panels (job extended-scheduler) are checked against a real
    # kube-scheduler's scrape in tests/e2e/test_ha.py
    queries = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]
               if 'job="extended-scheduler"' not in t["expr"]]
    assert len(queries) >= 10
    empty = [q for q in queries if not api(prometheus, "query", query=q)["result"]]
    assert not empty, f"dashboard queries without data: {empty}"
    errors = api(prometheus, "query", query='extender:error_answers:rate5m{verb="filter"}')["result"]
    assert float(errors[0]["value"][1]) > 0, "a 200 answer with Error counts as an error"
    groups = api(prometheus, "rules")["groups"]
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"]
                 if r.get("health") != "ok"]
    assert not unhealthy

    def firing(alert: str) -> bool:
        return any(a["labels"]["alertname"] == alert and a["state"] == "firing"
                   for a in api(prometheus, "alerts")["alerts"])

    # every rule evaluated past the shortened `for` (2 s) while the extender was up: the
    # evaluations Prometheus reports, not a sleep (issue 36)
    since = time.time()

    def evaluated_past_for() -> bool:
        stamps = [g["lastEvaluation"] for g in api(prometheus, "rules")["groups"]]
        return all(_epoch(s) >= since + 3 for s in stamps)

    wait_for("the rules to be evaluated past their `for`", evaluated_past_for)
    assert not firing("SchedulingExtenderDown")
    assert not firing("SchedulingExtenderStateStale")
    stop(proc)
    wait_for("SchedulingExtenderDown to fire", lambda: firing("SchedulingExtenderDown"))
