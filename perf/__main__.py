"""The one entry point of the benchmarks: `python -m perf NAME [ARGS]`.

`generate`, `run --quick|--full`, `profile` and `whatif` are this module's; every other
NAME is a benchmark module of `perf/` run with ARGS (`python -m perf churn --nodes
5000` is `python -m perf.churn --nodes 5000`, which still works); `python -m perf list`
names them. Each declares the options the benchmarks share (`--nodes`, `--pods`, `--out`
...) through `perf.options` and writes its result through `perf.output.write_result`."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from perf import options

# NAME -> what it measures (its module's main(argv) takes the rest of the command line)
BENCHMARKS = {
    "attacks": "the hardening attacks: RSS, probes and verbs under each (issues 28, 35)",
    "bindcost": "CPU per binding: the generic kubernetes client against the lean poster",
    "cel_bench": "CEL at the cost limit, and against cel-go itself (--celgo)",
    "churn": "filter+prioritize latency under churn through extender serve (the bar)",
    "drift": "the drift report's memory and CPU at scale",
    "what_if": "a what-if of 100 node changes at scale: its seconds, CPU and memory",
    "handlers": "the verb handlers alone, in one process (A/B runs, callgrind)",
    "hostile": "hostile-input latency",
    "inflight_mix": "in-flight waits under a mixed workload",
    "live_state": "the live state's sync, memory and event rate",
    "memory": "RSS per cluster size",
    "pyspy": "py-spy helper: record a process",
    "reload_stall": "cluster-file reloads and the verbs meanwhile",
    "replay": "the ceiling's front: the extender's answers replayed at ~0 CPU (scheduler_e2e --modes ...,replay)",
    "scheduler_bursts": "bursts through the real kube-scheduler, with and without in-flight accounting",
    "scheduler_e2e": "the five workloads through the real kube-scheduler, extender vs in-tree",
    "soak": "a long soak: memory and latency over time",
    "staleness": "how fast a frozen watch is noticed",
    "side_flood": "floods of the side listener: probes, scrapes and reviews under each (issue 48)",
    "drift_flood": "four admins asking /drift: /filter's latency without and with them (issue 48)",
    "tiebreak": "slim answers and score ties with the real kube-scheduler",
    "watchcost": "the Pod watch's CPU per pod scheduled and per event, by pod shape",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "list":
        for name, what in BENCHMARKS.items():
            print(f"{name:18} {what}")
        return 0
    if argv and argv[0] in BENCHMARKS:
        return importlib.import_module(f"perf.{argv[0]}").main(argv[1:]) or 0
    parser = argparse.ArgumentParser(prog="python -m perf", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    out_dir = {"out": "output directory (default perf/out)"}
    gen = sub.add_parser("generate", help="write a synthetic cluster file (kind: List, JSON)")
    options.add(gen, nodes=500, pods=10_000, seed=1)
    gen.add_argument("-o", "--output", required=True, help="output path (.json)")
    run = sub.add_parser("run", help="run the benchmark and write perf/out/report.json")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="500 + 1,000 nodes, < 2 minutes (default)")
    mode.add_argument("--full", action="store_true", help="adds 5,000 nodes / 50,000 pods")
    options.add(run, seed=1, out=None, helps=out_dir)
    prof = sub.add_parser("profile", help="cProfile the in-process filter/prioritize paths")
    options.add(prof, nodes=5000, pods=50_000, requests=200, seed=1, out=None, helps=out_dir)
    whatif = sub.add_parser("whatif", help="HTTP experiments outside the product")
    whatif.add_argument("--floor", action="store_true", required=True,
                        help="the no-op server on the product's HTTP stack (the HTTP floor)")
    options.add(whatif, nodes=5000, requests=400, out=None, helps=out_dir)
    ns = parser.parse_args(argv)

    if ns.command == "whatif":
        from perf.profile import whatif_floor
        from perf.run import OUT

        out = Path(ns.out) if ns.out else OUT
        out.mkdir(parents=True, exist_ok=True)
        whatif_floor(ns.nodes, ns.requests, out)
        return 0

    if ns.command == "profile":
        from perf.profile import profile
        from perf.run import OUT

        out = Path(ns.out) if ns.out else OUT
        out.mkdir(parents=True, exist_ok=True)
        profile(ns.nodes, ns.pods, ns.requests, ns.seed, out)
        return 0

    if ns.command == "generate":
        from perf.generate import generate_cluster, write_cluster

        if ns.nodes < 1 or ns.pods < 0:
            parser.error("--nodes must be >= 1 and --pods >= 0")
        cluster, info = generate_cluster(ns.nodes, ns.pods, ns.seed)
        path = write_cluster(cluster, ns.output)
        print(f"wrote {path}: {ns.nodes} nodes, {ns.pods} pods, zones {info.zones}, "
              f"{len(info.racks)} racks; {info.feature_counts}")
        return 0

    from perf.run import OUT
    from perf.run import run as run_bench

    run_bench(full=ns.full, seed=ns.seed, out_dir=Path(ns.out) if ns.out else OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
