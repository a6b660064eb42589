"""CPU the Pod watch spends per pod scheduled, and per event, by pod shape.

    .venv/bin/python -m perf watchcost [--pods 2000] [--shape harness|cluster]

A live source on the API-server double (`--nodes` nodes, `--pods` running pods listed
first); then `--requests` new pods are created and bound, as kube-scheduler's pods are
in `perf.scheduler_e2e` (an ADDED and a MODIFIED event each: the double's binding is one
write, as kube-apiserver's is). Reported: the Pod watch thread's CPU (its own thread,
from /proc) per pod scheduled and per event, and, in this process, what one event's
parts cost: `orjson.loads` of the line and `Store.upsert` of the object. `--shape
cluster`: pods as a Deployment's pods look on a real API server (managedFields, owner
reference, the service-account volume, default tolerations, conditions); `harness`:
the test harness's pods, as the end-to-end benchmark creates them.
Result: perf/results/watchcost.json (or `--out`).
"""

from __future__ import annotations

import copy
import gc
import tempfile
import threading
import time
from pathlib import Path

import orjson

from perf import options
from perf.output import write_result

ROOT = Path(__file__).resolve().parent.parent


def cluster_pod(name: str) -> dict:
    """A Deployment's pod as kube-apiserver serves it (before the binding)."""
    managed = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-12-07T05:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
             "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                            "f:ownerReferences": {".": {}, 'k:{"uid":"9f1c"}': {}}},
             "f:spec": {"f:containers": {'k:{"name":"app"}': {
                 ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                 "f:ports": {".": {}, 'k:{"containerPort":8080,"protocol":"TCP"}': {
                     ".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                 "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}},
                                 "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                 "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                 "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                 "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
                 "f:topologySpreadConstraints": {".": {}, 'k:{"topologyKey":"topology.kubernetes.io/zone",'
                                                          '"whenUnsatisfiable":"DoNotSchedule"}': {
                     ".": {}, "f:labelSelector": {}, "f:maxSkew": {}, "f:topologyKey": {},
                     "f:whenUnsatisfiable": {}}}}}},
    ]
    return {
        "metadata": {
            "name": name, "generateName": "web-7d4b9c5f6d-", "namespace": "default",
            "uid": f"uid-{name}", "resourceVersion": "1", "creationTimestamp": "2026-12-07T05:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c5f6d"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c5f6d",
                                 "uid": "9f1c", "controller": True, "blockOwnerDeletion": True}],
            "managedFields": managed,
        },
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}], "defaultMode": 420}}],
            "containers": [{"name": "app", "image": "registry.example.com/web:1.4.2",
                            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
                            "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                              "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "extended-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": "web"}}}],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def harness_pod(name: str) -> dict:
    from testing.harness import ZONE, pod

    return pod(name, {"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": "web"}}}])


def _thread_cpu(native_id: int) -> float:
    """CPU seconds of one thread of this process (utime + stime from /proc)."""
    import os

    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parts(make, n: int = 2000) -> dict[str, float]:
    """Per event, in this thread: the line's decode and the store's upsert into an empty
    store (µs, garbage collection off)."""
    from extender.state.store import Store

    store = Store()
    lines = []
    for i in range(n):
        obj = make(f"q{i}")
        obj["metadata"]["resourceVersion"] = str(10 + i)
        lines.append(orjson.dumps({"type": "ADDED", "object": obj}))
        bound = copy.deepcopy(obj)
        bound["spec"]["nodeName"] = f"n{i % 100}"
        bound["metadata"]["resourceVersion"] = str(100000 + i)
        bound["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                          "lastTransitionTime": "2026-12-07T05:00:01Z"}]
        lines.append(orjson.dumps({"type": "MODIFIED", "object": bound}))
    gc.disable()  # the parts' own cost, not collections of the lines made above
    try:
        t = time.thread_time()
        events = [orjson.loads(line) for line in lines]
        decode = time.thread_time() - t
        t = time.thread_time()
        for event in events:
            store.upsert("Pod", event["object"], rv=event["object"]["metadata"]["resourceVersion"])
        upsert = time.thread_time() - t
    finally:
        gc.enable()
    return {"bytes_per_event": sum(map(len, lines)) / len(lines),
            "decode_us": decode / len(lines) * 1e6, "upsert_us": upsert / len(lines) * 1e6}


def live(make, nodes: int, running: int, requests: int) -> dict[str, float]:
    """The Pod watch thread's CPU per pod created and bound, through a live source."""
    from extender import metrics
    from extender.state.live import LiveSource
    from testing.apiserver import FakeApiServer
    from testing.harness import node

    metrics.install()
    with FakeApiServer(bookmark_interval=60.0) as api, tempfile.TemporaryDirectory() as tmp:
        for i in range(nodes):
            api.create("nodes", node(f"n{i}", zone="abc"[i % 3]))
        for i in range(running):
            pod = make(f"r{i}")
            pod["spec"]["nodeName"] = f"n{i % nodes}"
            api.create("pods", pod)
        source = LiveSource.connect(str(api.write_kubeconfig(Path(tmp) / "kubeconfig")), False).start()
        try:
            if not source.wait_synced(120):
                raise RuntimeError("the live source did not sync")
            thread = next(t for t in threading.enumerate() if t.name == "watch-Pod")
            before = _thread_cpu(thread.native_id)
            for i in range(requests):
                api.create("pods", make(f"w{i}"))
                api.bind("default", f"w{i}", f"n{i % nodes}")
            last = ("default", f"w{requests - 1}")
            deadline = time.monotonic() + 300
            while (source.store.snapshot().pod_layer.get(*last) is None
                   or source.store.snapshot().pod_layer.get(*last).node_name == ""):
                if time.monotonic() > deadline:
                    raise RuntimeError("the watch never showed the last binding")
                time.sleep(0.05)
            cpu = _thread_cpu(thread.native_id) - before
        finally:
            source.stop()
    return {"watch_ms_per_pod": cpu / requests * 1e3, "watch_us_per_event": cpu / (2 * requests) * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("watchcost", __doc__, nodes=500, pods=5000, requests=2000,
                            out=ROOT / "perf" / "results" / "watchcost.json")
    parser.add_argument("--shape", choices=("harness", "cluster", "both"), default="both")
    args = parser.parse_args(argv)
    shapes = {"harness": harness_pod, "cluster": cluster_pod}
    chosen = list(shapes) if args.shape == "both" else [args.shape]
    result = {}
    for name in chosen:
        result[name] = {**parts(shapes[name]), **live(shapes[name], args.nodes, args.pods, args.requests)}
        print(name, {k: round(v, 2) for k, v in result[name].items()}, flush=True)
    with open("/proc/loadavg") as f:
        result["loadavg_after"] = f.read().split()[:3]
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
