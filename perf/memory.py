"""Memory of both containers at a cluster size: `python -m perf.memory --nodes 5000 --pods 50000`.

The sizing guide (docs/operate/sizing.md) needs what kube-scheduler and the extender hold
once their informers have listed a cluster, not what a benchmark's slim objects cost. So a
static list/watch server on 127.0.0.1 serves realistic objects (nodes with conditions,
addresses and ten images; Deployment pods with owner references, probes, env, a projected
token volume and status, about 3 KB of JSON each) in pages of the client's `limit`, and
the script starts

- the real kube-scheduler (`$KUBE_SCHEDULER_BINARY`, default /opt/kube-scheduler/kube-scheduler;
  no leader election, no secure port) and reads its RSS once its pod informer has filled
  its cache and the RSS has stopped growing (under 1% over `--settle` seconds);
- `extender serve --kubeconfig` (one worker, as deployed) and reads the RSS of the
  gunicorn master and the serving worker 10 s after `/readyz` answers 200.

Watches are held open without events: this is the steady state after the initial list,
before any cache of the extender fills (`--memory-limit-bytes` caps those on top).
Results go to stdout and perf/results/memory-<nodes>-<pods>.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from perf import options
from perf.output import write_result
from testing.live import free_port

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"pods": ("v1", "Pod"), "nodes": ("v1", "Node"), "namespaces": ("v1", "Namespace"),
         "services": ("v1", "Service"), "replicationcontrollers": ("v1", "ReplicationController"),
         "persistentvolumes": ("v1", "PersistentVolume"), "persistentvolumeclaims": ("v1", "PersistentVolumeClaim"),
         "replicasets": ("apps/v1", "ReplicaSet"), "statefulsets": ("apps/v1", "StatefulSet"),
         "storageclasses": ("storage.k8s.io/v1", "StorageClass"), "csinodes": ("storage.k8s.io/v1", "CSINode"),
         "csidrivers": ("storage.k8s.io/v1", "CSIDriver"),
         "csistoragecapacities": ("storage.k8s.io/v1", "CSIStorageCapacity"),
         "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget")}
NAMESPACES = 50
APPS = 500
TIME = "2026-11-26T00:00:00Z"


def node(i: int) -> dict:
    zone = "abc"[i % 3]
    conditions = [{"type": t, "status": "True" if t == "Ready" else "False", "reason": "KubeletReady",
                   "message": "kubelet is posting ready status", "lastHeartbeatTime": TIME,
                   "lastTransitionTime": TIME} for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    return {
        "metadata": {"name": f"node-{i}", "uid": f"n-{i}", "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": f"node-{i}", "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": f"zone-{zone}",
                                "topology.kubernetes.io/region": "r1", "node.kubernetes.io/instance-type": "m5.2xlarge"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24", "providerID": f"aws:///r1{zone}/i-{i:017x}",
                 "taints": [{"key": "node.example.com/sla", "value": str(i % 1000), "effect": "NoSchedule"}]
                 if i % 4 == 0 else []},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110"},
                   "conditions": conditions,
                   "addresses": [{"type": "InternalIP", "address": f"10.1.{i // 256 % 256}.{i % 256}"},
                                 {"type": "Hostname", "address": f"node-{i}"}],
                   "nodeInfo": {"kubeletVersion": "v1.30.6", "osImage": "Ubuntu 22.04", "kernelVersion": "5.15.0",
                                "containerRuntimeVersion": "containerd://1.7.2", "architecture": "amd64",
                                "operatingSystem": "linux", "machineID": "m", "systemUUID": "s", "bootID": "b",
                                "kubeProxyVersion": "v1.30.6"},
                   "images": [{"names": [f"registry.example.com/app{j}@sha256:{'a' * 64}",
                                         f"registry.example.com/app{j}:1.{j}"], "sizeBytes": 100_000_000 + j}
                              for j in range(10)]}}


def pod(i: int, nodes: int) -> dict:
    app = f"app-{i % APPS}"
    return {
        "metadata": {"name": f"{app}-7d9c8b6f5-{i:06d}", "namespace": f"ns-{i % NAMESPACES}", "uid": f"p-{i}",
                     "resourceVersion": "1", "generateName": f"{app}-7d9c8b6f5-", "creationTimestamp": TIME,
                     "labels": {"app": app, "pod-template-hash": "7d9c8b6f5", "team": f"t{i % 20}"},
                     "annotations": {"prometheus.io/scrape": "true"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d9c8b6f5",
                                          "uid": f"rs-{i % APPS}", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": f"node-{i % nodes}", "schedulerName": "default-scheduler", "serviceAccountName": "default",
                 "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "app", "image": f"registry.example.com/{app}:1.2.3",
                                 "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                                 "env": [{"name": f"ENV_{k}", "value": f"value-{k}"} for k in range(6)],
                                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                               "limits": {"memory": "256Mi"}},
                                 "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                                 "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
                 "volumes": [{"name": "kube-api-access", "projected": {"sources": [
                     {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                     {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
                 "tolerations": [{"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300} for k in ("not-ready", "unreachable")],
                 "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                "whenUnsatisfiable": "ScheduleAnyway",
                                                "labelSelector": {"matchLabels": {"app": app}}}]},
        "status": {"phase": "Running", "podIP": f"10.2.{i // 256 % 256}.{i % 256}", "hostIP": "10.1.0.1",
                   "qosClass": "Burstable",
                   "conditions": [{"type": t, "status": "True", "lastTransitionTime": TIME}
                                  for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                   "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0, "started": True,
                                          "image": f"registry.example.com/{app}:1.2.3",
                                          "imageID": f"registry.example.com/{app}@sha256:{'b' * 64}",
                                          "containerID": f"containerd://{'c' * 64}",
                                          "state": {"running": {"startedAt": TIME}}}]}}


class StaticApi:
    """Lists (paged by `limit`/`continue`) and silent watches of a fixed cluster."""

    def __init__(self, nodes: int, pods: int):
        namespaces = [{"metadata": {"name": f"ns-{k}", "uid": f"ns-{k}", "resourceVersion": "1"},
                       "status": {"phase": "Active"}} for k in range(NAMESPACES)]
        self.items = {plural: [] for plural in KINDS}
        self.items["nodes"] = [json.dumps(node(i)) for i in range(nodes)]
        self.items["pods"] = [json.dumps(pod(i, nodes)) for i in range(pods)]
        self.items["namespaces"] = [json.dumps(n) for n in namespaces]
        self.pod_bytes = sum(map(len, self.items["pods"])) / max(pods, 1)
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                plural = next((p for p in reversed(url.path.split("/")) if p in KINDS), None)
                if plural is None:
                    return self._send(404, b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}')
                if query.get("watch") == ["true"]:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    time.sleep(3600)  # a watch that never has news
                    return None
                return self._send(200, api.page(plural, int(query.get("limit", ["0"])[0]),
                                                int(query.get("continue", ["0"])[0])))

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self, plural: str, limit: int, start: int) -> bytes:
        items = self.items[plural]
        end = start + limit if limit else len(items)
        group_version, kind = KINDS[plural]
        meta = {"resourceVersion": "1", **({"continue": str(end)} if end < len(items) else {})}
        head = json.dumps({"kind": f"{kind}List", "apiVersion": group_version, "metadata": meta})[:-1]
        return (head + ',"items":[' + ",".join(items[start:end]) + "]}").encode()

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        port = self.server.server_address[1]
        path.write_text("apiVersion: v1\nkind: Config\n"
                        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
                        "users: [{name: u, user: {}}]\n"
                        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
        return path


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def kube_scheduler(binary: str, kubeconfig: Path, directory: Path, settle: float) -> dict:
    config = directory / "scheduler.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                      f"clientConnection: {{kubeconfig: {kubeconfig}, contentType: application/json, "
                      "qps: 1000, burst: 1000}\nleaderElection: {leaderElect: false}\n"
                      "profiles: [{schedulerName: extended-scheduler}]\n")
    log = directory / "kube-scheduler.log"
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen([binary, "--config", str(config), "--secure-port", "0", "-v", "2"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        while "Caches populated for *v1.Pod" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() - start > 300:
                raise SystemExit(f"kube-scheduler never listed the pods: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        # then until the RSS has grown by less than 1% over `settle` seconds: the log line
        # can come from a first, partial informer before the whole cache is decoded
        samples: list[tuple[float, float]] = []
        while proc.poll() is None and time.monotonic() - start < 600:
            samples.append((time.monotonic(), rss_mib(proc.pid)))
            old = [r for t, r in samples if t <= samples[-1][0] - settle]
            if old and samples[-1][1] <= old[-1] * 1.01:
                break
            time.sleep(0.5)
        if proc.poll() is not None:
            raise SystemExit(f"kube-scheduler exited: {log.read_text()[-2000:]}")
        return {"stable_after_s": round(samples[-1][0] - start, 1), "rss_mib": round(samples[-1][1]),
                "peak_rss_mib": round(max(r for _, r in samples))}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def extender(kubeconfig: Path, settle: float) -> dict:
    listen, metrics = free_port(), free_port()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "extender", "serve", "--kubeconfig", str(kubeconfig),
                             "--listen", f"127.0.0.1:{listen}", "--metrics-listen", f"127.0.0.1:{metrics}",
                             "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None or time.monotonic() - start > 300:
                raise SystemExit("extender serve never became ready")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        ready = time.monotonic() - start
        time.sleep(settle)
        workers = [round(rss_mib(pid)) for pid in children(proc.pid)]
        master = round(rss_mib(proc.pid))
        return {"ready_s": round(ready, 1), "master_rss_mib": master, "worker_rss_mib": workers,
                "container_rss_mib": master + sum(workers)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("memory", __doc__, nodes=5000, pods=50000)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the lists before reading RSS")
    parser.add_argument("--kube-scheduler", default=os.environ.get("KUBE_SCHEDULER_BINARY", "/opt/kube-scheduler/kube-scheduler"))
    ns = parser.parse_args(argv)
    api = StaticApi(ns.nodes, ns.pods)
    with tempfile.TemporaryDirectory(prefix="perf-memory-") as tmp:
        directory = Path(tmp)
        kubeconfig = api.kubeconfig(directory)
        result = {"nodes": ns.nodes, "pods": ns.pods, "pod_json_bytes": round(api.pod_bytes),
                  "cpus": os.cpu_count(), "load1": round(os.getloadavg()[0], 2),
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "kube_scheduler": kube_scheduler(ns.kube_scheduler, kubeconfig, directory, ns.settle),
                  "extender": extender(kubeconfig, ns.settle)}
    print(json.dumps(result, indent=2))
    out = ROOT / "perf" / "results" / f"memory-{ns.nodes}-{ns.pods}.json"
    write_result(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
