"""Issue #48's attacks on the side listener (`--metrics-listen`, the liveness probe of
both containers), in process: 8 source addresses x 128 connections, each asking one
request at a time, again once answered (a new connection 0.1 s after the server closes
one); meanwhile a kubelet probe (`GET /healthz`, a new connection each time) and a
Prometheus scrape (`GET /metrics` from an address of its own).

    python -m perf side_flood [--seconds 10] [--out perf/results/side-flood.json]

Attacks: `metrics` (`GET /metrics`), `unknown-tokens` (`/explain` with random bearer
tokens, the API server's TokenReview hung), `slow-access` (`/explain` of random pods as
a user the API server knows, each SubjectAccessReview 0.2-1 s). `Flood`, `probe` and
`side_listener` are what `tests/hardening/test_side_flood.py` runs, without the clock.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import selectors
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from perf import options

SOURCES = tuple(f"127.0.0.{i}" for i in range(2, 10))  # the attackers' addresses
SCRAPER = "127.0.0.10"  # Prometheus's
PAUSE = 0.1  # seconds before an attacker's connection asks again
SWITCH_INTERVAL = 0.001


class Flood:
    """`per_address` connections from each of `sources` to 127.0.0.1:`port`, each
    sending `request()`, again on the same connection once answered while the server
    keeps it, else closing it (a reset: no TIME_WAIT) and asking again on a new
    connection `pause` seconds later; on one thread.
    `answers`: the status of each answer (0: closed unanswered)."""

    def __init__(self, port: int, request: Callable[[], bytes], sources: tuple[str, ...] = SOURCES,
                 per_address: int = 128, pause: float = PAUSE) -> None:
        self.port, self.request, self.pause = port, request, pause
        self.slots = [source for source in sources for _ in range(per_address)]
        self.answers: Counter[int] = Counter()
        self.selector = selectors.DefaultSelector()
        self.due: list[tuple[float, int]] = [(time.monotonic() + i * 0.001, i) for i in range(len(self.slots))]
        self.socks: dict[int, socket.socket] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def start(self) -> Flood:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop, and close every connection (each a reset): the attackers have left."""
        self.stopping.set()
        self.thread.join(timeout=30)

    def answered(self) -> int:
        return sum(self.answers.values())

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                later = []
                for at, slot in self.due:
                    if at <= now:
                        self._open(slot)
                    else:
                        later.append((at, slot))
                self.due = later
                for key, _ in self.selector.select(0.01):
                    self._event(key.data)
        finally:
            for slot in list(self.socks):
                self._close(slot)
            self.selector.close()

    def _open(self, slot: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        try:
            sock.bind((self.slots[slot], 0))
            sock.connect_ex(("127.0.0.1", self.port))
        except OSError:
            sock.close()
            self.due.append((time.monotonic() + self.pause, slot))
            return
        self.socks[slot] = sock
        self.selector.register(sock, selectors.EVENT_WRITE, (slot, "connect"))

    def _event(self, data: tuple[int, str]) -> None:
        slot, what = data
        sock = self.socks.get(slot)
        if sock is None:
            return
        try:
            if what == "connect":
                sock.send(self.request())
                self.selector.modify(sock, selectors.EVENT_READ, (slot, "answer"))
                return
            chunk = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk and not chunk.startswith(b"HTTP/1.1 "):
            return  # the rest of an answer
        status = int(chunk[9:12]) if chunk[9:12].isdigit() else 0
        self.answers[status] += 1
        if chunk and b"\r\nConnection: keep-alive\r\n" in chunk:  # ask again on it
            try:
                sock.send(self.request())
                return
            except OSError:
                pass
        self._close(slot)
        self.due.append((time.monotonic() + self.pause, slot))

    def _close(self, slot: int) -> None:
        sock = self.socks.pop(slot)
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()


def _flood_main(port: int, attack: str, token: str, per_address: int, stop, answered, out) -> None:
    flood = Flood(port, attack_request(attack, token), per_address=per_address).start()
    while not stop.wait(0.05):
        answered.value = flood.answered()
    flood.stop()
    out.put(dict(flood.answers))


class FloodProcess:
    """A `Flood` of `attack` in a process of its own (the attackers are other machines:
    they must not take the server's GIL). `answered()`: answers so far; `stop()` closes
    every connection and returns the count of each status."""

    def __init__(self, port: int, attack: str, token: str = "t-user", per_address: int = 128) -> None:
        context = multiprocessing.get_context("spawn")
        self.stopping, self.count, self.out = context.Event(), context.Value("l", 0), context.Queue()
        self.process = context.Process(target=_flood_main, daemon=True, args=(
            port, attack, token, per_address, self.stopping, self.count, self.out))

    def start(self) -> FloodProcess:
        self.process.start()
        return self

    def answered(self) -> int:
        return self.count.value

    def stop(self) -> dict[int, int]:
        if not self.process.is_alive():
            return {}
        self.stopping.set()
        answers = self.out.get(timeout=60)
        self.process.join(timeout=30)
        return answers


def probe(port: int, path: str = "/healthz", source: str = "127.0.0.1", timeout: float = 10.0,
          headers: dict[str, str] | None = None) -> tuple[int, float]:
    """(status, seconds) of one GET on a new connection (status 0: no answer: a reset, a
    refused connection, a timeout)."""
    started = time.monotonic()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n".encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status = int(answer[9:12]) if answer.startswith(b"HTTP/1.1 ") else 0
    except OSError:
        status = 0
    return status, time.monotonic() - started


class Reviews:
    """The API server's TokenReview and SubjectAccessReview, as `Delegated`'s reviewer:
    `token` is the one user it knows (`user`); `hang` makes TokenReviews hang until the
    request's deadline (as the real client's timeout ends them), `slow` SubjectAccessReviews
    take 0.2-1 s. `asked`: every review sent, in order."""

    def __init__(self, hang: bool = False, slow: bool = False, token: str = "t-user", user: str = "user") -> None:
        self.hang, self.slow, self.token, self.user = hang, slow, token, user
        self.asked: list[str] = []
        self.released = threading.Event()  # ends hung reviews (the test's teardown)
        self._lock = threading.Lock()

    def __call__(self, kind: str, spec: dict) -> dict:
        from extender.request import deadline

        with self._lock:
            self.asked.append(kind)
        if kind == "tokenreviews":
            if spec["token"] == self.token:
                return {"authenticated": True, "user": {"username": self.user}}
            if self.hang:
                self.released.wait(deadline.remaining() or 5.0)
                raise TimeoutError("read timed out")
            return {"authenticated": False, "error": "invalid bearer token"}
        if self.slow:
            time.sleep(random.uniform(0.2, 1.0))
        return {"allowed": True}


def side_listener(reviews: Reviews):
    """The side listener as `extender serve` starts it (health routes, /explain), on the
    example cluster (file data, a static state), `reviews` answering for the API server."""
    from extender.config import Config
    from extender.engine import Extender
    from extender.server.app import METRICS_INTERVAL, health_routes
    from extender.server.auth import Delegated
    from extender.server.explain_routes import ExplainRoutes
    from extender.server.listener import Listener
    from extender.state import ClusterSnapshot, StaticSource, load_objects
    from extender.state.loader import parse_documents

    root = Path(__file__).resolve().parent.parent / "examples"
    engine = Extender(Config(explain_endpoint=True), StaticSource(ClusterSnapshot.from_objects(
        load_objects(root / "cluster.yaml"))))
    (pod,) = parse_documents((root / "pods" / "sla-gt.yaml").read_bytes())
    routes = ExplainRoutes(engine, True, guard=Delegated(None, reviews), reader=lambda namespace, name: pod)
    return Listener("127.0.0.1:0", health_routes(engine, METRICS_INTERVAL), dispatch=routes).start()


def attack_request(attack: str, token: str) -> Callable[[], bytes]:
    if attack == "metrics":
        return lambda: b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    if attack == "unknown-tokens":
        return lambda: (f"GET /explain/default/sla-gt HTTP/1.1\r\nHost: x\r\n"
                        f"Authorization: Bearer {random.getrandbits(128):x}\r\n\r\n").encode()
    return lambda: (f"GET /explain/default/pod-{random.getrandbits(32):x} HTTP/1.1\r\nHost: x\r\n"
                    f"Authorization: Bearer {token}\r\n\r\n").encode()


ATTACKS = {"metrics": {}, "unknown-tokens": {"hang": True}, "slow-access": {"slow": True}}


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def measure(attack: str | None, seconds: float) -> dict:
    sys.setswitchinterval(SWITCH_INTERVAL)  # as every serving worker does (extender.server.launcher)
    reviews = Reviews(**ATTACKS.get(attack or "", {}))
    listener = side_listener(reviews)
    flood = FloodProcess(listener.port, attack, reviews.token).start() if attack else None
    answers: dict[int, int] = {}
    try:
        if flood is not None:
            while flood.answered() < 1024:
                time.sleep(0.05)
        probes, scrapes = [], []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            probes.append(probe(listener.port, timeout=1.0))  # the kubelet's timeoutSeconds
            if len(probes) % 10 == 0:
                scrapes.append(probe(listener.port, "/metrics", SCRAPER))
            time.sleep(0.02)
        if flood is not None:
            answers = flood.stop()  # every attacker's connection closed
        left = len(reviews.asked)
        while not all(pool.idle() for pool in listener.pools.values()):
            time.sleep(0.05)
        ok = [s for s, _ in probes if s == 200]
        latencies = [t * 1000 for _, t in probes]
        return {"attack": attack or "none", "probes": len(probes), "probes_ok": len(ok),
                "probe_p50_ms": round(statistics.median(latencies), 1),
                "probe_p99_ms": round(_percentile(latencies, 0.99), 1), "probe_max_ms": round(max(latencies), 1),
                "scrapes": len(scrapes), "scrapes_ok": sum(s == 200 for s, _ in scrapes),
                "scrape_p99_ms": round(_percentile([t * 1000 for _, t in scrapes], 0.99), 1),
                "attacker_answers": answers,
                "reviews_during": left, "reviews_after_leaving": len(reviews.asked) - left}
    finally:
        reviews.released.set()
        if flood is not None:
            flood.stop()
        listener.stop()


def main(argv: list[str] | None = None) -> None:
    parser = options.parser("side_flood", __doc__, whole_doc=True, seconds=10.0,
                            out=Path(__file__).resolve().parent / "results" / "side-flood.json")
    args = parser.parse_args(argv)
    results = [measure(attack, args.seconds) for attack in (None, *ATTACKS)]
    for row in results:
        print(json.dumps(row))
    Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
