"""CPU per binding: the generic kubernetes client's binder against the lean poster.

    .venv/bin/python -m perf bindcost [--requests 2000] [--rounds 3] [--tls]

The API-server double runs in a child process (its CPU is not counted) with a pod for
every binding; this process posts `--requests` bindings one after another with each
binder in turn, `--rounds` times (the order alternating, each round after a warm-up of
50), and reports the calling thread's CPU (`time.thread_time`) and the wall clock per
binding. `--tls`: the double behind TLS with a CA of its own (`testing.controlplane.Pki`),
as a real API server is reached. Result: perf/results/bindcost.json (or `--out`).
"""

from __future__ import annotations

import multiprocessing
import ssl
import statistics
import tempfile
import time
from pathlib import Path

from perf import options
from perf.output import write_result

ROOT = Path(__file__).resolve().parent.parent
WARM = 50


def _serve(conn, pods: list[str], tls_dir: str) -> None:
    """The child: the double with `pods`, its URL (and CA file) sent back, until told to stop."""
    from testing.apiserver import FakeApiServer
    from testing.harness import pod

    api = FakeApiServer(bookmark_interval=60.0)
    for name in pods:
        api.create("pods", pod(name))
    url, ca = api.url, ""
    if tls_dir:
        from testing.controlplane import Pki

        pki = Pki(Path(tls_dir))
        cert, key = pki.issue("server", "apiserver", hosts=["127.0.0.1"])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        api._httpd.socket = context.wrap_socket(api._httpd.socket, server_side=True)
        url, ca = url.replace("http://", "https://"), str(pki.ca_file)
    api.start()
    conn.send((url, ca))
    conn.recv()
    api.stop()


def _binders(url: str, ca: str):
    from kubernetes import client

    from extender.engine.binding import ApiBinder, LeanBinder
    from extender.state.kubeapi import keepalive_socket_options

    config = client.Configuration()
    config.host = url
    config.ssl_ca_cert = ca or None
    config.socket_options = keepalive_socket_options()  # as the live source sets them
    api_client = client.ApiClient(config)
    return {"generic": ApiBinder(api_client), "lean": LeanBinder(api_client)}


def _run(binder, names: list[str]) -> tuple[float, float]:
    """(thread CPU, wall) seconds per binding over `names`."""
    cpu, wall = time.thread_time(), time.perf_counter()
    for i, name in enumerate(names):
        binder("default", name, "uid", f"n{i % 100}")
    n = len(names)
    return (time.thread_time() - cpu) / n, (time.perf_counter() - wall) / n


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("bindcost", __doc__, requests=2000, out=ROOT / "perf" / "results" / "bindcost.json")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each binder (alternating order)")
    parser.add_argument("--tls", action="store_true", help="the double behind TLS")
    args = parser.parse_args(argv)
    kinds = ("generic", "lean")
    batches = {(r, k): [f"b{r}-{k}-{i}" for i in range(WARM + args.requests)] for r in range(args.rounds) for k in kinds}
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    with tempfile.TemporaryDirectory() as tls_dir:
        child = ctx.Process(target=_serve, args=(there, [n for b in batches.values() for n in b],
                                                 tls_dir if args.tls else ""))
        child.start()
        url, ca = here.recv()
        binders = _binders(url, ca)
        per: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        try:
            for r in range(args.rounds):
                for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                    names = batches[r, kind]
                    _run(binders[kind], names[:WARM])
                    per[kind].append(_run(binders[kind], names[WARM:]))
                    print(f"round {r} {kind}: {per[kind][-1][0] * 1e3:.3f} ms CPU, "
                          f"{per[kind][-1][1] * 1e3:.3f} ms wall a binding", flush=True)
        finally:
            for binder in binders.values():
                binder.close()
            here.send("stop")
            child.join(30)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    result = {
        "requests": args.requests, "rounds": args.rounds, "tls": args.tls, "loadavg_after": load,
        **{kind: {"cpu_ms": [round(c * 1e3, 4) for c, _ in runs], "wall_ms": [round(w * 1e3, 4) for _, w in runs],
                  "cpu_ms_median": round(statistics.median(c for c, _ in runs) * 1e3, 4)}
           for kind, runs in per.items()},
    }
    write_result(args.out, result)
    print(f"median CPU a binding: generic {result['generic']['cpu_ms_median']} ms, "
          f"lean {result['lean']['cpu_ms_median']} ms; load {' '.join(load)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
