"""Issue #48's `/drift` flood: does asking for the drift report slow `/filter`?

    python -m perf drift_flood [--nodes 5000] [--pods 50000] [--window 8] [--pairs 2]
                               [--filter-rate 100] [--out perf/results/drift-flood.json]

A serving extender in this process, as `extender serve` runs one worker: the verbs'
listener (`extender.server.app.serve`) and the side listener (health routes, `/explain`,
`/drift`) on the cluster file, the drift report on, the GIL switched every 1 ms. The
cluster is `perf.generate`'s with every pod running and every node tainted
`perf.example.com/retired=true:NoSchedule`, which no running pod tolerates: every pod
is drifted. The API server's reviews are a double that knows four admins (four tokens,
four users, each allowed everything), so each has a rate-limit bucket of its own.

A kube-scheduler (a process of its own) asks `/filter` at a steady `--filter-rate` on one
keep-alive connection: a `perf.workloads` pod that tolerates the retirement taint, with
every node's name (NodeNames, as a kube-scheduler with `nodeCacheCapable` sends them).
Windows of `--window` seconds alternate without and with four admin clients (a process of
their own, one keep-alive connection each) asking `GET /drift` again as soon as answered,
each time another `limit` (1,000 to 1,999 pods; `kubectl extender drift` asks 1,000), so
that hardly any answer comes from the report cache (it keeps 16 queries per settle; on a
live cluster the tracker settles between requests): every answered request is a report
built. Past their rate limit they get 429 (counted). Three modes: at the default
`--explain-rate`/`--explain-burst` with admins asking again at once after a 429; the same
with admins waiting as its `Retry-After` says (as a well-behaved client does); at a limit
no client reaches (what the rate limit buys). A second after each window is left out (an answer in progress then is the next
window's noise otherwise). `/filter`'s p50/p99 are given per window and for all windows of a
kind together; `p99_change_pct` is the change from without to with.

The machine is shared: the 1-minute load average is recorded before and after.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import selectors
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from perf import options

RETIRED = "perf.example.com/retired"
ADMINS = tuple(f"t-admin-{i}" for i in range(4))  # bearer tokens: user admin-i each
UNLIMITED = 1e9  # --explain-rate and --explain-burst that no client reaches
SWITCH_INTERVAL = 0.001  # as every serving worker (extender.server.launcher)
GAP = 1.0  # seconds after a window left out of every window


# --- the cluster --------------------------------------------------------------------


def drifted_cluster(nodes: int, pods: int, seed: int = 1) -> dict:
    """`perf.generate`'s cluster, every pod running on its node, every node tainted
    `RETIRED` (tolerated by no running pod): `pods` drifted pods."""
    from perf.generate import generate_cluster

    cluster, _ = generate_cluster(nodes, pods, seed)
    for obj in cluster["items"]:
        if obj["kind"] == "Node":
            spec = obj.setdefault("spec", {})
            spec["taints"] = [*spec.get("taints", ()), {"key": RETIRED, "value": "true", "effect": "NoSchedule"}]
        elif obj["kind"] == "Pod":
            obj["metadata"].pop("deletionTimestamp", None)
            obj["status"]["phase"] = "Running"
    return cluster


def filter_bodies(names: list[str], count: int = 64) -> list[bytes]:
    """`/filter` requests as kube-scheduler writes them (NodeNames): `perf.workloads`'
    mix, each pod tolerating `RETIRED`."""
    from perf.inprocess import wire_body
    from perf.workloads import mixed_pods

    bodies = []
    for pod in mixed_pods(count):
        spec = pod.setdefault("spec", {})
        spec["tolerations"] = [*spec.get("tolerations", ()), {"key": RETIRED, "operator": "Exists",
                                                              "effect": "NoSchedule"}]
        bodies.append(wire_body(pod, names))
    return bodies


# --- the server -----------------------------------------------------------------------


class Admins:
    """The API server's reviews, as `Delegated`'s reviewer: each of `ADMINS` is a user
    allowed everything; any other token is refused."""

    def __call__(self, kind: str, spec: dict) -> dict:
        if kind == "tokenreviews":
            if spec["token"] in ADMINS:
                return {"authenticated": True, "user": {"username": spec["token"].removeprefix("t-")}}
            return {"authenticated": False, "error": "invalid bearer token"}
        return {"allowed": True}


class Server:
    """The verbs' listener and the drift report on `path`, as `extender serve` starts one
    worker; `side(rate, burst)` starts the side listener (`/drift` under that rate limit)."""

    def __init__(self, path: Path) -> None:
        from extender.config import Config
        from extender.server.app import create_app, serve
        from extender.server.opening import open_source, start_in_worker

        sys.setswitchinterval(SWITCH_INTERVAL)
        self.config = Config(cluster=str(path), drift_endpoint=True, explain_endpoint=True)
        source = open_source(self.config, serving=True)
        self.app = create_app(self.config, source)
        start_in_worker(source)
        self.engine = self.app.engine
        self.verbs = serve(self.app, self.config, address="127.0.0.1:0").start()
        self.listener = None

    def settled(self, pods: int, timeout: float = 600.0) -> int:
        """Wait until the drift report holds `pods` drifted pods (or `timeout`); their count."""
        tracker = self.engine.drift
        end = time.monotonic() + timeout
        while len(tracker.drifted) < pods and time.monotonic() < end:
            time.sleep(0.2)
        return len(tracker.drifted)

    def side(self, rate: float, burst: float) -> int:
        """(Re)start the side listener with `/drift` at `rate`/`burst`; its port."""
        from extender.server.app import METRICS_INTERVAL, health_routes
        from extender.server.auth import Delegated
        from extender.server.explain_routes import ExplainRoutes
        from extender.server.listener import Listener

        if self.listener is not None:
            self.listener.stop()
        routes = ExplainRoutes(self.engine, True, rate, int(burst), drift=self.engine.drift, drift_enabled=True,
                               guard=Delegated(None, Admins()))
        self.listener = Listener("127.0.0.1:0", health_routes(self.engine, METRICS_INTERVAL),
                                 dispatch=routes).start()
        return self.listener.port

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.verbs.stop()
        self.engine.source.stop()
        self.engine.drift.stop()


# --- the clients (processes of their own: they must not take the server's GIL) --------


class _Answer:
    """One HTTP answer arriving in chunks, read in linear time: the chunks are appended to
    one buffer and the head is parsed once, so a 1-2 MB `/drift` report costs the client
    one copy, not a copy of everything so far per chunk (the clients share the server's
    two cores: their own waste would be counted against the server)."""

    __slots__ = ("data", "status", "head", "total")

    def __init__(self) -> None:
        self.data = bytearray()
        self.status, self.head, self.total = 0, b"", -1  # total: head + body, once the head is in

    def feed(self, chunk: bytes) -> bool:
        """Take `chunk` (b"": the server closed, status 0); True once the answer is whole."""
        if not chunk:
            self.status, self.total = 0, len(self.data)
            return True
        seen = len(self.data)
        self.data += chunk
        if self.total < 0:
            end = self.data.find(b"\r\n\r\n", max(0, seen - 3))
            if end < 0:
                return False
            self.head = bytes(self.data[:end])
            lines = self.head.split(b"\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in lines[1:]
                           if line.lower().startswith(b"content-length:")), 0)
            self.status, self.total = int(lines[0].split()[1]), end + 4 + length
        return len(self.data) >= self.total

    @property
    def closes(self) -> bool:
        """Whether the connection ends with this answer (closed, or `Connection: close`)."""
        return self.status == 0 or b"\r\nConnection: close" in self.head


def _filter_main(port: int, bodies: list[bytes], interval: float, stop, out) -> None:
    """Ask `/filter` every `interval` seconds on one keep-alive connection until `stop`;
    put [(sent at, seconds, status)] on `out`."""
    sock, samples, at, i = None, [], time.monotonic(), 0
    while not stop.is_set():
        at += interval
        pause = at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        body = bodies[i % len(bodies)]
        i += 1
        started = time.monotonic()
        if sock is None:  # a new connection is part of the request's time, as for Go's client
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        answer = _Answer()
        while not answer.feed(sock.recv(1 << 20)):
            pass
        if answer.closes:
            sock.close()
            sock = None
        samples.append((started, time.monotonic() - started, answer.status))
    if sock is not None:
        sock.close()
    out.put(samples)


class _Admins:
    """One window of the admins on `port`: each of `ADMINS` asks `/drift` on a keep-alive
    connection of its own, again as soon as answered, another `limit` each time (`asked`
    counts every request of the process: 1,000 to 1,999). `counts`: status -> answers; `took`: the
    seconds of each 200."""

    asked = 0

    def __init__(self, port: int, polite: bool = False) -> None:
        self.port, self.polite = port, polite
        self.due: dict[str, tuple[float, socket.socket | None]] = {}  # polite: token -> when it asks again
        self.selector = selectors.DefaultSelector()
        self.pending: dict[socket.socket, tuple[str, float, _Answer]] = {}
        self.counts: Counter[int] = Counter()
        self.took: list[float] = []
        for token in ADMINS:
            self.ask(None, token)

    def ask(self, sock: socket.socket | None, token: str) -> None:
        _Admins.asked += 1
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            self.selector.register(sock, selectors.EVENT_READ)
        sock.sendall(f"GET /drift?limit={1000 + _Admins.asked % 1000} HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {token}\r\n\r\n".encode())
        self.pending[sock] = (token, time.monotonic(), _Answer())

    def turn(self) -> None:
        now = time.monotonic()
        for token, (at, sock) in list(self.due.items()):
            if at <= now:
                del self.due[token]
                self.ask(sock, token)
        for key, _ in self.selector.select(0.01 if self.due else 0.05):
            sock = key.fileobj
            token, started, answer = self.pending[sock]
            if not answer.feed(sock.recv(1 << 20)):
                continue
            self.counts[answer.status] += 1
            if answer.status == 200:
                self.took.append(time.monotonic() - started)
            if answer.closes:
                self.close(sock)
                sock = None
            if self.polite and answer.status == 429:  # as `Retry-After` says
                if sock is not None:
                    del self.pending[sock]
                wait = next((int(line.split(b":", 1)[1]) for line in answer.head.split(b"\r\n")
                             if line.lower().startswith(b"retry-after:")), 1)
                self.due[token] = (time.monotonic() + wait, sock)
                continue
            self.ask(sock, token)

    def close(self, sock: socket.socket) -> None:
        del self.pending[sock]
        self.selector.unregister(sock)
        sock.close()

    def stop(self) -> tuple[dict[int, int], list[float]]:
        """Close every connection (the answers in progress are abandoned)."""
        for sock in list(self.pending):
            self.close(sock)
        self.selector.close()
        return dict(self.counts), self.took


def _drift_main(commands, out) -> None:
    """The admins: from ("go", port) to ("halt",), a window of `_Admins`; then put
    (status -> count, [seconds of each 200]) on `out`; until ("stop",)."""
    while (command := commands.get())[0] == "go":
        admins = _Admins(*command[1:])
        while commands.empty():
            admins.turn()
        commands.get()  # ("halt",)
        out.put(admins.stop())


class Clients:
    """The kube-scheduler and the admins, each a process of its own."""

    def __init__(self, verbs_port: int, bodies: list[bytes], filter_rate: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.stopping, self.samples = context.Event(), context.Queue()
        self.commands, self.answers = context.Queue(), context.Queue()
        self.kube_scheduler = context.Process(target=_filter_main, daemon=True, args=(
            verbs_port, bodies, 1.0 / filter_rate, self.stopping, self.samples))
        self.admins = context.Process(target=_drift_main, daemon=True, args=(self.commands, self.answers))
        self.kube_scheduler.start()
        self.admins.start()

    def drift_on(self, port: int, polite: bool = False) -> None:
        self.commands.put(("go", port, polite))

    def drift_off(self) -> tuple[dict[int, int], list[float]]:
        self.commands.put(("halt",))
        return self.answers.get(timeout=60)

    def stop(self) -> list[tuple[float, float, int]]:
        self.stopping.set()
        self.commands.put(("stop",))
        samples = self.samples.get(timeout=60)
        self.kube_scheduler.join(timeout=30)
        self.admins.join(timeout=30)
        return samples


# --- the measurement -----------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def _latency(samples: list[tuple[float, float, int]]) -> dict:
    ms = [s[1] * 1000 for s in samples]
    return {"requests": len(ms), "ok": sum(s[2] == 200 for s in samples),
            "p50_ms": round(_pct(ms, 0.5), 2), "p99_ms": round(_pct(ms, 0.99), 2),
            "max_ms": round(max(ms, default=0.0), 2)}


def measure(nodes: int, pods: int, window: float, pairs: int, filter_rate: float, gap: float = GAP,
            modes: tuple[tuple[str, float, float, bool], ...] | None = None) -> dict:
    """Every window's `/filter` latency and `/drift` answers (see the module docstring)."""
    import orjson

    from extender.config import Config

    load_before = os.getloadavg()[0]
    default = Config()
    modes = modes or (("rate-limited", default.explain_rate, default.explain_burst, False),
                      ("rate-limited, Retry-After honoured", default.explain_rate, default.explain_burst, True),
                      ("unlimited", UNLIMITED, UNLIMITED, False))
    cluster = drifted_cluster(nodes, pods)
    names = [o["metadata"]["name"] for o in cluster["items"] if o["kind"] == "Node"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.json"
        path.write_bytes(orjson.dumps(cluster))
        del cluster
        server = Server(path)
        try:
            return _windows(server, names, pods, window, pairs, filter_rate, gap, modes, load_before)
        finally:
            server.stop()


def _windows(server: Server, names: list[str], pods: int, window: float, pairs: int, filter_rate: float,
             gap: float, modes: tuple[tuple[str, float, float, bool], ...], load_before: float) -> dict:
    clients = None
    try:
        drifted = server.settled(pods)
        clients = Clients(server.verbs.port, filter_bodies(names), filter_rate)
        time.sleep(min(window, 3.0))  # the kube-scheduler's first answers (each shape once)
        windows = []
        for mode, rate, burst, polite in modes:
            port = server.side(rate, burst)
            for pair in range(pairs):
                for admins in (0, len(ADMINS)):
                    if admins:
                        clients.drift_on(port, polite)
                    start = time.monotonic()
                    time.sleep(window)
                    end = time.monotonic()
                    drift: tuple[dict[int, int], list[float]] = ({}, [])
                    if admins:
                        drift = clients.drift_off()
                    windows.append({"mode": mode, "pair": pair, "admins": admins, "start": start, "end": end,
                                    "drift_answers": drift[0], "drift_seconds": drift[1]})
                    time.sleep(gap)
        samples = clients.stop()
        clients = None
        results = []
        for mode, rate, burst, _ in modes:
            rows = [w for w in windows if w["mode"] == mode]
            for w in rows:
                w["samples"] = [s for s in samples if w["start"] <= s[0] < w["end"]]
            without = [s for w in rows if not w["admins"] for s in w["samples"]]
            with_ = [s for w in rows if w["admins"] for s in w["samples"]]
            answers: Counter[int] = Counter()
            took: list[float] = []
            for w in rows:
                answers.update(w["drift_answers"])
                took += w["drift_seconds"]
            before, during = _latency(without), _latency(with_)
            results.append({
                "mode": mode, "explain_rate": rate, "explain_burst": burst,
                "filter_without_admins": before, "filter_with_admins": during,
                "p50_change_pct": round(100 * (during["p50_ms"] / before["p50_ms"] - 1), 1) if before["p50_ms"] else None,
                "p99_change_pct": round(100 * (during["p99_ms"] / before["p99_ms"] - 1), 1) if before["p99_ms"] else None,
                "drift_answers": {str(k): v for k, v in sorted(answers.items())},
                "drift_200_p50_ms": round(_pct(took, 0.5) * 1000, 1),
                "windows": [{"admins": w["admins"], **_latency(w["samples"]),
                             "drift_answers": {str(k): v for k, v in sorted(w["drift_answers"].items())}}
                            for w in rows],
            })
        return {"date": time.strftime("%Y-%m-%d"), "nodes": len(names), "pods": pods, "drifted_pods": drifted,
                "filter_rate": filter_rate, "window_s": window, "pairs": pairs, "admins": len(ADMINS),
                "results": results, "cpus": os.cpu_count(),
                "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}}
    finally:
        if clients is not None:
            clients.stop()


def main(argv: list[str] | None = None) -> None:
    parser = options.parser("drift_flood", __doc__, whole_doc=True, nodes=5000, pods=50_000,
                            out=Path(__file__).resolve().parent / "results" / "drift-flood.json")
    parser.add_argument("--window", type=float, default=8.0, help="seconds per window (default 8)")
    parser.add_argument("--pairs", type=int, default=2, help="windows without and with the admins, per mode (default 2)")
    parser.add_argument("--filter-rate", type=float, default=100.0, help="/filter requests per second (default 100)")
    args = parser.parse_args(argv)
    result = measure(args.nodes, args.pods, args.window, args.pairs, args.filter_rate)
    for row in result["results"]:
        print(json.dumps({k: v for k, v in row.items() if k != "windows"}))
    print(json.dumps({"drifted_pods": result["drifted_pods"], "load_average_1m": result["load_average_1m"]}))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
