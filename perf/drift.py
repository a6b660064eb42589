"""The drift report at scale: what one node's change costs it, and the memory it adds.

    .venv/bin/python -m perf.drift [--nodes 15000] [--pods 150000] [--changes 200] [--spread]

The cluster is `perf.generate`'s (its taint and label mix: spot SLA taints, kernel
taints and labels, PreferNoSchedule and NoExecute taints, cordons) with scheduling
constraints added per workload (`constrain`): Gt SLA tolerations, CEL and Semver
tolerations through the annotation, Semver kernel affinity through the annotation, a
PersistentVolume with a Semver node-affinity annotation per pod of some StatefulSets,
and a hard zone spread constraint for a tenth of the Deployments. The generator places pods at random, not where they fit, so many start
out drifted: the report is large, not the quiet case.

Two child processes feed the same objects, one by one through `Store.upsert` (the
watch's path), into a store without and with the drift tracker, then freeze the heap as
the serving process does after its initial sync; the difference of their RSS after a
full collection is the memory the report adds. The tracker's child
then measures, for `--changes` random nodes each: lowering a spot node's SLA value (or
relabelling another's kernel) and putting it back, each as `upsert` + `publish` (the
state's own cost, the tracker's hook included) then `settle` (the report's cost: the
pods on that node re-evaluated), in wall-clock and thread CPU time; one batch of 1,000
node changes; and a pod status update (what the hook adds to every pod event, against
the other child). `--spread` adds one whole-cluster run of the topology spread report.

The machine is shared: the 1-minute load is recorded before and after. Results go to
perf/results/drift-NODES-PODS[-spread].json and are printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from perf import options
from perf.output import write_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results"
PREFIX = "scheduling-extender.io"
KINDS = ("Node", "PersistentVolume", "PersistentVolumeClaim", "Service", "ReplicaSet", "StatefulSet", "Pod")


def constrain(cluster: dict, seed: int = 1) -> dict[str, int]:
    """Add scheduling constraints per workload (pods of one workload share them), and
    volumes to some StatefulSets' pods; returns how many pods got each kind."""
    from perf.generate import KERNEL_KEY, SLA_KEY

    rng = random.Random(seed)
    profiles: dict[tuple[str, str], tuple[str, bool]] = {}
    counts: dict[str, int] = {}
    volumes: list[dict] = []
    for obj in [o for o in cluster["items"] if o.get("kind") == "Pod"]:
        meta, spec = obj["metadata"], obj["spec"]
        owner = meta["ownerReferences"][0]
        key = (meta["namespace"], owner["name"])
        drawn = profiles.get(key)
        if drawn is None:
            drawn = profiles[key] = (rng.choices(
                ["none", "gt", "cel", "semver-toleration", "semver-affinity", "volume"],
                weights=[30, 30, 10, 10, 15, 5 if owner["kind"] == "StatefulSet" else 0])[0],
                owner["kind"] != "StatefulSet" and rng.random() < 0.1)  # hard zone spread for a tenth
        profile, spreads = drawn
        counts[profile] = counts.get(profile, 0) + 1
        if spreads:
            counts["spread"] = counts.get("spread", 0) + 1
            spec["topologySpreadConstraints"] = [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": meta["labels"]["app"]}}}]
        annotations = meta.setdefault("annotations", {})
        if profile == "gt":
            spec["tolerations"].append({"key": SLA_KEY, "operator": "Gt", "value": "850", "effect": "NoSchedule"})
        elif profile == "cel":
            annotations[f"{PREFIX}/tolerations"] = json.dumps(
                [{"expression": f"taint.key == '{SLA_KEY}' && int(taint.value) >= 900"}])
        elif profile == "semver-toleration":
            annotations[f"{PREFIX}/tolerations"] = json.dumps(
                [{"key": KERNEL_KEY, "operator": "SemverGt", "value": "5.9.0", "effect": "NoSchedule"}])
        elif profile == "semver-affinity":
            annotations[f"{PREFIX}/node-affinity"] = json.dumps({"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": KERNEL_KEY, "operator": "SemverGt", "values": ["5.9.0"]}]}]}})
        elif profile == "volume":
            claim = f"data-{meta['name']}"
            spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
            volumes.append({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {
                "name": f"pv-{meta['namespace']}-{meta['name']}", "annotations": {
                    f"{PREFIX}/node-affinity": json.dumps({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": KERNEL_KEY, "operator": "SemverGt", "values": ["5.9.0"]}]}]}})}},
                "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                         "storageClassName": "fast",
                         "claimRef": {"namespace": meta["namespace"], "name": claim}},
                "status": {"phase": "Bound"}})
            volumes.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
                "name": claim, "namespace": meta["namespace"]},
                "spec": {"volumeName": f"pv-{meta['namespace']}-{meta['name']}", "storageClassName": "fast",
                         "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
                "status": {"phase": "Bound"}})
    cluster["items"].extend(volumes)
    return counts


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def ms_stats(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"p50": round(pct(ms, 0.5), 3), "p99": round(pct(ms, 0.99), 3), "max": round(max(ms), 3)}


def child(path: str, with_tracker: bool, changes: int, spread: bool) -> dict:
    """Feed the cluster into a store (with or without the tracker) and measure."""
    from extender.config import Config
    from extender.drift import attach_tracker
    from extender.engine import Extender
    from extender.state import StaticSource
    from extender.state.gcfreeze import freeze_state
    from extender.state.store import Store

    objects = orjson.loads(Path(path).read_bytes())["items"]
    by_kind: dict[str, list[dict]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    del objects
    config = Config(drift_report=True, drift_topology_spread=spread)
    store = Store()
    engine = Extender(config, StaticSource(store.snapshot()))  # both children import the same code
    tracker = attach_tracker(store, config) if with_tracker else None
    out: dict = {"tracker": with_tracker}
    started = time.perf_counter()
    for kind in KINDS:
        for obj in by_kind.get(kind, ()):
            store.upsert(kind, obj)
    store.publish()
    out["feed_s"] = round(time.perf_counter() - started, 2)
    freeze_state("fed")  # as the serving process does once every kind has listed
    if tracker is not None:
        tracker.bind(engine.framework.plugins, spread=spread)
        c0, t0 = time.thread_time(), time.perf_counter()
        evaluated = tracker.settle()
        out["initial_settle_s"] = round(time.perf_counter() - t0, 2)
        out["initial_settle_cpu_s"] = round(time.thread_time() - c0, 2)
        out["evaluated"] = evaluated
        out["tracked_pods"] = tracker.tracked
        out["drifted_pods"] = len(tracker.drifted)
        out["shapes"] = len(tracker.shapes)
        out["by_label"] = {"/".join(k): n for k, n in sorted(tracker.counts().items())}
    pods = by_kind["Pod"]
    nodes = by_kind["Node"]
    del by_kind
    gc.collect()
    out["rss_mb"] = round(rss_mb(), 1)
    rng = random.Random(11)
    # a pod event that changes nothing the plugins read (a status update): the hook's cost
    pod_times = []
    for _ in range(2000):
        obj = rng.choice(pods)
        obj = {**obj, "status": {**obj["status"], "conditions": [{"type": "Ready", "status": str(rng.random())}]}}
        t0 = time.perf_counter()
        store.upsert("Pod", obj)
        pod_times.append(time.perf_counter() - t0)
    out["pod_status_update_ms"] = ms_stats(pod_times)
    if tracker is None:
        return out
    tracker.settle()
    state, report, report_cpu, reevaluated = [], [], [], []
    for _ in range(changes):
        node = rng.choice(nodes)
        changed = lower_sla_or_relabel(node)
        for obj in (changed, node):  # the change, then putting it back
            t0 = time.perf_counter()
            store.upsert("Node", obj)
            store.publish()
            t1, c1 = time.perf_counter(), time.thread_time()
            reevaluated.append(tracker.settle())
            report.append(time.perf_counter() - t1)
            report_cpu.append(time.thread_time() - c1)
            state.append(t1 - t0)
    out["node_change"] = {"changes": len(report), "pods_evaluated_mean": round(sum(reevaluated) / len(reevaluated), 1),
                          "state_upsert_publish_ms": ms_stats(state), "report_settle_ms": ms_stats(report),
                          "report_settle_cpu_ms": ms_stats(report_cpu)}
    batch = rng.sample(nodes, 1000)
    for node in batch:
        store.upsert("Node", lower_sla_or_relabel(node))
    store.publish()
    t0 = time.perf_counter()
    evaluated = tracker.settle()
    out["batch_1000_nodes"] = {"settle_s": round(time.perf_counter() - t0, 3), "pods_evaluated": evaluated}
    if spread:
        t0 = time.perf_counter()
        tracker.run_spread(interval=0)
        out["spread_run_s"] = round(time.perf_counter() - t0, 2)
        out["spread_drifted_pods"] = len(tracker.spread.drifted)
    return out


def lower_sla_or_relabel(node: dict) -> dict:
    """A spot node's SLA value lowered to 100, or another node's kernel label set to 5.4.0."""
    from perf.generate import KERNEL_KEY, SLA_KEY

    taints = (node.get("spec") or {}).get("taints") or []
    if any(t["key"] == SLA_KEY for t in taints):
        spec = {**node["spec"], "taints": [{**t, "value": "100"} if t["key"] == SLA_KEY else t for t in taints]}
        return {**node, "spec": spec}
    labels = {**node["metadata"]["labels"], KERNEL_KEY: "5.4.0"}
    return {**node, "metadata": {**node["metadata"], "labels": labels}}


def run(nodes: int, pods: int, changes: int, spread: bool) -> dict:
    from perf.generate import generate_cluster

    load_before = os.getloadavg()[0]
    cluster, _ = generate_cluster(nodes, pods)
    profiles = constrain(cluster)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.json"
        path.write_bytes(orjson.dumps(cluster))
        del cluster
        gc.collect()
        results = []
        for tracker in (False, True):
            cmd = [sys.executable, "-m", "perf.drift", "--child", str(path), "--changes", str(changes)]
            if tracker:
                cmd.append("--tracker")
            if spread:
                cmd.append("--spread")
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base, drift = results
    return {
        "nodes": nodes, "pods": pods, "constraint_profiles": profiles,
        "report_adds_rss_mb": round(drift["rss_mb"] - base["rss_mb"], 1),
        "without_tracker": base, "with_tracker": drift,
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("drift", __doc__, nodes=15_000, pods=150_000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--spread", action="store_true", help="also time one run of the spread report")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tracker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.tracker, args.changes, args.spread)))
        return 0
    out = run(args.nodes, args.pods, args.changes, args.spread)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"drift-{args.nodes}-{args.pods}{'-spread' if args.spread else ''}.json"
    write_result(RESULTS / name, out)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
