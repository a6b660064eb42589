"""A what-if at scale: its cost and memory on a large cluster.

    .venv/bin/python -m perf what_if [--nodes 15000] [--pods 150000] [--changes 100] [--pending 1500]

The cluster is `perf.generate`'s with `perf.drift.constrain`'s scheduling constraints
(Gt, CEL and Semver tolerations, Semver kernel affinity, volumes with a Semver
annotation, a hard zone spread for a tenth of the Deployments); `--pending` pods are
taken off their nodes (pending). The state is loaded as `extender whatif` loads it
(a store with the drift tracker, the spread report on), then one request of
`--changes` changes, each on one node (a spot node's SLA lowered to 500, another's
kernel relabelled 5.4.0, another cordoned, in turn), is answered by
`extender.whatif.answer` `--runs` times (default 3): wall-clock and process CPU seconds each, then once
under tracemalloc for the peak of what the what-if allocates beyond the loaded state.

The machine is shared: the 1-minute load is recorded before and after. The result goes
to perf/results/what_if-NODES-PODS.json and is printed.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import tracemalloc
from pathlib import Path

from perf import options
from perf.drift import constrain
from perf.generate import KERNEL_KEY, SLA_KEY, generate_cluster
from perf.output import write_result

RESULTS = Path(__file__).resolve().parent / "results"


def build(nodes: int, pods: int, pending: int, seed: int = 1):
    from extender import metrics
    from extender.config import Config
    from extender.drift import attach_tracker
    from extender.engine import Extender
    from extender.state import StaticSource
    from extender.state.store import Store

    metrics.install()
    cluster, _ = generate_cluster(nodes, pods, seed)
    constrain(cluster, seed)
    objects = cluster["items"]
    rng = random.Random(seed)
    pod_objects = [o for o in objects if o.get("kind") == "Pod"]
    for obj in rng.sample(pod_objects, min(pending, len(pod_objects))):
        obj["spec"].pop("nodeName", None)
        obj.setdefault("status", {})["phase"] = "Pending"
    config = Config(drift_report=True, drift_topology_spread=True, inflight_wait=0)
    store = Store()
    tracker = attach_tracker(store, config)
    store.load(objects)
    engine = Extender(config, StaticSource(store.snapshot()))
    tracker.bind(engine.framework.plugins, spread=True)
    return engine, tracker, objects


def request(objects: list[dict], changes: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    nodes = [o for o in objects if o.get("kind") == "Node"]
    spot = [o["metadata"]["name"] for o in nodes
            if any(t.get("key") == SLA_KEY for t in (o.get("spec") or {}).get("taints") or ())]
    other = [o["metadata"]["name"] for o in nodes if o["metadata"]["name"] not in set(spot)]
    out = []
    for i in range(changes):
        if i % 3 == 0 and spot:
            out.append({"nodes": [rng.choice(spot)], "taint": f"{SLA_KEY}=500:NoSchedule"})
        elif i % 3 == 1:
            out.append({"nodes": [rng.choice(other)], "label": f"{KERNEL_KEY}=5.4.0"})
        else:
            out.append({"nodes": [rng.choice(other)], "cordon": True})
    return {"changes": out}


def main(argv: list[str] | None = None) -> int:
    from extender.whatif import answer

    parser = options.parser("what_if", __doc__, nodes=15_000, pods=150_000)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--pending", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=3, help="timed answers (default 3)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    engine, tracker, objects = build(args.nodes, args.pods, args.pending)
    loaded = time.perf_counter() - started
    body = request(objects, args.changes)
    runs = []
    for _ in range(args.runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = answer(engine, tracker, body, objects)
        runs.append({"seconds": round(time.perf_counter() - wall, 3), "cpu_seconds": round(time.process_time() - cpu, 3)})
    tracemalloc.start()
    answer(engine, tracker, body, objects)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out = {
        "nodes": args.nodes, "pods": args.pods, "pending": args.pending, "changes": args.changes,
        "touched_nodes": result["nodes"]["touched"], "load_seconds": round(loaded, 1), "runs": runs,
        "peak_traced_mib": round(peak / 2**20, 1),
        "answer": {"running_evaluated": result["running"]["evaluated"], "running_changed": len(result["running"]["pods"]),
                   "pending_evaluated": result["pending"]["evaluated"], "pending_changed": len(result["pending"]["pods"]),
                   "spread_workloads": len(result["spread"]["workloads"]), "answer_bytes": len(json.dumps(result))},
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "cpus": os.cpu_count(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS / f"what_if-{args.nodes}-{args.pods}.json", out)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
