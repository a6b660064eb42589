"""Hostile bodies against a live `extender serve`: hypothesis and schemathesis
(docs/reference/openapi.yaml) generate them for every verb (`/filter`, `/prioritize`,
`/bind`, `/preempt`) and as raw HTTP requests (methods, targets, versions, framings,
broken chunked bodies, every path). Every answer must be a non-5xx JSON answer (raw
requests: a non-5xx answer or a close) within the request deadline + 1 s, a retried
filter must answer as the first did, a canary request's answer must never change, and
no worker may restart.

Used by tests/hardening/test_fuzz.py (a slice in `make test`) and by `make fuzz`:

    python tests/hardening/fuzzer.py --bodies 100000 [--worker-class inline] [--seed N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis.strategies as st
import orjson
import psutil
from hypothesis import HealthCheck, Phase, given, seed, settings

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "docs" / "reference" / "openapi.yaml"
VERBS = ("/filter", "/prioritize", "/scheduler/filter", "/a/b/prioritize")
DEADLINE = 4.0  # --request-deadline (the server's default)
SLOW = DEADLINE + 1.0  # an answer slower than this is a failure
RETRY_EVERY = 20  # every 20th filter body is sent twice: the answers must be equal
NAMES = ["od-a1", "od-a2", "od-b1", "spot-a1", "spot-b1", "spot-c1"]  # examples/cluster.yaml
PREFIX = "scheduling-extender.io"
CANARY = orjson.dumps({"Pod": {"metadata": {"name": "canary", "namespace": "default"}, "spec": {
    "tolerations": [{"key": "sla", "operator": "Gt", "value": "500", "effect": "NoSchedule"}]}},
    "Nodes": None, "NodeNames": NAMES})


# --- bodies ------------------------------------------------------------------------------

def _schemathesis_bodies() -> st.SearchStrategy:
    import schemathesis
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_path(str(OPENAPI))
    strategies = [schema[path]["POST"].as_strategy(generation_mode=mode)
                  for path in ("/filter", "/prioritize")
                  for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    return st.one_of(strategies).map(lambda case: case.body)


TEXT = st.one_of(st.sampled_from(["", "a", "sla", "NoSchedule", "Gt", "Lt", "SemverGt", "1", "-1",
                                  "1.2.3", "v1", "9" * 30, "x" * 300, "\u00e9\u0000\ud7ff",
                                  f"{PREFIX}/tolerations", "topology.kubernetes.io/zone"]),
                 st.text(max_size=40))
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=5)), max_leaves=20)


def _maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly the well-typed value, sometimes any JSON at all in its place."""
    return st.one_of(strategy, strategy, strategy, JSON)


TOLERATION = st.fixed_dictionaries({}, optional={
    "key": _maybe(TEXT), "operator": _maybe(st.sampled_from(
        ["Exists", "Equal", "Gt", "Lt", "SemverGt", "SemverLt", "", "gt", "In"])),
    "value": _maybe(TEXT), "effect": _maybe(st.sampled_from(
        ["NoSchedule", "PreferNoSchedule", "NoExecute", "", "Other"])),
    "tolerationSeconds": _maybe(st.integers())})
REQUIREMENT = st.fixed_dictionaries({}, optional={
    "key": _maybe(TEXT), "operator": _maybe(st.sampled_from(
        ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "SemverGt", "Bad"])),
    "values": _maybe(st.lists(TEXT, max_size=4))})
TERM = st.fixed_dictionaries({}, optional={"matchExpressions": _maybe(st.lists(REQUIREMENT, max_size=3)),
                                           "matchFields": _maybe(st.lists(REQUIREMENT, max_size=2))})
CEL = st.sampled_from(["taint.key == 'sla'", "taint.value.startsWith('a')", "int(taint.value) > 3",
                       "taint.effect in ['NoSchedule']", "1/0 == 1", "[1,2].all(x, x > 0)",
                       "'a' * 3", "taint.", "true", "size(taint.value) > 1 ||", "x" * 11000])
ANNOTATIONS = st.dictionaries(st.sampled_from([f"{PREFIX}/tolerations", f"{PREFIX}/node-affinity",
                                               f"{PREFIX}/cel-tolerations", "other"]),
                              st.one_of(TEXT, JSON.map(lambda v: json.dumps(v)),
                                        st.lists(st.fixed_dictionaries(
                                            {"key": TEXT, "operator": TEXT, "value": TEXT,
                                             "expression": CEL}), max_size=3)
                                        .map(lambda v: json.dumps(v))), max_size=3)
