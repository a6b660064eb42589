"""What if? through `extender serve --whatif-endpoint` and the real kube-scheduler: for each
story (lower an SLA taint's value, relabel a kernel version, cordon a zone, change a
volume's Semver annotation), `POST /whatif` is asked first; then the change is really
made and the extender's own `/drift` and `/filter` must say exactly what the what-if
said: the drift report after = the report before with the what-if's `after` for each pod
it lists, and the filter's feasible nodes for the asked pod = the what-if's count. Each
change is reverted before the next story. The pods are placed by the scheduler first
(tests/e2e/test_drift.py's cluster), so the truth is a cluster the scheduler built."""

from __future__ import annotations

import http.client
import json
import time

import orjson

from testing.harness import E2ECluster, pod
from tests.e2e.test_drift import (  # noqa: F401 - PODS is also the real variant's
    KERNEL,
    NODES,
    PODS,
    PREFIX,
    SLA,
    claim,
    sla,
    storage_class,
    update_annotation,
    volume,
)

TOKEN = "t-viewer"  # a static test user of the real control plane too
FLAGS = ["--explain-rate", "1000", "--explain-burst", "1000",  # the test polls /drift
         "--drift-endpoint", "true", "--whatif-endpoint", "true"]
DEADLINE = 60.0
ZONE = "topology.kubernetes.io/zone"
ASKED = pod("asked", tolerations=[{"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}],
            annotations={f"{PREFIX}/node-affinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": KERNEL, "operator": "SemverGt", "values": ["5.10.0"]}]}]}}})


def call(port: int, method: str, path: str, body: dict | None = None, token: str | None = TOKEN) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        return response.status, orjson.loads(response.read())
    finally:
        conn.close()


def drift(cluster: E2ECluster) -> dict[str, set]:
    code, report = call(cluster.metrics_port, "GET", "/drift")
    assert code == 200, report
    return {p["name"]: {(v["plugin"], v["reason"], v["severity"], tuple(v["details"])) for v in p["violations"]}
            for p in report["pods"]}


def feasible(cluster: E2ECluster, names: list[str]) -> list[str]:
    """The extender's own /filter for the asked pod over every node."""
    code, answer = call(cluster.extender_port, "POST", "/filter", {"Pod": ASKED, "NodeNames": names}, token=None)
    assert code == 200 and not answer.get("Error"), answer
    return answer["NodeNames"] or []


def expected_after(before: dict[str, set], answer: dict) -> dict[str, set]:
    out = {k: set(v) for k, v in before.items()}
    for entry in answer["running"]["pods"]:
        out[entry["name"]] = (out.get(entry["name"], set())
                              - {(v["plugin"], v["reason"], v["severity"], tuple(v["details"])) for v in entry["before"]}
                              | {(v["plugin"], v["reason"], v["severity"], tuple(v["details"])) for v in entry["after"]})
        if not out[entry["name"]]:
            del out[entry["name"]]
    return out


def wait_drift(cluster: E2ECluster, want: dict[str, set]) -> None:
    deadline = time.monotonic() + DEADLINE
    while (found := drift(cluster)) != want:
        assert time.monotonic() < deadline, f"/drift says {found}, the what-if said {want}"
        time.sleep(0.05)


def wait_feasible(cluster: E2ECluster, names: list[str], count: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while len(found := feasible(cluster, names)) != count:
        assert time.monotonic() < deadline, f"/filter finds {found}, the what-if said {count} nodes"
        time.sleep(0.05)


def uncordon(cluster: E2ECluster, name: str) -> None:
    node = cluster.api.get("nodes", name)
    node["spec"]["unschedulable"] = False
    node["spec"]["taints"] = [t for t in node["spec"].get("taints") or []
                              if t["key"] != "node.kubernetes.io/unschedulable"]
    cluster.api.update("nodes", node)


STORIES = {
    # name: (the what-if's change, make it, revert it, pods the what-if must list)
    "sla": ({"nodes": ["spot-1"], "taint": f"{SLA}=500:NoSchedule"},
            lambda c: c.set_taints("spot-1", sla("500")), lambda c: c.set_taints("spot-1", sla("900")),
            {"gt", "semver-tol", "cel"}),
    "kernel": ({"nodes": ["plain-1"], "label": f"{KERNEL}=5.4.0"},
               lambda c: c.relabel("plain-1", {KERNEL: "5.4.0"}), lambda c: c.relabel("plain-1", {KERNEL: "6.1.0"}),
               {"kernel"}),
    "zone": ({"selector": f"{ZONE}=a", "cordon": True},
             lambda c: [c.cordon(n) for n in ("spot-1", "plain-1")],
             lambda c: [uncordon(c, n) for n in ("spot-1", "plain-1")],
             {"gt", "semver-tol", "cel", "gt-400", "kernel", "no-affinity"}),
    "volume": ({"volume": "data-db", "annotation": f"{PREFIX}/node-affinity=" + json.dumps(
                {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": KERNEL, "operator": "SemverGt", "values": ["6.2.0"]}]}]}})},
               lambda c: update_annotation(c, "data-db", "6.2.0"), lambda c: update_annotation(c, "data-db", "5.10.0"),
               {"db"}),
}


def test_what_if_says_what_drift_and_filter_say_once_the_change_is_made(start_cluster):
    cluster = start_cluster([*NODES, storage_class(), volume("data-db", "5.10.0"), claim("data-db"),
                             volume("data-other", "5.10.0"), claim("data-other")], extender_flags=FLAGS)
    cluster.api.reviews.token(TOKEN, "viewer")
    for resource in ("pods", "nodes"):
        cluster.api.reviews.grant("viewer", "list", resource)
    cluster.create(*PODS.values())
    outcome = cluster.wait_settled(list(PODS.values()))
    assert len(outcome.bound) == len(PODS), outcome
    names = [n["metadata"]["name"] for n in NODES]
    wait_drift(cluster, {})
    for story, (change, make, revert, listed) in STORIES.items():
        before, fits = drift(cluster), feasible(cluster, names)
        code, answer = call(cluster.metrics_port, "POST", "/whatif", {"changes": [change], "pods": [ASKED]})
        assert code == 200, answer
        assert {p["name"] for p in answer["running"]["pods"]} == listed, (story, answer["running"])
        assert answer["pods"][0]["before"]["feasible"] == len(fits), story
        make(cluster)
        wait_drift(cluster, expected_after(before, answer))
        wait_feasible(cluster, names, answer["pods"][0]["after"]["feasible"])
        revert(cluster)
        wait_drift(cluster, before)
        wait_feasible(cluster, names, len(fits))
    code, answer = call(cluster.metrics_port, "POST", "/whatif", {"changes": [{"nodes": ["ghost"], "cordon": True}]})
    assert code == 400 and "no such node(s) in the cluster state: ghost" in answer["error"]
    code, answer = call(cluster.metrics_port, "POST", "/whatif", {"changes": [STORIES["sla"][0]]}, token=None)
    assert code == 401
