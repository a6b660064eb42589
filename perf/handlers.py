"""The verb handlers alone under churn, in one process: what `perf.churn` measures
without HTTP, the API-server double and the machine's other processes in the way.

    .venv/bin/python -m perf.handlers [--nodes 5000] [--pods 50000] [--requests 400]
                                      [--distinct | --workload NAME] [--rotate] [--repeat 1] [--out FILE]

The cluster of `perf.generate` is loaded into a `Store` (what the live source feeds);
each pod of the mixed workload (or, with `--distinct`, of `perf.workloads.no_two_alike`)
is put in pending, answered by `extender.server.verbs.answer` exactly as the server
answers a request body (decode, engine, encode) for `filter` with every node's name and
then `prioritize` with the feasible ones, and bound to its best-scored node in the store
(a new pod layer, as the watch applies a bind) before the next pod; one node is
relabelled every 100 pods, as in `perf.churn`. Each change is published before the next
request, as the live source's watch thread does. `--workload` takes the pods of one of
`perf.scheduler_e2e`'s scheduler_perf-like workloads instead (with `--rotate`, what the
handlers cost there on a core of their own, next to what kube-scheduler measures).

Reported: per verb and for the pair, p50/p99 of the wall clock and of the thread's CPU
time (`time.thread_time`: on a loaded machine the wall clock includes the time another
process held the core; the CPU time is the work itself), and the answer bytes. Runs are
deterministic (the same pods, the same binds), so two versions of the code can be
compared run against run (`PYTHONPATH` to the other checkout), or counted exactly:
instructions do not depend on the machine's load. Each handler is called through
`functools.reduce`, so callgrind can count the handlers alone:

    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=functools_reduce \
        --callgrind-out-file=/tmp/cg.out .venv/bin/python -m perf.handlers --distinct --requests 100
    callgrind_annotate /tmp/cg.out | head   # "PROGRAM TOTALS": the timed handlers' instructions
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from extender.state import ClusterSource
from perf import options
from perf.churn import NODE_UPDATE_EVERY, WARMUP
from perf.generate import generate_cluster
from perf.stats import summarize
from perf.workloads import SCHEDULER_PERF, mixed_pods, no_two_alike, workload_of
from testing.scores import best_hosts


class StoreSource(ClusterSource):
    """A `Store` as the engine's cluster source (always ready, no API access)."""

    def __init__(self, store) -> None:
        self.store = store

    def snapshot(self):
        return self.store.snapshot()

    def ready(self) -> bool:
        return True


class Churn:
    """A loaded store, an engine over it, and the pods to schedule."""

    def __init__(self, nodes: int, pods: int, log=print, cache: Path | None = None) -> None:
        from extender.engine import Extender
        from extender.server.verbs import answer as _answer
        from extender.state.store import Store
        from perf.engine import default_config

        t0 = time.monotonic()
        path = cache / f"cluster-{nodes}-{pods}.json" if cache is not None else None
        if path is not None and path.exists():
            cluster = orjson.loads(path.read_bytes())
        else:
            cluster, _ = generate_cluster(nodes, pods)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(orjson.dumps(cluster))
        self.store = Store()
        self.store.load(cluster["items"])
        self.names = [o["metadata"]["name"] for o in cluster["items"] if o.get("kind") == "Node"]
        self.nodes = {o["metadata"]["name"]: o for o in cluster["items"] if o.get("kind") == "Node"}
        del cluster
        self.engine = Extender(default_config(), StoreSource(self.store), binder=None)
        self.answer = lambda engine, verb, body: functools.reduce(  # callgrind: --toggle-collect=functools_reduce
            lambda _, call: call(), [lambda: _answer(engine, verb, body)], None)
        self.warm_answer = _answer  # the untimed warm-up pods: not counted either
        self.store.snapshot()
        gc.collect()
        gc.freeze()  # as the live source does after its initial sync (extender.state.gcfreeze)
        self.load_s = time.monotonic() - t0
        log(f"handlers {nodes}/{pods}: loaded in {self.load_s:.1f} s")

    def run(self, pods: list[dict[str, Any]], warmup: int = WARMUP, rotate: bool = False) -> dict[str, Any]:
        """`rotate`: each filter's NodeNames start at another node, as kube-scheduler's
        do (it resumes its node scan where the last cycle stopped and collects the
        feasible nodes from parallel workers): a list never seen before, every time."""
        names_json = orjson.dumps(self.names)
        samples: dict[str, list[float]] = {"filter": [], "prioritize": [], "pair": []}
        cpu: dict[str, list[float]] = {"filter": [], "prioritize": [], "pair": []}
        sizes: dict[str, list[int]] = {"filter": [], "prioritize": []}
        by_workload: dict[str, list[float]] = {}
        bound = infeasible = 0
        for i, pod in enumerate(pods):
            answer = self.answer if i >= warmup else self.warm_answer
            self.store.upsert("Pod", pod)
            if i and i % NODE_UPDATE_EVERY == 0:
                self._relabel(i)
            self.store.publish()  # as the live source does after each watch chunk, off the request
            pod_json = orjson.dumps(pod)
            if rotate:
                at = (i * 7919) % len(self.names)
                names_json = orjson.dumps(self.names[at:] + self.names[:at])
            c0, t0 = time.thread_time(), time.perf_counter()
            status, data = answer(self.engine, "filter",
                                       b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + names_json + b"}")
            t_f, c_f = time.perf_counter() - t0, time.thread_time() - c0
            if status != 200:
                raise RuntimeError(f"filter: HTTP {status}: {data[:200]!r}")
            feasible = orjson.loads(data).get("NodeNames") or []
            t_p = c_p = 0.0
            prioritized = None
            if len(feasible) >= 2:
                body = b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + orjson.dumps(feasible) + b"}"
                c0, t0 = time.thread_time(), time.perf_counter()
                status, pdata = answer(self.engine, "prioritize", body)
                t_p, c_p = time.perf_counter() - t0, time.thread_time() - c0
                if status != 200:
                    raise RuntimeError(f"prioritize: HTTP {status}: {pdata[:200]!r}")
                prioritized = orjson.loads(pdata)
                if i >= warmup:
                    samples["prioritize"].append(t_p)
                    cpu["prioritize"].append(c_p)
                    sizes["prioritize"].append(len(pdata))
            if i >= warmup:
                samples["filter"].append(t_f)
                cpu["filter"].append(c_f)
                sizes["filter"].append(len(data))
                samples["pair"].append(t_f + t_p)
                cpu["pair"].append(c_f + c_p)
                by_workload.setdefault(workload_of(pod), []).append(c_f + c_p)
            best = best_hosts(feasible, prioritized or [])[0] if feasible else None
            if best is None:
                md = pod["metadata"]
                self.store.delete("Pod", md["namespace"], md["name"])
                infeasible += 1
            else:
                self.store.upsert("Pod", {**pod, "spec": {**pod["spec"], "nodeName": best},
                                          "status": {"phase": "Running"}})
                bound += 1
            self.store.publish()
        return {
            "pods": len(pods), "warmup": warmup, "bound": bound, "infeasible": infeasible,
            "wall": {k: summarize(v) for k, v in samples.items()},
            "cpu": {k: summarize(v) for k, v in cpu.items()},
            "answer_bytes_mean": {k: round(sum(v) / len(v)) if v else 0 for k, v in sizes.items()},
            "cpu_pair_p50_ms_by_workload": {k: summarize(v)["p50_ms"] for k, v in sorted(by_workload.items())},
        }

    def _relabel(self, i: int) -> None:
        name = self.names[(i * 7919) % len(self.names)]
        node = self.nodes[name]
        labels = {**node["metadata"].get("labels", {}), "perf.example.com/churn": str(i)}
        node = self.nodes[name] = {**node, "metadata": {**node["metadata"], "labels": labels}}
        self.store.upsert("Node", node)


