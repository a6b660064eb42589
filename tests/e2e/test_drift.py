"""Pods that no longer fit where they run, through the real kube-scheduler: pods placed
by it with Gt, Semver and CEL tolerations, Semver node affinity and a volume whose
annotation requires a kernel version; then an SLA taint is lowered, a kernel label
rewritten and the volume's annotation changed. Each pod those changes affect shows in
`GET /drift`, in `extender_pods_violating` and in `kubectl extender drift` (through the
API server's service proxy) with the right plugin and reason, and gets one
`NodeConstraintsViolated` event; the pods they do not affect never show anywhere;
reverting the changes clears everything.

How long the extender takes from the write to the report is measured and printed (the
figure in docs/operate/drift.md); the test only waits for it with a generous deadline,
as the machine may be busy. The tight figure is perf/drift.py's."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time

import orjson
import yaml

from testing.harness import E2ECluster, node, pod
from testing.service_proxy import add_service_proxy

SLA = "example.com/sla"
KERNEL = "example.com/kernel-version"
PREFIX = "scheduling-extender.io"
HOST = "kubernetes.io/hostname"
UNTOLERATED = "node(s) had untolerated taint(s)"
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
VOLUME_REASON = "node(s) had volume node affinity conflict"
DEADLINE = 60.0  # seconds: generous; the measured latency is printed and documented
FLAGS = ["--explain-rate", "1000", "--explain-burst", "1000",  # the test polls /drift
         "--drift-endpoint", "true", "--drift-events", "true"]


def sla(value: str) -> list[dict]:
    return [{"key": SLA, "value": value, "effect": "NoSchedule"}]


def semver_affinity(minimum: str) -> dict:
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": KERNEL, "operator": "SemverGt", "values": [minimum]}]}]}}


def on(name: str) -> dict:
    return {HOST: name}


def volume(name: str, minimum: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {f"{PREFIX}/node-affinity": json.dumps(
                {"required": semver_affinity(minimum)["requiredDuringSchedulingIgnoredDuringExecution"]})}},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                     "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": "default", "name": name},
                     "csi": {"driver": "example.csi.io", "volumeHandle": name}},
            "status": {"phase": "Bound"}}


def claim(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeName": name,
                     "resources": {"requests": {"storage": "5Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}}


def storage_class() -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
            "provisioner": "example.csi.io", "volumeBindingMode": "WaitForFirstConsumer"}


NODES = [
    node("spot-1", "a", taints=sla("900"), labels={KERNEL: "5.15.0"}),
    node("spot-2", "b", taints=sla("900"), labels={KERNEL: "5.15.0"}),
    node("plain-1", "a", labels={KERNEL: "6.1.0"}),
    node("plain-2", "b", labels={KERNEL: "6.1.0"}),
]
GT_750 = {"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}
CEL = f"taint.key == '{SLA}' && int(taint.value) > 800"
ORACLES = {CEL: lambda key, value, effect: key == SLA and int(value) > 800}  # the truth's reading of it
PODS = {
    # lowering spot-1's SLA to 500 affects these three ...
    "gt": pod("gt", tolerations=[GT_750], node_selector=on("spot-1")),
    "semver-tol": pod("semver-tol", node_selector=on("spot-1"), annotations={f"{PREFIX}/tolerations": [
        {"key": SLA, "operator": "SemverGt", "value": "800.0.0", "effect": "NoSchedule"}]}),
    "cel": pod("cel", node_selector=on("spot-1"), annotations={f"{PREFIX}/tolerations": [{"expression": CEL}]}),
    # ... not these: 500 is still over 400; spot-2 keeps 900
    "gt-400": pod("gt-400", tolerations=[{**GT_750, "value": "400"}], node_selector=on("spot-1")),
    "gt-spot-2": pod("gt-spot-2", tolerations=[GT_750], node_selector=on("spot-2")),
    # relabelling plain-1's kernel to 5.4.0 affects the Semver affinity ...
    "kernel": pod("kernel", node_selector=on("plain-1"), annotations={f"{PREFIX}/node-affinity": semver_affinity(
        "5.10.0")}),
    "no-affinity": pod("no-affinity", node_selector=on("plain-1")),
    # ... and the volume now asks for a 6.2 kernel: the pod on plain-2 that uses it
    "db": pod("db", node_selector=on("plain-2"), volumes=[{"name": "data", "persistentVolumeClaim": {
        "claimName": "data-db"}}]),
    "db-other": pod("db-other", node_selector=on("plain-2"), volumes=[{"name": "data", "persistentVolumeClaim": {
        "claimName": "data-other"}}]),
}
AFFECTED = {
    "sla": {"gt": ("TaintToleration", UNTOLERATED), "semver-tol": ("TaintToleration", UNTOLERATED),
            "cel": ("TaintToleration", UNTOLERATED)},
    "kernel": {"kernel": ("NodeAffinity", AFFINITY_REASON)},
    "volume": {"db": ("VolumeNodeAffinity", VOLUME_REASON)},
}


TOKEN = "t-viewer"  # a user the API server lets list pods everywhere (/drift asks it)


def drift(cluster: E2ECluster) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", cluster.metrics_port, timeout=30)
    try:
        conn.request("GET", "/drift", headers={"Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        code, body = response.status, response.read()
    finally:
        conn.close()
    assert code == 200, body
    return orjson.loads(body)


def viewer_kubeconfig(cluster: E2ECluster) -> str:
    """The cluster's kubeconfig with the viewer's token as its user's credential: the
    plugin hands the extender the token the kubeconfig authenticates with."""
    config = yaml.safe_load((cluster.workdir / "kubeconfig").read_text())
    config["users"][0]["user"] = {"token": TOKEN}
    path = cluster.workdir / "viewer.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def reported(report: dict) -> dict[str, list[tuple[str, str, str]]]:
    return {p["name"]: [(v["plugin"], v["reason"], v["severity"]) for v in p["violations"]] for p in report["pods"]}


def gauge(cluster: E2ECluster, plugin: str) -> float:
    return cluster.extender_metric("extender_pods_violating", f'plugin="{plugin}"')


def wait_gauge(cluster: E2ECluster, plugin: str, count: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while gauge(cluster, plugin) != count:
        assert time.monotonic() < deadline, f"extender_pods_violating{{plugin={plugin}}} is not {count}"
        time.sleep(0.02)


def kubectl_drift(cluster: E2ECluster) -> dict:
    proc = subprocess.run([sys.executable, "-m", "kubectl_extender.cli", "drift", "-A", "-o", "json",
                           "--kubeconfig", viewer_kubeconfig(cluster)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return reported(json.loads(proc.stdout))


def wait_report(cluster: E2ECluster, expected: dict[str, tuple[str, str]], never: set[str]) -> float:
    """Seconds until /drift lists exactly `expected` (name -> (plugin, reason), all
    `required`); on every look no pod of `never` is listed."""
    started = time.monotonic()
    deadline = started + DEADLINE  # a hang guard: the verdict is what /drift lists
    want = {name: [(plugin, reason, "required")] for name, (plugin, reason) in expected.items()}
    while True:
        found = reported(drift(cluster))
        assert not never & found.keys(), f"unaffected pods reported: {sorted(never & found.keys())}"
        if found == want:
            return time.monotonic() - started
        assert time.monotonic() < deadline, f"after {DEADLINE} s /drift says {found}, not {want}"
        time.sleep(0.01)


def test_drift_follows_taints_labels_and_volumes_and_clears_on_revert(start_cluster):
    cluster = start_cluster([*NODES, storage_class(), volume("data-db", "5.10.0"), claim("data-db"),
                             volume("data-other", "5.10.0"), claim("data-other")], extender_flags=FLAGS)
    cluster.api.reviews.token(TOKEN, "viewer")
    cluster.api.reviews.grant("viewer", "list", "pods")
    cluster.create(*PODS.values())
    outcome = cluster.wait_settled(list(PODS.values()))
    placed = {key[1]: where for key, where in outcome.bound.items()}
    assert placed == {name: p["spec"]["nodeSelector"][HOST] for name, p in PODS.items()}, outcome
    assert cluster.replay(ORACLES).violations == []
    cluster.create({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "extended-scheduler-metrics", "namespace": "scheduling-extender"},
                    "spec": {"ports": [{"name": "metrics", "port": 8889}]}})
    add_service_proxy(cluster.api, {("scheduling-extender", "extended-scheduler-metrics"):
                                    f"127.0.0.1:{cluster.metrics_port}"})
    all_affected = {name for changes in AFFECTED.values() for name in changes}
    never = set(PODS) - all_affected
    wait_report(cluster, {}, never)
    assert drift(cluster)["drift"]["trackedPods"] == len(PODS)

    changes = {
        "sla": lambda: cluster.set_taints("spot-1", sla("500")),
        "kernel": lambda: cluster.relabel("plain-1", {KERNEL: "5.4.0"}),
        "volume": lambda: update_annotation(cluster, "data-db", "6.2.0"),
    }
    expected: dict[str, tuple[str, str]] = {}
    latency = {}
    for what, change in changes.items():
        change()
        expected.update(AFFECTED[what])
        latency[what] = wait_report(cluster, expected, never)
        for plugin in {plugin for plugin, _ in AFFECTED[what].values()}:
            count = sum(1 for p, _ in expected.values() if p == plugin)
            wait_gauge(cluster, plugin, count)  # set right after the report: the next scrape has it
        assert kubectl_drift(cluster) == {name: [(p, r, "required")] for name, (p, r) in expected.items()}
    print(f"\nwrite -> /drift latency (s): {latency}")

    report = drift(cluster)
    gt = next(p for p in report["pods"] if p["name"] == "gt")
    assert gt["violations"][0]["details"] == [
        f"taint {SLA}=500:NoSchedule is not tolerated",
        f"toleration[0] {SLA} Gt '750' (NoSchedule): does not tolerate: taint value 500 is not greater than 750"]
    kernel = next(p for p in report["pods"] if p["name"] == "kernel")
    assert kernel["violations"][0]["details"] == [
        f"metadata.annotations[{PREFIX}/node-affinity].requiredDuringSchedulingIgnoredDuringExecution: "
        f'{KERNEL} SemverGt [5.10.0]: the node\'s value is "5.4.0"']
    events = wait_events(cluster, all_affected)
    assert not never & events.keys()
    assert "taint value 500 is not greater than 750" in events["gt"]

    cluster.set_taints("spot-1", sla("900"))
    cluster.relabel("plain-1", {KERNEL: "6.1.0"})
    update_annotation(cluster, "data-db", "5.10.0")
    wait_report(cluster, {}, never)
    for plugin in ("TaintToleration", "NodeAffinity", "VolumeNodeAffinity"):
        wait_gauge(cluster, plugin, 0)
    assert kubectl_drift(cluster) == {}


def update_annotation(cluster: E2ECluster, name: str, minimum: str) -> None:
    pv = cluster.api.get("persistentvolumes", name)
    pv["metadata"]["annotations"] = volume(name, minimum)["metadata"]["annotations"]
    cluster.api.update("persistentvolumes", pv)


def wait_events(cluster: E2ECluster, names: set[str]) -> dict[str, str]:
    """pod -> the message of its NodeConstraintsViolated event, once every pod of `names` has one."""
    deadline = time.monotonic() + DEADLINE
    while True:
        found = {e["involvedObject"]["name"]: e["message"] for e in cluster.events()
                 if e.get("reason") == "NodeConstraintsViolated"}
        if names <= found.keys():
            return found
        assert time.monotonic() < deadline, f"drift events: {sorted(found)}"
        time.sleep(0.05)
