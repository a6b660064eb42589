"""`python -m perf profile`: cProfile of the in-process filter and prioritize paths.

Separate profiles per verb (and one for cluster loading, which is most of the cold
start) so that PROFILE.md can say where each verb's time goes. `.prof` files land
in perf/out/ for snakeviz/pstats; the top entries are printed.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import time
from pathlib import Path

import orjson

from extender.api.wire import decode_args
from extender.state import ClusterSnapshot, StaticSource, load_objects
from perf.engine import default_config, new_extender
from perf.generate import generate_cluster, write_cluster
from perf.workloads import mixed_pods


def _top(prof: cProfile.Profile, sort: str, limit: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    return out.getvalue()


def profile(nodes: int, pods: int, requests: int, seed: int, out_dir: Path, limit: int = 30) -> None:
    path = out_dir / f"cluster-{nodes}-{pods}.json"
    if not path.exists():
        cluster, _ = generate_cluster(nodes, pods, seed)
        write_cluster(cluster, path)
        del cluster
    prof_load = cProfile.Profile()
    t0 = time.perf_counter()
    prof_load.enable()
    snapshot = ClusterSnapshot.from_objects(load_objects(path))
    prof_load.disable()
    print(f"== load {path.name}: {time.perf_counter() - t0:.2f} s (profiled)")
    print(_top(prof_load, "tottime", 15))
    prof_load.dump_stats(str(out_dir / "load.prof"))
    gc.collect()
    gc.freeze()  # as the harness does: time the engine, not collections of the heap

    ext = new_extender(default_config(), StaticSource(snapshot))
    names = [n.name for n in snapshot.nodes.nodes]
    batch = mixed_pods(requests, start=300_000)
    feasible: list[list[str]] = []
    # The server's path: request bytes in, response bytes out (NodeNames cache included).
    def body(pod: dict, node_names: list[str]) -> bytes:
        return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})

    for pod in batch[:5]:  # warm caches (CEL programs, derived indexes) outside the profile
        answer = orjson.loads(ext.filter(decode_args(body(pod, names))))
        ext.prioritize(decode_args(body(pod, answer["NodeNames"])))
    filter_bodies = [body(pod, names) for pod in batch]
    prof_f = cProfile.Profile()
    t0 = time.perf_counter()
    for data in filter_bodies:
        prof_f.enable()
        encoded = ext.filter(decode_args(data))
        prof_f.disable()
        feasible.append(orjson.loads(encoded)["NodeNames"] or [])
    print(f"== filter x{requests}: {(time.perf_counter() - t0) / requests * 1000:.2f} ms/request "
          "(wall, includes profiler overhead)")
    print(_top(prof_f, "tottime", limit))
    print(_top(prof_f, "cumulative", limit))
    prof_f.dump_stats(str(out_dir / "filter.prof"))
    prioritize_bodies = [body(pod, names_ok) for pod, names_ok in zip(batch, feasible, strict=True)]
    prof_p = cProfile.Profile()
    t0 = time.perf_counter()
    for data in prioritize_bodies:
        prof_p.enable()
        ext.prioritize(decode_args(data))
        prof_p.disable()
    print(f"== prioritize x{requests}: {(time.perf_counter() - t0) / requests * 1000:.2f} ms/request "
          "(wall, includes profiler overhead)")
    print(_top(prof_p, "tottime", limit))
    print(_top(prof_p, "cumulative", limit))
    prof_p.dump_stats(str(out_dir / "prioritize.prof"))


def whatif_floor(nodes: int, requests: int, out_dir: Path) -> dict:
    """The no-op server (`perf._noop_app`, the product's own HTTP stack) answering
    NodeNames requests for `nodes` names: what the stack costs before any engine work."""
    from perf.http_driver import Server, names_requests, run_http

    names = [f"node-{i:05d}" for i in range(nodes)]
    reqs = names_requests(mixed_pods(requests, start=450_000), names)
    results: dict = {}
    for label, target in (("floor", "perf._noop_app:app"),):
        server = Server(out_dir / "unused.json", out_dir / f"floor-{label}.log", noop=True,
                        noop_target=target)
        try:
            server.start()
            run = run_http(server.port, reqs, "names", 1)
            results[label] = {k: run[k] for k in ("filter", "prioritize", "pair")}
        finally:
            server.stop()
        print(label, {k: (v.get("p50_ms"), v.get("p99_ms")) for k, v in results[label].items()})
    return results