SPREAD = st.fixed_dictionaries({}, optional={
    "maxSkew": _maybe(st.integers(-2, 5)), "topologyKey": _maybe(TEXT),
    "whenUnsatisfiable": _maybe(st.sampled_from(["DoNotSchedule", "ScheduleAnyway", "x"])),
    "labelSelector": _maybe(st.fixed_dictionaries({}, optional={
        "matchLabels": st.dictionaries(TEXT, TEXT, max_size=2)})),
    "minDomains": _maybe(st.integers(-1, 5)), "matchLabelKeys": _maybe(st.lists(TEXT, max_size=2)),
    "nodeAffinityPolicy": _maybe(st.sampled_from(["Honor", "Ignore", "x"])),
    "nodeTaintsPolicy": _maybe(st.sampled_from(["Honor", "Ignore", "x"]))})
POD = st.fixed_dictionaries({}, optional={
    "metadata": _maybe(st.fixed_dictionaries({}, optional={
        "name": _maybe(TEXT), "namespace": _maybe(TEXT),
        "labels": _maybe(st.dictionaries(TEXT, TEXT, max_size=3)),
        "annotations": _maybe(ANNOTATIONS)})),
    "spec": _maybe(st.fixed_dictionaries({}, optional={
        "tolerations": _maybe(st.lists(TOLERATION, max_size=4)),
        "nodeSelector": _maybe(st.dictionaries(TEXT, TEXT, max_size=2)),
        "affinity": _maybe(st.fixed_dictionaries({"nodeAffinity": st.fixed_dictionaries({}, optional={
            "requiredDuringSchedulingIgnoredDuringExecution": _maybe(st.fixed_dictionaries(
                {"nodeSelectorTerms": _maybe(st.lists(TERM, max_size=3))})),
            "preferredDuringSchedulingIgnoredDuringExecution": _maybe(st.lists(st.fixed_dictionaries(
                {"weight": _maybe(st.integers(-5, 200)), "preference": _maybe(TERM)}), max_size=2))})})),
        "topologySpreadConstraints": _maybe(st.lists(SPREAD, max_size=2))}))})
NODE = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": TEXT}, optional={
    "labels": st.dictionaries(TEXT, TEXT, max_size=3)})}, optional={"spec": st.fixed_dictionaries(
        {}, optional={"unschedulable": _maybe(st.booleans()), "taints": _maybe(st.lists(
            st.fixed_dictionaries({"key": TEXT, "value": TEXT, "effect": TEXT}), max_size=3))})})
ARGS = st.fixed_dictionaries({"Pod": _maybe(POD)}, optional={
    "Nodes": _maybe(st.fixed_dictionaries({"items": _maybe(st.lists(NODE, max_size=4))})),
    "NodeNames": _maybe(st.lists(st.one_of(st.sampled_from(NAMES), TEXT), max_size=8)),
    "nodenames": st.lists(st.sampled_from(NAMES), max_size=3), "pod": POD})


@st.composite
def _mutated(draw) -> bytes:
    """A valid body cut, spliced or sprinkled with bytes."""
    body = bytearray(CANARY)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(body)))
        how = draw(st.sampled_from(["cut", "insert", "flip", "delete"]))
        if how == "cut":
            del body[at:]
        elif how == "insert":
            body[at:at] = draw(st.binary(max_size=8) | st.sampled_from(
                [b"{", b"]", b'"', b"\\u", b"\\ud800", b"1e999", b"-", b"\xff", b"NaN", b",,"]))
        elif how == "flip" and at < len(body):
            body[at] ^= draw(st.integers(1, 255))
        else:
            del body[at:at + draw(st.integers(1, 20))]
    return bytes(body)


