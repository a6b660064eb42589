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
        node = ""
        if verb == "bind":
            key = (args.get("podnamespace") or "", args.get("podname") or "")
            nodes, node = 1, args.get("node") or ""
        else:
            pod = args.get("pod") or {}
            md = pod.get("metadata") or {}
            key = (md.get("namespace") or "default", md.get("name") or "")
            nodes = len(args.get("nodenames") or args.get("nodenametometavictims") or [])
            with self._lock:
                self.last_pod[key] = pod
        error = f"HTTP {status}" if status != 200 else _answer_error(answer)
        with self._lock:
            self.calls.append(Call(verb, key, at, seconds, nodes, parse_state_version(version), node, error))

    def decision_times(self) -> dict[Key, list[float]]:
        """pod -> the times of its `filter` calls, in order."""
        out: dict[Key, list[float]] = defaultdict(list)
        with self._lock:
            for c in self.calls:
                if c.verb == "filter":
                    out[c.pod].append(c.at)
        return out

    def decisions(self) -> dict[Key, list[Decision]]:
        """pod -> its `filter` calls (time, state version behind the verdict), in order."""
        out: dict[Key, list[Decision]] = defaultdict(list)
        with self._lock:
            for c in self.calls:
                if c.verb == "filter":
                    out[c.pod].append(Decision(c.at, c.versions))
        return out

    def bind_calls(self) -> dict[Key, list[tuple[float, str]]]:
        """pod -> its `bind` calls (time, node), in order."""
        out: dict[Key, list[tuple[float, str]]] = defaultdict(list)
        with self._lock:
            for c in self.calls:
                if c.verb == "bind":
                    out[c.pod].append((c.at, c.node))
        return out

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


def _answer_error(answer: bytes) -> str:
    """The `Error` of a filter or bind answer ("" for none, or another verb's answer)."""
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(data, dict):
        return ""
    return next((v for k, v in data.items() if k.lower() == "error" and isinstance(v, str)), "")


def _handler(tap: WireTap) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
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
