"""A recording proxy between kube-scheduler and the extender (the scheduler's
`urlPrefix` points here; every request is forwarded unchanged, the answer returned
unchanged).

It observes the protocol from outside both processes, which the truth needs: the
scheduler binds asynchronously, so the order of binds in the API is not the order of
its decisions. A pod's scheduling cycle calls `filter` once, after the previous cycle
assumed its pod, so the time of the last `filter` call for a pod before its bind is
when it was placed (`decision_times`). Each answer's `X-Extender-State-Version` header
(the resourceVersion of each kind the extender's verdict was computed on) is kept with
the call, and each `bind` call with its node (`decisions`, `bind_calls`): the truth
judges every placement at exactly the state its verdict used. The tap also keeps the
last `ExtenderArgs.Pod` the scheduler sent for each pod (`last_pod`): the scheduler's
own re-serialization.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import orjson

from testing.apiserver import QuietServer

Key = tuple[str, str]


STATE_VERSION_HEADER = "X-Extender-State-Version"
KEPT_ANSWER = 32  # hosts: a filter's or prioritize's answer is kept up to this size


@dataclass(frozen=True)
class Call:
    verb: str
    pod: Key
    at: float  # time.monotonic() when the request arrived
    seconds: float  # the extender's round trip
    nodes: int  # NodeNames / candidates in the request
    versions: dict[str, int] | None = None  # kind -> resourceVersion behind the verdict (the header)
    node: str = ""  # a bind's node
    error: str = ""  # the answer's Error (filter, bind), or the status line of a non-200
    # what the answer said, for a failure's story (`story`): a filter's feasible names,
    # a prioritize's (host, score) pairs; only for answers of at most KEPT_ANSWER hosts
    # (None above that: a 5,000-node run keeps nothing per call)
    answer: tuple | None = None
    asked: tuple | None = None  # a filter's NodeNames, while at most KEPT_ANSWER


@dataclass(frozen=True)
class Decision:
    """A `filter` answer: when it was asked, and the state its verdict was computed on."""

    at: float
    versions: dict[str, int] | None


def parse_state_version(text: str | None) -> dict[str, int] | None:
    """`Node=12,Pod=15,...` -> {"Node": 12, ...}; None without a header. A kind without
    a version (it was relisting: its objects matched no single version) is left out."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        kind, _, rv = part.partition("=")
        if rv.isdigit():
            out[kind] = int(rv)
    return out


class WireTap:
    def __init__(self, upstream_port: int, connect_wait: float = 60.0) -> None:
        self.upstream_port = upstream_port
        self.connect_wait = connect_wait
        self.calls: list[Call] = []
        # (low, high) seconds slept, uniformly, before a `bind` is forwarded: what
        # kube-scheduler's PreBind plugins (volume binding, DRA) add between a pod's
        # filter answer and its bind (perf/inflight_mix.py)
        self.prebind: tuple[float, float] = (0.0, 0.0)
        # pod -> seconds its `bind` is held before it is forwarded (0: not held): a long
        # PreBind (volume binding) or Permit for chosen pods
        self.hold_bind: Callable[[Key], float] | None = None
        self.last_pod: dict[Key, dict] = {}
        self._lock = threading.Lock()
        self.open_calls = 0  # calls received and not yet answered (a scheduling cycle in progress)
        self._httpd = QuietServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="wiretap",
                                        daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self) -> WireTap:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def record(self, verb: str, body: bytes, at: float, seconds: float, version: str | None = None,
               status: int = 200, answer: bytes = b"") -> None:
        try:
            args = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if not isinstance(args, dict):
            return
        args = {k.lower(): v for k, v in args.items()}
        node, asked = "", None
        if verb == "bind":
            key = (args.get("podnamespace") or "", args.get("podname") or "")
            nodes, node = 1, args.get("node") or ""
        else:
            pod = args.get("pod") or {}
            md = pod.get("metadata") or {}
            key = (md.get("namespace") or "default", md.get("name") or "")
            names = args.get("nodenames") or args.get("nodenametometavictims") or []
            nodes = len(names)
            asked = tuple(names) if isinstance(names, list) and nodes <= KEPT_ANSWER else None
            with self._lock:
                self.last_pod[key] = pod
        error, said = ("", None) if status != 200 else _answer_parts(answer)
        if status != 200:
            error = f"HTTP {status}"
        with self._lock:
            self.calls.append(Call(verb, key, at, seconds, nodes, parse_state_version(version), node, error, said,
                                   asked))

    def _arrived(self, verb: str) -> list[Call]:
        """The `verb` calls in the order they arrived. `calls` holds them in the order
        they were answered, which differs when an answer takes long: a filter that
        kube-scheduler gave up on (its 5 s httpTimeout) while the extender waited for
        a pod in flight (`--inflight-wait` 10 s in the patient e2e runs) is answered
        after the retry of the same pod that did decide it."""
        with self._lock:
            return sorted((c for c in self.calls if c.verb == verb), key=lambda c: c.at)

    def decision_times(self) -> dict[Key, list[float]]:
        """pod -> the times of its `filter` calls, in the order they arrived."""
        out: dict[Key, list[float]] = defaultdict(list)
        for c in self._arrived("filter"):
            out[c.pod].append(c.at)
        return out

    def decisions(self) -> dict[Key, list[Decision]]:
        """pod -> its `filter` calls (time, state version behind the verdict), in the
        order they arrived."""
        out: dict[Key, list[Decision]] = defaultdict(list)
        for c in self._arrived("filter"):
            out[c.pod].append(Decision(c.at, c.versions))
        return out

    def refusals(self) -> dict[Key, list[tuple[Decision, tuple | None]]]:
        """pod -> its `filter` calls answered "no node fits" (no feasible name, no
        Error): each a (decision, the NodeNames it was asked about, None when more than
        KEPT_ANSWER) for the truth to judge (`truth.replay(refusals=)`)."""
        out: dict[Key, list[tuple[Decision, tuple | None]]] = defaultdict(list)
        for c in self._arrived("filter"):
            if c.answer == () and not c.error:
                out[c.pod].append((Decision(c.at, c.versions), c.asked))
        return out

    def bind_calls(self) -> dict[Key, list[tuple[float, str]]]:
        """pod -> its `bind` calls (time, node), in the order they arrived."""
        out: dict[Key, list[tuple[float, str]]] = defaultdict(list)
        for c in self._arrived("bind"):
            out[c.pod].append((c.at, c.node))
        return out

    def story(self, pod: Key, since: float | None = None) -> list[str]:
        """`pod`'s calls as lines (a failure's explanation): each verb with when it
        arrived (seconds after `since`, default the first call), how long the extender
        took, the state version behind the answer, what it said, its error."""
        with self._lock:
            calls = [c for c in self.calls if c.pod == pod]
            origin = since if since is not None else (self.calls[0].at if self.calls else 0.0)
        out = []
        for c in calls:
            said = c.node if c.verb == "bind" else ("" if c.answer is None else f" -> {list(c.answer)}")
            out.append(f"{c.verb} at {c.at - origin:+.3f}s ({c.seconds * 1000:.0f} ms, {c.nodes} nodes) "
                       f"state {c.versions}{' ' + said if c.verb == 'bind' else said}"
                       f"{' error ' + repr(c.error[:160]) if c.error else ''}")
        return out

    def in_flight(self, at: float) -> list[tuple[Key, float, float, str]]:
        """Pods whose last feasible `filter` answer came before `at` and whose `bind`
        arrived after it (or never): what kube-scheduler had assumed and the extender
        had to count at `at`, as (pod, filter time, bind time or inf, node)."""
        answered: dict[Key, float] = {}
        bound: dict[Key, tuple[float, str]] = {}
        for c in self._arrived("filter"):
            if c.at < at and not c.error and c.answer != ():
                answered[c.pod] = c.at
        for c in self._arrived("bind"):
            if not c.error:
                bound.setdefault(c.pod, (c.at, c.node))
        out = []
        for key, when in answered.items():
            bind_at, node = bound.get(key, (float("inf"), ""))
            if bind_at > at:
                out.append((key, when, bind_at, node))
        return sorted(out, key=lambda item: item[1])

    def verbs(self, pod: Key | None = None) -> list[str]:
        with self._lock:
            return [c.verb for c in self.calls if pod is None or c.pod == pod]