PATHOLOGICAL_BODIES = [
    b"", b" ", b"null", b"[]", b"{}", b'"Pod"', b"{" * 5000, b"[" * 100_000, b'{"Pod":' * 3000,
    b'{"Pod":' + b"9" * 5000 + b"}", b'{"Pod":{},"x":-' + b"1" * 4301 + b"}",
    b'{"Pod":{"spec":{"tolerations":[' + b'{"key":"a","operator":"Exists"},' * 20_000 + b"{}]}}}",
    b'{"Pod":{},"NodeNames":[' + b'"od-a1",' * 50_000 + b'"x"]}', b'{"Pod":{}}' + b"\x00" * 100,
    b'{"Pod":{"metadata":{"name":"\\ud800"}}}', b'\xef\xbb\xbf{"Pod":{}}', b'{"Pod":1e400}',
    b'{"Pod":{"metadata":{"annotations":{"' + PREFIX.encode() + b'/tolerations":"' + b"[" * 5000 + b'"}}}}',
]
PATHOLOGICAL = st.sampled_from(PATHOLOGICAL_BODIES)


# --- the other verbs: bind and preempt (extender/v1 wire types) -------------------------

INT64 = st.one_of(st.integers(-5, 5), st.integers(), st.just(2**63), st.just(-(2**63) - 1), st.just(2**64))
BINDING = st.fixed_dictionaries({}, optional={
    "PodName": _maybe(TEXT), "PodNamespace": _maybe(TEXT), "PodUID": _maybe(TEXT),
    "Node": _maybe(st.sampled_from(NAMES) | TEXT), "podname": TEXT, "node": st.sampled_from(NAMES)})
META_POD = st.fixed_dictionaries({}, optional={"UID": _maybe(TEXT), "uid": TEXT})
VICTIMS = st.fixed_dictionaries({}, optional={
    "Pods": _maybe(st.lists(_maybe(META_POD), max_size=3)), "NumPDBViolations": _maybe(INT64)})
FULL_VICTIMS = st.fixed_dictionaries({}, optional={
    "Pods": _maybe(st.lists(_maybe(POD), max_size=2)), "NumPDBViolations": _maybe(INT64)})
PREEMPTION = st.fixed_dictionaries({"Pod": _maybe(POD)}, optional={
    "NodeNameToMetaVictims": _maybe(st.dictionaries(st.sampled_from(NAMES) | TEXT, _maybe(VICTIMS), max_size=4)),
    "NodeNameToVictims": _maybe(st.dictionaries(st.sampled_from(NAMES) | TEXT, _maybe(FULL_VICTIMS), max_size=3)),
    "pod": POD})
# the classes issue #28 found answered 500, kept in every run (trailing blanks make each
# example distinct, so that hypothesis never runs out of them)
REGRESSION_CASES = [
    ("/preempt", b'{"Pod":{"spec":{"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"zone",'
     b'"whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchExpressions":[{"key":"a","operator":"Bad"}]}}]}},'
     b'"NodeNameToMetaVictims":{"od-a1":{"Pods":[{"UID":"u"}]}}}'),
    ("/preempt", b'{"Pod":{},"NodeNameToMetaVictims":{"od-a1":{"Pods":5}}}'),
    ("/preempt", b'{"Pod":{},"NodeNameToVictims":{"od-a1":{"Pods":{"a":1}}}}'),
    ("/preempt", b'{"Pod":{},"NodeNameToMetaVictims":{"od-a1":{"Pods":[],"NumPDBViolations":18446744073709551616}}}'),
    ("/prioritize", b'{"Pod":{"spec":{"affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":'
     b'[{"weight":9223372036854775808,"preference":{"matchExpressions":[{"key":"kubernetes.io/hostname",'
     b'"operator":"Exists"}]}}]}}}},"NodeNames":["od-a1","od-a2"]}'),
    ("/filter", b'{"Pod":{"spec":{"priority":4294967296}},"NodeNames":["od-a1"]}'),
]
REGRESSIONS = st.builds(lambda case, pad: (case[0], case[1] + b" " * pad), st.sampled_from(REGRESSION_CASES),
                        st.integers(0, 10_000))


# --- raw HTTP: what kube-scheduler never sends, on every path ------------------------------

RAW_PATHS = ["/filter", "/prioritize", "/bind", "/preempt", "/scheduler/filter", "/healthz", "/readyz",
             "/metrics", "/explain", "/explain/default/p", "/", "*", "/filter?x=1", "/%66ilter", "//filter",
             "/filter/../bind", "http://h/filter", "/" + "a" * 9000]
