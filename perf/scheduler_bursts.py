"""Bursts of replicas through the real kube-scheduler, with and without the extender's
in-flight accounting (`--inflight-wait`), checked against the truth.

    KUBE_SCHEDULER_BINARY=/path/kube-scheduler .venv/bin/python -m perf.scheduler_bursts \\
        [--bursts 20] [--replicas 1000] [--waits 1,0]

(`make perf-scheduler` sets the binary through `.ci/kube-scheduler`.)

One cluster per mode (tests/e2e's harness: the API-server double in process with its
journal, `extender serve` as shipped plus `--inflight-wait W`, kube-scheduler v1.30.6
with the shipped configuration). Each burst is one Deployment-like set of replicas with
hard zone + hostname spread (maxSkew 1) over 3 zones x 4 nodes, created at once; the
next burst starts when the previous one has settled (every pod bound or reported
unschedulable). Reported per mode: pods/s per burst (first create to settled, on a
shared machine), placements over maxSkew (every bind replayed against the truth at its
decision, `testing.truth`), spreads over maxSkew at the end, and the unschedulable
pods checked against the final truth: one some node admits is "wrongly" unschedulable.

Results go to perf/results/scheduler_bursts.json and are printed. Throughput is
reported, never asserted; tests/e2e/test_bursts.py runs the pass/fail versions.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from perf import options
from perf.output import write_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results" / "scheduler_bursts.json"


def run_mode(binary: str, inflight_wait: float, bursts: int, replicas: int, zones: int, per_zone: int,
             log=print) -> dict:
    from testing import truth
    from testing.harness import HOST, ZONE, E2ECluster, node, pod, spread

    nodes = [node(f"n-{z}{i}", f"z{z}", cpu="1000", memory="4Ti", pods="10000")
             for z in range(zones) for i in range(per_zone)]
    rates: list[float] = []
    unschedulable = wrongly = final_over = 0
    with tempfile.TemporaryDirectory() as tmp:
        cluster = E2ECluster(Path(tmp), binary, extender_flags=("--inflight-wait", str(inflight_wait),
                                                                  "--log-level", "warning"))
        try:
            cluster.start(nodes)
            for b in range(bursts):
                labels = {"app": f"burst{b}"}
                constraints = [spread(ZONE, labels), spread(HOST, labels)]
                pods = [pod(f"burst{b}-{i}", labels, cpu="10m", spread=constraints) for i in range(replicas)]
                started = time.monotonic()
                cluster.create(*pods)
                outcome = cluster.wait_settled(pods, timeout=3600)
                rates.append(replicas / (time.monotonic() - started - 2.0))
                unschedulable += len(outcome.unschedulable)
                wrongly += len(cluster.pending_but_feasible(outcome.unschedulable))
                keys = [("default", p["metadata"]["name"]) for p in pods]
                final_over += sum(truth.final_skew(cluster.api, keys, k) > 1 for k in (ZONE, HOST))
                log(f"  inflight-wait {inflight_wait:g}: burst {b + 1}/{bursts}: {rates[-1]:.1f} pods/s, "
                    f"unschedulable {len(outcome.unschedulable)} (wrongly so far {wrongly})")
            report = cluster.replay()
            expired = cluster.extender_metric("extender_inflight_expired_total")
        finally:
            cluster.stop()
    return {"inflight_wait": inflight_wait, "pods_per_second": [round(r, 1) for r in rates],
            "mean_pods_per_second": round(sum(rates) / len(rates), 1), "binds": report.binds,
            "placements_over_max_skew": sum(v.rule == "PodTopologySpread" for v in report.violations),
            "other_violations": sum(v.rule != "PodTopologySpread" for v in report.violations),
            "violation_examples": [str(v) for v in report.violations[:5]],
            "spreads_over_max_skew_at_end": final_over, "unschedulable": unschedulable,
            "wrongly_unschedulable": wrongly, "inflight_expired": expired}


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("scheduler_bursts", __doc__)
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--nodes-per-zone", type=int, default=4)
    parser.add_argument("--waits", default="1,0", help="--inflight-wait values, one mode each")
    options.add(parser, out=RESULTS)
    ns = parser.parse_args(argv)
    binary = options.kube_scheduler(parser)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    report = {"kube_scheduler": "v1.30.6", "bursts": ns.bursts, "replicas": ns.replicas,
              "nodes": ns.zones * ns.nodes_per_zone,
              "modes": [run_mode(binary, float(w), ns.bursts, ns.replicas, ns.zones, ns.nodes_per_zone, log)
                        for w in ns.waits.split(",") if w]}
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    write_result(ns.out, report)
    for mode in report["modes"]:
        print(f"inflight-wait {mode['inflight_wait']:g}: {mode['mean_pods_per_second']} pods/s, "
              f"{mode['placements_over_max_skew']} placements over maxSkew in {mode['binds']}, "
              f"{mode['spreads_over_max_skew_at_end']} spreads over it at the end, "
              f"{mode['unschedulable']} unschedulable (wrongly {mode['wrongly_unschedulable']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