def _bind_key(body: bytes) -> Key:
    """(namespace, name) of an `ExtenderBindingArgs` body."""
    try:
        args = {k.lower(): v for k, v in orjson.loads(body).items()}
    except (orjson.JSONDecodeError, AttributeError):
        return ("", "")
    return (args.get("podnamespace") or "", args.get("podname") or "")


def _answer_parts(answer: bytes) -> tuple[str, tuple | None]:
    """(the `Error` of a filter or bind answer, "" for none; what the answer said, kept
    while small: a filter's feasible names, a prioritize's (host, score) pairs)."""
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return "", None
    if isinstance(data, list):  # HostPriorityList
        if len(data) > KEPT_ANSWER:
            return "", None
        return "", tuple((h.get("Host") or h.get("host"), h.get("Score", h.get("score")))
                         for h in data if isinstance(h, dict))
    if not isinstance(data, dict):
        return "", None
    fields = {k.lower(): v for k, v in data.items()}
    error = fields.get("error") if isinstance(fields.get("error"), str) else ""
    names = fields.get("nodenames")
    if names is None and isinstance(fields.get("nodes"), dict):  # Nodes mode: a NodeList
        names = [(n.get("metadata") or {}).get("name") for n in fields["nodes"].get("items") or []]
    if not isinstance(names, list) or len(names) > KEPT_ANSWER:
        return error, None
    return error, tuple(names)


def _handler(tap: WireTap) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            with tap._lock:
                tap.open_calls += 1
            try:
                self._relay()
            finally:
                with tap._lock:
                    tap.open_calls -= 1

        def _relay(self) -> None:
            at = time.monotonic()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/").endswith("/bind"):
                if tap.prebind[1]:
                    time.sleep(random.uniform(*tap.prebind))
                if tap.hold_bind is not None:
                    time.sleep(tap.hold_bind(_bind_key(body)))
            deadline = at + tap.connect_wait
            while True:
                conn = getattr(self, "_upstream", None)
                if conn is None:
                    conn = self._upstream = http.client.HTTPConnection("127.0.0.1", tap.upstream_port, timeout=30)
                try:
                    conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    status, payload = resp.status, resp.read()
                    version = resp.getheader(STATE_VERSION_HEADER)
                    break
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    self._upstream = None
                    if isinstance(exc, ConnectionRefusedError) and time.monotonic() < deadline:
                        time.sleep(0.05)  # the extender is still starting
                        continue
                    status, payload, version = 502, f"wiretap: extender unreachable: {exc}".encode(), None
                    break
            tap.record(self.path.rstrip("/").rsplit("/", 1)[-1], body, at, time.monotonic() - at, version,
                       status, payload)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if version:
                self.send_header(STATE_VERSION_HEADER, version)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