def batch(requests: int, distinct: bool, start: int = 1_000_000, workload: str = "") -> list[dict[str, Any]]:
    if workload:
        chosen = next(w for w, _ in SCHEDULER_PERF if w.name == workload)
        return [chosen.pod(start + i) for i in range(WARMUP + requests)]
    pods = mixed_pods(WARMUP + requests, start=start)
    return no_two_alike(pods) if distinct else pods


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("handlers", __doc__, nodes=5000, pods=50000, requests=400)
    parser.add_argument("--distinct", action="store_true", help="no two pods alike (perf.workloads.no_two_alike)")
    parser.add_argument("--workload", default="", choices=["", *(w.name for w, _ in SCHEDULER_PERF)],
                        help="the pods of one scheduler_perf-like workload (perf.scheduler_e2e) instead")
    parser.add_argument("--repeat", type=int, default=1, help="runs, each with new pods, against one store")
    parser.add_argument("--rotate", action="store_true",
                        help="every filter's NodeNames in a new order, as kube-scheduler sends them")
    options.add(parser, out=None)
    parser.add_argument("--cache", type=Path, default=None,
                        help="directory keeping the generated cluster as JSON (under valgrind, generating it is slow)")
    ns = parser.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    churn = Churn(ns.nodes, ns.pods, log, ns.cache)
    runs = []
    for k in range(ns.repeat):
        res = churn.run(batch(ns.requests, ns.distinct, start=(k + 1) * 1_000_000, workload=ns.workload),
                        rotate=ns.rotate)
        res["loadavg"] = round(os.getloadavg()[0], 2)
        runs.append(res)
        log(f"  run {k + 1}: pair p50 {res['wall']['pair']['p50_ms']} / p99 {res['wall']['pair']['p99_ms']} ms "
            f"(cpu {res['cpu']['pair']['p50_ms']} / {res['cpu']['pair']['p99_ms']}); filter p50 "
            f"{res['wall']['filter']['p50_ms']}, prioritize p50 {res['wall']['prioritize']['p50_ms']} ms; "
            f"answers {res['answer_bytes_mean']} B; load {res['loadavg']}")
        log(f"  cpu pair p50 by workload: {res['cpu_pair_p50_ms_by_workload']}")
    out = {"nodes": ns.nodes, "pods": ns.pods, "requests": ns.requests, "distinct": ns.distinct,
           "workload": ns.workload or None, "rotate": ns.rotate,
           "load_s": round(churn.load_s, 1), "runs": runs}
    text = json.dumps(out, indent=2)
    if ns.out is not None:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(text + "\n")
    print(json.dumps([r["wall"]["pair"] for r in runs]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
