"""Bursts of replicas through the kube-scheduler simulator, with and without the
extender's in-flight accounting (`--inflight-wait`).

    .venv/bin/python -m perf.scheduler_sim [--bursts 20] [--replicas 1000]

A real `extender serve` in live mode against the API-server double, driven by
`tests.doubles.scheduler` at full speed (bind delay 0-5 ms). Each burst is one
Deployment-like set of replicas with hard zone + hostname spread (maxSkew 1) over
3 zones x 4 nodes. Every placement decision updates the counts of what the scheduler
has placed (bound + binding in flight) and checks their skew; after every bind the
truth is read back (the pod is where the scheduler put it); the end state of each
burst is checked against the truth alone. Reported per mode: pods/s (whole
bursts, wall clock, on a shared machine), violations (bind-time checks and final), and
every pod given up as unschedulable checked against the truth of that moment, by
counting and by the reference engine (`perf.spread_truth`): "wrongly" must be 0.

Results go to perf/results/scheduler_sim.json and are printed. Throughput is reported,
never asserted; `make test` runs the 3 x 200 version as a pass/fail test (0 violations,
tests/scheduler/test_bursts.py) and 2 x 200 with `--inflight-wait 0` (every pod given up
is unschedulable in the truth, tests/scheduler/test_unschedulable_truth.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results" / "scheduler_sim.json"
ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"


def run_mode(inflight_wait: float, bursts: int, replicas: int, zones: int, per_zone: int) -> dict:
    from perf.spread_truth import TruthCheck, new_totals
    from tests.scheduler.harness import cluster, hard_spread, node, pod

    nodes = [node(f"n-{z}{i}", f"z{z}", cpu="1000", memory="4Ti") for z in range(zones) for i in range(per_zone)]
    domain = {ZONE: {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in nodes},
              HOST: {n["metadata"]["name"]: n["metadata"]["name"] for n in nodes}}
    lock = threading.Lock()
    state = {"app": "", "counts": {}, "violations": 0, "mismatch": 0}

    def assumed(key, node_name):
        """Every placement decision, in order: the scheduler's view of the counts."""
        app = key[1].rsplit("-", 1)[0]
        counts = state["counts"].setdefault(app, {t: Counter({d: 0 for d in set(of.values())})
                                                   for t, of in domain.items()})
        for topo, of in domain.items():
            counts[topo][of[node_name]] += 1
            if max(counts[topo].values()) - min(counts[topo].values()) > 1:
                state["violations"] += 1

    def check(key, node_name):
        """After every bind: the truth holds the pod where the scheduler put it."""
        truth = api.get("pods", key[1], key[0])
        with lock:
            if truth["spec"].get("nodeName") != node_name:
                state["mismatch"] += 1

    rates, final, totals = [], 0, new_totals()
    with tempfile.TemporaryDirectory() as tmp, \
            cluster(nodes, Path(tmp), inflight_wait=inflight_wait, on_bind=check, on_assume=assumed,
                    max_attempts=3, on_unschedulable=lambda key: truth_check.record(key)) \
            as (api, served, sched):
        truth_check = TruthCheck(api, domain, binding=lambda: sched._binding)
        for b in range(bursts):
            labels = {"app": f"burst{b}"}
            spread = [hard_spread(ZONE, labels), hard_spread(HOST, labels)]
            pods = [pod(f"burst{b}-{i}", labels, cpu="10m", spread=spread) for i in range(replicas)]
            truth_check.burst(f"burst{b}", [("default", p["metadata"]["name"]) for p in pods])
            started = time.perf_counter()
            sched.submit(pods)
            sched.run(timeout=3600)
            rates.append(replicas / (time.perf_counter() - started))
            everything = api.objects("pods")
            truth_check.verify(f"burst{b}", api.objects("nodes"), everything, totals)
            truth = [p for p in everything if p["metadata"]["labels"].get("app") == f"burst{b}"]
            for of in domain.values():
                c = Counter({d: 0 for d in set(of.values())})
                c.update(of[p["spec"]["nodeName"]] for p in truth if p["spec"].get("nodeName"))
                final += max(c.values()) - min(c.values()) > 1
            print(f"  inflight-wait {inflight_wait:g}: burst {b + 1}/{bursts}: {rates[-1]:.1f} pods/s, "
                  f"violations so far {state['violations']}, unschedulable so far "
                  f"{totals['unschedulable_checked']} (wrongly {totals['wrongly_unschedulable']})", flush=True)
        expired = served.metric("extender_inflight_expired_total")
    return {"inflight_wait": inflight_wait, "pods_per_second": rates,
            "mean_pods_per_second": sum(rates) / len(rates), "bind_time_violations": state["violations"],
            "final_violations": final, "truth_mismatches": state["mismatch"],
            "scheduled": sched.stats.scheduled, "unschedulable": sched.stats.unschedulable,
            "bind_errors": sched.stats.bind_errors, "errors": sched.errors[:10],
            "expired_pending": expired, "unschedulable_vs_truth": totals}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.scheduler_sim", description=__doc__)
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--nodes-per-zone", type=int, default=4)
    parser.add_argument("--out", default=str(RESULTS))
    ns = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    report = {"bursts": ns.bursts, "replicas": ns.replicas, "nodes": ns.zones * ns.nodes_per_zone,
              "modes": [run_mode(w, ns.bursts, ns.replicas, ns.zones, ns.nodes_per_zone) for w in (1.0, 0.0)]}
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).write_text(json.dumps(report, indent=2) + "\n")
    for mode in report["modes"]:
        print(f"inflight-wait {mode['inflight_wait']:g}: {mode['mean_pods_per_second']:.1f} pods/s, "
              f"violations at bind {mode['bind_time_violations']}, final {mode['final_violations']}")
        t = mode["unschedulable_vs_truth"]
        print(f"  unschedulable {mode['unschedulable']}, checked against the truth: {t['unschedulable_checked']}, "
              f"no node fits {t['truth_admits_no_node']}, wrongly: {t['wrongly_unschedulable']} "
              f"(given up with binds in flight {t['given_up_with_binds_in_flight']}, a node fitting then "
              f"{t['of_which_truth_admitted_a_node']}; a node fits the final truth {t['final_truth_admits_a_node']}); "
              f"reference engine disagrees: {t['reference_disagrees']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