RAW_HEADER_LINES = [
    b"Connection: close", b"Connection: keep-alive", b"Connection: upgrade", b"Upgrade: h2c",
    b"Expect: 100-continue", b"Expect: nonsense", b"Content-Type: application/json", b"Host: x",
    b"X-Folded: a\r\n  b", b"No colon here", b"Bad Name: 1", b"X-Nul: a\x00b", b"Content-Length: -1",
    b"Content-Length: 0x10", b"Content-Length: 99999999999999999999", b"Transfer-Encoding: gzip",
    b"Transfer-Encoding: chunked, gzip", b"X-Big: " + b"v" * 70_000, b"\xff\xfe: \x80",
]
RAW_HEADERS = st.lists(st.sampled_from(RAW_HEADER_LINES), max_size=3)


METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "FOO", "get", "", "POST POST"]
VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "HTTP/0.9", "http/1.1", ""]
FRAMINGS = ["length", "chunked", "broken-chunked", "short-length", "long-length", "none", "both"]
CHUNK_TAILS = [b"\r\n0\r\n\r\n", b"XX0\r\n\r\n", b"\r\n0\r\nTrailer: x\r\n\r\n", b""]


def raw_bytes(method: str, path: str, version: str, body: bytes, framing: str, headers: list[bytes],
              size: bytes | None = None, tail: bytes = CHUNK_TAILS[0]) -> bytes:
    """A whole request (the client half-closes after it, so nothing waits for more);
    `size`: the chunk-size line of a broken chunked body."""
    headers = list(headers)
    if framing in ("length", "both"):
        headers.append(b"Content-Length: %d" % len(body))
    elif framing == "short-length":
        headers.append(b"Content-Length: %d" % max(0, len(body) - 3))
    elif framing == "long-length":
        headers.append(b"Content-Length: %d" % (len(body) + 10))
    if framing in ("chunked", "broken-chunked", "both"):
        headers.append(b"Transfer-Encoding: chunked")
        if framing == "chunked" or size is None:
            size = b"%x" % len(body)
        body = (size + b"\r\n" + body + tail) if body or framing != "chunked" else b"0\r\n\r\n"
    line = f"{method} {path} {version}".encode()
    return line + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


@st.composite
def _raw_request(draw) -> bytes:
    method = draw(st.sampled_from(METHODS))
    path = draw(st.sampled_from(RAW_PATHS))
    version = draw(st.sampled_from(["HTTP/1.1", *VERSIONS]))
    body = draw(st.one_of(ARGS.map(_encode), st.binary(max_size=64), st.just(CANARY), st.just(b"")))
    framing = draw(st.sampled_from(["length", *FRAMINGS]))
    headers = list(draw(RAW_HEADERS))
    size = tail = None
    if framing in ("chunked", "broken-chunked", "both"):
        size = draw(st.sampled_from([b"%x" % len(body), b"zz", b"-1", b"1" * 20, b"%X;ext=1" % len(body)]))
        tail = draw(st.sampled_from(CHUNK_TAILS))
    return raw_bytes(method, path, version, body, framing, headers, size, tail or CHUNK_TAILS[0])


def every_class() -> list[tuple[str, bytes]]:
    """Each fixed class once, sent before the generated bodies (so that a short run
    holds them all, not only those its draws happen to pick): every regression of issue
    #28, every pathological body on every verb, and raw requests with every path,
    method, version, framing (each broken chunk-size line and tail too) and odd header."""
    def raw(path="/filter", method="POST", version="HTTP/1.1", framing="length", headers=(),
            size=None, tail=CHUNK_TAILS[0]) -> tuple[str, bytes]:
        return RAW, raw_bytes(method, path, version, CANARY, framing, list(headers), size, tail)

    broken_sizes = [b"zz", b"-1", b"1" * 20, b"%X;ext=1" % len(CANARY)]
    return [*REGRESSION_CASES,
            *[(path, body) for body in PATHOLOGICAL_BODIES for path in [*VERBS, "/preempt"]],
            *[raw(path=path) for path in RAW_PATHS], *[raw(method=method) for method in METHODS],
            *[raw(version=version) for version in VERSIONS], *[raw(framing=framing) for framing in FRAMINGS],
            *[raw(framing="broken-chunked", size=size, tail=tail) for size in broken_sizes for tail in CHUNK_TAILS],
            *[raw(headers=[header]) for header in RAW_HEADER_LINES]]


