"""A mixed burst through the kube-scheduler simulator: which pods wait for which binds.

    .venv/bin/python -m perf.inflight_mix [--apps 5] [--replicas 100] [--bare 100]
                                          [--prebind-ms 5,20] [--runs 2]

One namespace, `apps` Deployment-like workloads (hard zone spread, maxSkew 1) of
`replicas` pods each plus `bare` pods without constraints, submitted interleaved (as a
rollout of several workloads at once arrives), over 3 zones x 4 nodes; the simulator's
binding cycle sleeps `prebind-ms` (uniform; PreBind work and the API round trip) before
the extender's `bind`. kube-scheduler runs one cycle at a time, so every in-flight wait
stalls the whole queue. Before #22 every pod waited for the previous pod of its
namespace; now a pod waits only for pending pods one of its DoNotSchedule constraints
selects (a bare pod for none). Reported: pods/s (wall clock, shared machine: compare
runs made back to back), the extender's summed in-flight wait, and placements over
maxSkew at the end (must be 0). Run it from a tree with the code to measure (the served
extender is `python -m extender` from the current directory).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results" / "inflight_mix.json"
ZONE = "topology.kubernetes.io/zone"


def metric_sum(served, name: str) -> float:
    for line in served.get("/metrics")[1].decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def run_once(apps: int, replicas: int, bare: int, prebind: tuple[float, float]) -> dict:
    from tests.scheduler.harness import cluster, hard_spread, node, pod

    nodes = [node(f"n-{z}{i}", f"z{z}", cpu="1000", memory="4Ti") for z in range(3) for i in range(4)]
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in nodes}
    pods = []
    for i in range(replicas):
        for a in range(apps):
            labels = {"app": f"app{a}"}
            pods.append(pod(f"app{a}-{i}", labels, cpu="10m", spread=[hard_spread(ZONE, labels)]))
        if i < bare:
            pods.append(pod(f"bare-{i}", {"app": "bare"}, cpu="10m"))
    pods += [pod(f"bare-{i}", {"app": "bare"}, cpu="10m") for i in range(replicas, bare)]
    with tempfile.TemporaryDirectory() as tmp, cluster(nodes, Path(tmp), bind_delay=prebind) as (api, served, sched):
        started = time.perf_counter()
        sched.submit(pods)
        stats = sched.run(timeout=3600)
        elapsed = time.perf_counter() - started
        waited = metric_sum(served, "extender_inflight_wait_seconds_sum")
        placed = [p for p in api.objects("pods") if p["spec"].get("nodeName")]
    over = 0
    for a in range(apps):
        counts = Counter({z: 0 for z in set(zone_of.values())})
        counts.update(zone_of[p["spec"]["nodeName"]] for p in placed if p["metadata"]["labels"]["app"] == f"app{a}")
        over += max(counts.values()) - min(counts.values()) > 1
    return {"pods": len(pods), "scheduled": stats.scheduled, "seconds": round(elapsed, 2),
            "pods_per_second": round(len(pods) / elapsed, 1), "inflight_wait_seconds": round(waited, 2),
            "spreads_over_max_skew": over, "unschedulable": stats.unschedulable, "errors": sched.errors[:5]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.inflight_mix", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--bare", type=int, default=100)
    parser.add_argument("--prebind-ms", default="5,20")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--label", default="", help="what code this is (recorded with the results)")
    parser.add_argument("--out", default=str(RESULTS))
    ns = parser.parse_args(argv)
    sys.path.insert(0, str(Path.cwd()))
    low, high = (float(x) / 1000 for x in ns.prebind_ms.split(","))
    runs = [run_once(ns.apps, ns.replicas, ns.bare, (low, high)) for _ in range(ns.runs)]
    for r in runs:
        print(f"{ns.label or 'run'}: {r['pods']} pods in {r['seconds']} s = {r['pods_per_second']} pods/s; "
              f"in-flight wait {r['inflight_wait_seconds']} s; spreads over maxSkew {r['spreads_over_max_skew']}; "
              f"unschedulable {r['unschedulable']}", flush=True)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = json.loads(out.read_text()) if out.exists() else {}
    entry = report.setdefault(ns.label or "run", {"apps": ns.apps, "replicas": ns.replicas, "bare": ns.bare,
                                                  "prebind_ms": ns.prebind_ms, "runs": []})
    entry["runs"] += runs  # runs of one label accumulate: alternate labels back to back
    out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
