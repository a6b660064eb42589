"""How long the verbs listener's /healthz waits while a large cluster file is reloaded
(file mode, issue #28 item 9).

    python -m perf.reload_stall [--format json|yaml] [--nodes 2000] [--pods 12000] [--rounds 3]

The cluster file (a `kind: List` of generated nodes, pods and workloads, ~10 MB at the
defaults) is rendered for every round before the server starts, so the client process
does nothing but probe: `GET /healthz` on the main port, on a kept-alive connection,
every 10 ms, while the file is replaced every few seconds (`--reload-interval 0.5`).
The report compares the probe latency before the first replacement with the latency
during the reloads.
"""

from __future__ import annotations

import http.client
import os
import tempfile
import threading
import time
from pathlib import Path

import orjson
import yaml

from perf import options
from perf.generate import generate_cluster
from perf.http_driver import REPO, Server
from perf.output import write_result
from perf.stats import summarize


def render(cluster: dict, fmt: str, round_: int) -> bytes:
    cluster["items"][0]["metadata"]["labels"]["round"] = str(round_)
    if fmt == "json":
        return orjson.dumps(cluster)
    return yaml.dump(cluster, width=1000, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)).encode()


def run(fmt: str, nodes: int, pods: int, rounds: int) -> dict:
    cluster, _ = generate_cluster(nodes, pods, seed=3)
    datas = [render(cluster, fmt, i) for i in range(rounds + 1)]
    work = Path(tempfile.mkdtemp(prefix="reload-stall-"))
    path = work / f"cluster.{fmt}"
    path.write_bytes(datas[0])

    class Reloading(Server):
        def command(self) -> list[str]:
            return [*super().command(), "--reload-interval", "0.5"]

    server = Reloading(path, work / "server.log")
    server.start()
    took: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        while not stop.is_set():
            started = time.perf_counter()
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            took.append(time.perf_counter() - started)
            time.sleep(0.01)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        time.sleep(3)
        idle = list(took)
        took.clear()
        pause = max(5.0, len(datas[0]) / 1e6)  # the reload completes before the next one
        for data in datas[1:]:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            time.sleep(pause)
    finally:
        stop.set()
        thread.join()
        server.stop()
    return {"format": fmt, "file_mb": round(len(datas[0]) / 1e6, 1), "nodes": nodes, "pods": pods,
            "reloads": rounds, "idle_ms": summarize(idle), "reloading_ms": summarize(took)}


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("reload_stall", __doc__, whole_doc=True)
    parser.add_argument("--format", choices=("json", "yaml"), action="append", default=[])
    options.add(parser, nodes=2000, pods=12000)
    parser.add_argument("--rounds", type=int, default=3)
    options.add(parser, out=REPO / "perf" / "results" / "reload_stall.json")
    ns = parser.parse_args(argv)
    results = [run(fmt, ns.nodes, ns.pods, ns.rounds) for fmt in ns.format or ["json", "yaml"]]
    write_result(ns.out, results)
    for r in results:
        print(f"{r['format']} {r['file_mb']} MB: /healthz idle p99 {r['idle_ms']['p99_ms']} ms max "
              f"{r['idle_ms']['max_ms']} ms; during {r['reloads']} reloads p99 {r['reloading_ms']['p99_ms']} ms "
              f"max {r['reloading_ms']['max_ms']} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
