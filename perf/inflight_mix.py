"""A mixed burst through the real kube-scheduler: which pods wait for which binds.

    KUBE_SCHEDULER_BINARY=/path/kube-scheduler .venv/bin/python -m perf.inflight_mix \\
        [--apps 5] [--replicas 100] [--bare 100] [--prebind-ms 5,20] [--runs 2]

One namespace, `apps` Deployment-like workloads (hard zone spread, maxSkew 1) of
`replicas` pods each plus `bare` pods without constraints, created interleaved (as a
rollout of several workloads at once arrives), over 3 zones x 4 nodes (tests/e2e's
harness: the API-server double, `extender serve` as shipped, kube-scheduler v1.30.6 with
the shipped configuration). The recording proxy between the scheduler and the extender
holds each `bind` for `prebind-ms` (uniform: what PreBind plugins such as volume binding
add between a pod's filter answer and its bind). kube-scheduler runs one
scheduling cycle at a time, so every in-flight wait stalls the whole queue. Before #22
every pod waited for the previous pod of its namespace; now a pod waits only for
pending pods one of its DoNotSchedule constraints selects (a bare pod for none).
Reported: pods/s (first create to settled, shared machine: compare runs made back to
back), the extender's summed in-flight wait, placements over maxSkew (every bind
replayed against the truth, `testing.truth`) and spreads over maxSkew at the end (both
must be 0). Run it from a tree with the code to measure.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from perf import options
from perf.output import write_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results" / "inflight_mix.json"


def run_once(binary: str, apps: int, replicas: int, bare: int, prebind: tuple[float, float]) -> dict:
    from testing import truth
    from testing.harness import ZONE, E2ECluster, node, pod, spread

    nodes = [node(f"n-{z}{i}", f"z{z}", cpu="1000", memory="4Ti", pods="10000")
             for z in range(3) for i in range(4)]
    pods = []
    for i in range(max(replicas, bare)):
        for a in range(apps if i < replicas else 0):
            labels = {"app": f"app{a}"}
            pods.append(pod(f"app{a}-{i}", labels, cpu="10m", spread=[spread(ZONE, labels)]))
        if i < bare:
            pods.append(pod(f"bare-{i}", {"app": "bare"}, cpu="10m"))
    with tempfile.TemporaryDirectory() as tmp:
        cluster = E2ECluster(Path(tmp), binary, extender_flags=("--log-level", "warning"))
        try:
            cluster.start(nodes)
            cluster.tap.prebind = prebind
            started = time.monotonic()
            cluster.create(*pods)
            outcome = cluster.wait_settled(pods, timeout=3600)
            elapsed = time.monotonic() - started - 2.0
            waited = cluster.extender_metric("extender_inflight_wait_seconds_sum")
            report = cluster.replay()
            over = sum(truth.final_skew(cluster.api, [("default", f"app{a}-{i}") for i in range(replicas)],
                                        ZONE) > 1 for a in range(apps))
        finally:
            cluster.stop()
    return {"pods": len(pods), "bound": len(outcome.bound), "seconds": round(elapsed, 2),
            "pods_per_second": round(len(pods) / elapsed, 1), "inflight_wait_seconds": round(waited, 2),
            "placements_over_max_skew": sum(v.rule == "PodTopologySpread" for v in report.violations),
            "spreads_over_max_skew": over, "unschedulable": len(outcome.unschedulable)}


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("inflight_mix", __doc__, whole_doc=True)
    parser.add_argument("--apps", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--bare", type=int, default=100)
    parser.add_argument("--prebind-ms", default="5,20", help="low,high")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--label", default="", help="what code this is (recorded with the results)")
    options.add(parser, out=RESULTS)
    ns = parser.parse_args(argv)
    binary = options.kube_scheduler(parser)
    sys.path.insert(0, str(Path.cwd()))
    low, high = (float(x) / 1000 for x in ns.prebind_ms.split(","))
    runs = [run_once(binary, ns.apps, ns.replicas, ns.bare, (low, high)) for _ in range(ns.runs)]
    for r in runs:
        print(f"{ns.label or 'run'}: {r['pods']} pods in {r['seconds']} s = {r['pods_per_second']} pods/s; "
              f"in-flight wait {r['inflight_wait_seconds']} s; placements over maxSkew "
              f"{r['placements_over_max_skew']}; spreads over maxSkew {r['spreads_over_max_skew']}; "
              f"unschedulable {r['unschedulable']}", flush=True)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = json.loads(out.read_text()) if out.exists() else {}
    entry = report.setdefault(ns.label or "run", {"apps": ns.apps, "replicas": ns.replicas, "bare": ns.bare,
                                                  "prebind_ms": ns.prebind_ms,
                                                  "scheduler": "kube-scheduler v1.30.6", "runs": []})
    entry["runs"] += runs  # runs of one label accumulate: alternate labels back to back
    write_result(out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
