"""Why is my pod Pending, through the real kube-scheduler: the extender's live
explanation of a pod the scheduler reported Unschedulable counts the nodes exactly as
the scheduler's own message does (`0/N nodes are available: ...`), `kubectl extender
why` (through the API server's service proxy) prints that line, and `--record-events`
adds one event on the pod with the reasons in the extender's words."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time

import orjson

from testing.harness import ZONE, E2ECluster, filter_part, node, pod, spread
from testing.service_proxy import add_service_proxy

SLA = "example.com/sla"
TOKEN = "t-reader"
FLAGS = ["--explain-endpoint", "true", "--record-events", "true"]


def sla(value: str) -> list[dict]:
    return [{"key": SLA, "value": value, "effect": "NoSchedule"}]


def schedulers_line(cluster: E2ECluster, key: tuple[str, str], timeout: float = 30.0) -> str:
    """The scheduler's FailedScheduling event for the pod, up to its preemption part."""
    deadline = time.monotonic() + timeout
    while True:
        notes = [e.get("note") or e.get("message") or "" for e in cluster.events(key)
                 if e.get("reason") == "FailedScheduling"]
        if notes:
            return filter_part(notes[-1])
        assert time.monotonic() < deadline, f"no FailedScheduling event for {key}\n{cluster.logs()}"
        time.sleep(0.1)


def pending_with(cluster: E2ECluster, pending: dict) -> tuple[tuple[str, str], str]:
    """Create the pod, wait until the scheduler reports it Unschedulable; (its key, the
    scheduler's line, which the PodScheduled condition says too)."""
    key = ("default", pending["metadata"]["name"])
    cluster.create(pending)
    outcome = cluster.wait_settled([pending])
    assert key in outcome.unschedulable
    line = schedulers_line(cluster, key)
    assert filter_part(outcome.unschedulable[key]) == line
    return key, line


def extender_events(cluster: E2ECluster, key: tuple[str, str], timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in cluster.events(key) if e.get("reason") == "ExtenderUnschedulable"]
        if found:
            return found
        assert time.monotonic() < deadline, f"no ExtenderUnschedulable event for {key}\n{cluster.logs()}"
        time.sleep(0.1)


def explain(cluster: E2ECluster, key: tuple[str, str]) -> dict:
    """The endpoint's answer to a user the API server lets read the pod (the endpoint
    asks it: TokenReview, SubjectAccessReview)."""
    cluster.api.reviews.token(TOKEN, "reader")
    cluster.api.reviews.grant("reader", "get", "pods")
    conn = http.client.HTTPConnection("127.0.0.1", cluster.metrics_port, timeout=30)
    try:
        conn.request("GET", f"/explain/{key[0]}/{key[1]}", headers={"Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 200, body
    return orjson.loads(body)


def test_the_explanation_counts_what_the_scheduler_counts(start_cluster):
    cluster = start_cluster([
        node("sla-500-a", "a", taints=sla("500")), node("sla-500-b", "b", taints=sla("500")),
        node("sla-600", "a", taints=sla("600")),
        node("cordoned", "b", unschedulable=True),
        node("hdd-a", "a", labels={"disk": "hdd"}), node("hdd-b", "b", labels={"disk": "hdd"}),
    ], extender_flags=FLAGS)
    picky = pod("picky", tolerations=[{"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}],
                node_selector={"disk": "ssd"})
    key, scheduler_says = pending_with(cluster, picky)
    assert scheduler_says == ("0/6 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match "
                              "Pod's node affinity/selector, 3 node(s) had untolerated taint(s).")

    answer = explain(cluster, key)
    summary = answer["results"][0]["summary"]
    assert summary["message"] == scheduler_says
    assert answer["state"]["mode"] == "live"
    taints = next(e for e in summary["reasons"] if e["reason"] == "node(s) had untolerated taint(s)")
    by_value = {g["details"][0]: g for g in taints["groups"]}
    group = by_value[f"taint {SLA}=500:NoSchedule is not tolerated"]
    assert group["nodes"] == 2 and sorted(group["examples"]) == ["sla-500-a", "sla-500-b"]
    assert group["details"][1] == (f"toleration[0] {SLA} Gt '750' (NoSchedule): does not tolerate: "
                                   "taint value 500 is not greater than 750")
    assert by_value[f"taint {SLA}=600:NoSchedule is not tolerated"]["nodes"] == 1

    # kubectl extender, through the API server's service proxy, prints the same line
    cluster.create({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "extended-scheduler-metrics", "namespace": "scheduling-extender"},
                    "spec": {"ports": [{"name": "metrics", "port": 8889}]}})
    add_service_proxy(cluster.api, {("scheduling-extender", "extended-scheduler-metrics"):
                                    f"127.0.0.1:{cluster.metrics_port}"})
    from tests.deploy.deploy_tools import kubectl  # the plugin talks through kubectl (proxy)

    proc = subprocess.run([sys.executable, "-m", "kubectl_extender.cli", "why", "picky",
                           "--kubeconfig", str(cluster.workdir / "kubeconfig"), "--token", TOKEN],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "KUBECTL": kubectl()})
    assert proc.returncode == 0, proc.stderr
    assert f"RESULT    {scheduler_says}" in proc.stdout.splitlines()

    # --record-events: the reasons in the extender's words, one event however often retried
    (event,) = extender_events(cluster, key)
    message = event["message"]
    assert message.startswith("0/6 candidate nodes pass the extender's filter: ")
    assert (f"taint {SLA}=500:NoSchedule is not tolerated; toleration[0] {SLA} Gt '750' (NoSchedule): "
            "does not tolerate: taint value 500 is not greater than 750 (2 nodes)") in message
    assert "node(s) didn't match Pod's node affinity/selector (2 nodes)" in message
    assert "node(s) were unschedulable (1 node)" in message
    assert event["type"] == "Warning" and event["source"]["component"] == "scheduling-extender"
    assert event["involvedObject"]["uid"] == cluster.api.get("pods", "picky", "default")["metadata"]["uid"]


def test_spread_failures_are_counted_as_the_scheduler_counts_them(start_cluster):
    web = {"app": "web"}
    cluster = start_cluster([node("a0", "a"), node("a1", "a"), node("b0", "b", unschedulable=True),
                             pod("web-0", web, node_name="a0"), pod("web-1", web, node_name="a1")],
                            extender_flags=FLAGS)
    key, scheduler_says = pending_with(cluster, pod("web-2", web, spread=[spread(ZONE, web)]))
    assert scheduler_says == ("0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't "
                              "match pod topology spread constraints.")
    summary = explain(cluster, key)["results"][0]["summary"]
    assert summary["message"] == scheduler_says
    spread_entry = next(e for e in summary["reasons"] if e["plugin"] == "PodTopologySpread")
    assert spread_entry["code"] == "Unschedulable"  # preemption may help: kube-scheduler tries it
    (group,) = spread_entry["groups"]
    assert f"domain {ZONE}=a: count 2 + self 1 - minimum 0 = skew 3 > maxSkew 1" in group["details"][0]