def _encode(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    try:
        return orjson.dumps(value)
    except TypeError:  # integers beyond 64 bits, surrogates
        return json.dumps(value).encode("utf-8", "surrogatepass")


RAW = "raw"  # the path of raw HTTP requests: sent as they are, on their own connection


def sources() -> dict[str, tuple[float, st.SearchStrategy]]:
    """Generators of (path, body) and their shares of a run. schemathesis is ~40 ms a
    body (the others 1-4 ms), hence its smaller share."""
    verbs = st.sampled_from(VERBS)
    return {
        "structured": (0.36, st.tuples(verbs, ARGS.map(_encode))),
        "schemathesis": (0.08, st.tuples(verbs, _schemathesis_bodies().map(_encode))),
        "mutated": (0.14, st.tuples(verbs, _mutated())),
        "json": (0.10, st.tuples(st.sampled_from([*VERBS, "/bind", "/preempt"]), JSON.map(_encode))),
        "pathological": (0.04, st.tuples(st.sampled_from([*VERBS, "/preempt"]), PATHOLOGICAL)),
        "bind": (0.06, st.tuples(st.sampled_from(["/bind", "/scheduler/bind"]), BINDING.map(_encode))),
        "preempt": (0.12, st.tuples(st.sampled_from(["/preempt", "/scheduler/preempt"]), PREEMPTION.map(_encode))),
        "regressions": (0.02, REGRESSIONS),
        "raw": (0.08, st.tuples(st.just(RAW), _raw_request())),
    }


# --- checking answers ---------------------------------------------------------------------

@dataclass
class Report:
    bodies: int = 0
    by_status: dict[int, int] = field(default_factory=dict)  # 0: a raw request closed unanswered
    by_path: dict[str, int] = field(default_factory=dict)
    by_source: dict[str, dict[str, float]] = field(default_factory=dict)  # bodies, seconds
    failures: list[str] = field(default_factory=list)
    slowest: float = 0.0  # seconds, the slowest answer
    retries: int = 0  # filters sent twice
    seconds: float = 0.0

    def ok(self) -> bool:
        return not self.failures


class Client:
    """One kept-alive connection, reopened when the server closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, str, bytes]:
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                response = self.conn.getresponse()
                data = response.read()
                if response.will_close:
                    self.close()
                return response.status, response.getheader("Content-Type", ""), data
            except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def raw_exchange(port: int, request: bytes) -> int:
    """Send a raw request on a new connection, half-close, and return the status of the
    first answer (0 if the server closed without one); TimeoutError past SLOW."""
    with socket.create_connection(("127.0.0.1", port), timeout=SLOW) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed early (431, 413): read its answer
        received = b""
        while True:
            if b"\r\n\r\n" in received and received.startswith(b"HTTP/1.1 100 "):
                received = received.split(b"\r\n\r\n", 1)[1]  # an interim answer: the next one
            if b"\r\n" in received:
                break
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    if not received.startswith(b"HTTP/"):
        return 0
    parts = received.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def fuzz(port: int, server_pid: int, count: int, seed_value: int = 0, canary_every: int = 250,
         classes: bool = True) -> Report:
    """Send `count` generated bodies (after `every_class()` unless `classes` is False);
    the report lists every broken promise."""
    client = Client(port)
    report = Report()
    workers = {p.pid for p in psutil.Process(server_pid).children()}
    expected = client.post("/filter", CANARY)
    assert expected[0] == 200, expected
    started = time.monotonic()

    def check(path: str, body: bytes) -> None:
        began = time.monotonic()
        try:
            if path == RAW:
                status, kind, data = raw_exchange(port, body), "", b""
            else:
                status, kind, data = client.post(path, body)
        except (OSError, http.client.HTTPException) as exc:  # a hang or a broken answer
            client.close()
            report.bodies += 1
            report.failures.append(f"transport error {exc!r} for {path} {body[:300]!r}")
            return
        took = time.monotonic() - began
        report.slowest = max(report.slowest, took)
        report.bodies += 1
        if report.bodies % 5000 == 0:
            print(f"[fuzz] {report.bodies} bodies, {len(report.failures)} failures, "
                  f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        report.by_status[status] = report.by_status.get(status, 0) + 1
        report.by_path[path] = report.by_path.get(path, 0) + 1
        where = f"{path} {body[:120]!r}"
        if took > SLOW:
            report.failures.append(f"answered in {took:.1f} s (> deadline + 1 s) for {where}")
        if status >= 500:
            report.failures.append(f"{status} for {where}: {data[:200]!r}")
        elif path == RAW:
            pass  # any non-5xx answer, or a close, is a fine end for a malformed request
        elif not kind.startswith("application/json"):
            report.failures.append(f"non-JSON content type {kind!r} for {where}")
        else:
            try:
                orjson.loads(data)
            except orjson.JSONDecodeError:
                report.failures.append(f"non-JSON body {data[:200]!r} for {where}")
            if path.endswith("/filter") and report.bodies % RETRY_EVERY == 0:
                again = client.post(path, body)  # kube-scheduler retries with the same body
                report.retries += 1
                if again[0] != status or (again[2] != data and b"deadline" not in data + again[2]):
                    report.failures.append(f"a retried filter answered {again[0]} {again[2][:120]!r}, "
                                           f"the first {status} {data[:120]!r}, for {where}")
        if report.bodies % canary_every == 0 and client.post("/filter", CANARY) != expected:
            report.failures.append(f"canary answer changed after {report.bodies} bodies")

    def runner(strategy: st.SearchStrategy, stats: dict[str, float], left: int, attempt: int):
        @seed(seed_value + attempt)
        @settings(max_examples=left, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def run(case: tuple[str, bytes]) -> None:
            began = time.monotonic()
            check(*case)
            stats["bodies"] += 1
            stats["seconds"] += time.monotonic() - began

        return run

    if classes:
        stats = report.by_source["classes"] = {"bodies": 0, "seconds": 0.0}
        for path, body in every_class():
            began = time.monotonic()
            check(path, body)
            stats["bodies"] += 1
            stats["seconds"] += time.monotonic() - began
    for name, (share, strategy) in sources().items():
        target = max(1, round(count * share))
        stats = report.by_source[name] = {"bodies": 0, "seconds": 0.0}
        for attempt in range(100):  # hypothesis stops early once a small space is exhausted
            left = target - int(stats["bodies"])
            if left <= 0:
                break
            runner(strategy, stats, left, attempt)()
    if client.post("/filter", CANARY) != expected:
        report.failures.append("canary answer changed at the end")
    now = {p.pid for p in psutil.Process(server_pid).children()}
    if now != workers:
        report.failures.append(f"worker processes changed: {sorted(workers)} -> {sorted(now)}")
    client.close()
    report.seconds = time.monotonic() - started
    return report


def drain(proc) -> deque:
    """Keep reading the server's stderr (the last 200 lines kept): a pipe nobody reads
    fills up after ~64 KiB of error logs, and the server then blocks writing its log."""
    tail: deque = deque(maxlen=200)

    def read() -> None:
        for line in proc.stderr:
            tail.append(line)

    threading.Thread(target=read, daemon=True).start()
    return tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=100_000)
    parser.add_argument("--worker-class", default="inline", choices=("inline", "pool", "gthread"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    ns = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT)]
    from testing.live import start, stop

    port, proc = start(ROOT / "examples" / "cluster.yaml", "--worker-class", ns.worker_class,
                       "--log-level", "error")
    log_tail = drain(proc)
    try:
        report = fuzz(port, proc.pid, ns.bodies, ns.seed)
    finally:
        stop(proc)
    print(json.dumps({"bodies": report.bodies, "seed": ns.seed, "worker_class": ns.worker_class,
                      "seconds": round(report.seconds, 1), "slowest_answer_s": round(report.slowest, 2),
                      "retried_filters": report.retries, "by_status": report.by_status,
                      "by_path": dict(sorted(report.by_path.items(), key=lambda kv: -kv[1])[:12]),
                      "by_source": {k: {"bodies": int(v["bodies"]), "server_seconds": round(v["seconds"], 1)}
                                    for k, v in report.by_source.items()},
                      "failures": report.failures[:50], "failure_count": len(report.failures),
                      "server_log_tail": [line.decode(errors="replace")[:300] for line in log_tail][-5:]
                      if report.failures else []},
                     indent=2))
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
