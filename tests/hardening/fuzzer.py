"""Hostile bodies against a live `extender serve`: hypothesis and schemathesis
(docs/reference/openapi.yaml) generate them; every answer must be a non-5xx JSON answer, a canary
request's answer must never change, and no worker may restart.

Used by tests/hardening/test_fuzz.py (a slice in `make test`) and by `make fuzz`:

    python tests/hardening/fuzzer.py --bodies 100000 [--worker-class inline] [--seed N]
"""

from __future__ import annotations

import argparse
import http.client
import json
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


PATHOLOGICAL = st.sampled_from([
    b"", b" ", b"null", b"[]", b"{}", b'"Pod"', b"{" * 5000, b"[" * 100_000, b'{"Pod":' * 3000,
    b'{"Pod":' + b"9" * 5000 + b"}", b'{"Pod":{},"x":-' + b"1" * 4301 + b"}",
    b'{"Pod":{"spec":{"tolerations":[' + b'{"key":"a","operator":"Exists"},' * 20_000 + b"{}]}}}",
    b'{"Pod":{},"NodeNames":[' + b'"od-a1",' * 50_000 + b'"x"]}', b'{"Pod":{}}' + b"\x00" * 100,
    b'{"Pod":{"metadata":{"name":"\\ud800"}}}', b'\xef\xbb\xbf{"Pod":{}}', b'{"Pod":1e400}',
    b'{"Pod":{"metadata":{"annotations":{"' + PREFIX.encode() + b'/tolerations":"' + b"[" * 5000 + b'"}}}}',
])


def _encode(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    try:
        return orjson.dumps(value)
    except TypeError:  # integers beyond 64 bits, surrogates
        return json.dumps(value).encode("utf-8", "surrogatepass")


def sources() -> dict[str, tuple[float, st.SearchStrategy]]:
    """Body generators and their shares of a run. schemathesis is ~40 ms a body (the
    others 1-4 ms), hence its smaller share."""
    return {
        "structured": (0.50, ARGS.map(_encode)),
        "schemathesis": (0.10, _schemathesis_bodies().map(_encode)),
        "mutated": (0.20, _mutated()),
        "json": (0.15, JSON.map(_encode)),
        "pathological": (0.05, PATHOLOGICAL),
    }


# --- checking answers ---------------------------------------------------------------------

@dataclass
class Report:
    bodies: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    by_source: dict[str, dict[str, float]] = field(default_factory=dict)  # bodies, seconds
    failures: list[str] = field(default_factory=list)
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


def fuzz(port: int, server_pid: int, count: int, seed_value: int = 0, canary_every: int = 250) -> Report:
    """Send `count` generated bodies; the report lists every broken promise."""
    client = Client(port)
    report = Report()
    workers = {p.pid for p in psutil.Process(server_pid).children()}
    expected = client.post("/filter", CANARY)
    assert expected[0] == 200, expected
    started = time.monotonic()

    def check(path: str, body: bytes) -> None:
        try:
            status, kind, data = client.post(path, body)
        except (OSError, http.client.HTTPException) as exc:  # a hang or a broken answer
            client.close()
            report.bodies += 1
            report.failures.append(f"transport error {exc!r} for {path} {body[:300]!r}")
            return
        report.bodies += 1
        if report.bodies % 5000 == 0:
            print(f"[fuzz] {report.bodies} bodies, {len(report.failures)} failures, "
                  f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        report.by_status[status] = report.by_status.get(status, 0) + 1
        where = f"{path} {body[:120]!r}"
        if status >= 500:
            report.failures.append(f"{status} for {where}: {data[:200]!r}")
        elif not kind.startswith("application/json"):
            report.failures.append(f"non-JSON content type {kind!r} for {where}")
        else:
            try:
                orjson.loads(data)
            except orjson.JSONDecodeError:
                report.failures.append(f"non-JSON body {data[:200]!r} for {where}")
        if report.bodies % canary_every == 0 and client.post("/filter", CANARY) != expected:
            report.failures.append(f"canary answer changed after {report.bodies} bodies")

    def runner(strategy: st.SearchStrategy, stats: dict[str, float], left: int, attempt: int):
        @seed(seed_value + attempt)
        @settings(max_examples=left, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(path=st.sampled_from(VERBS), body=strategy)
        def run(path: str, body: bytes) -> None:
            began = time.monotonic()
            check(path, body)
            stats["bodies"] += 1
            stats["seconds"] += time.monotonic() - began

        return run

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
    parser.add_argument("--worker-class", default="inline", choices=("inline", "gthread"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    ns = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT / "tests" / "server")]
    from live import start, stop

    port, proc = start(ROOT / "examples" / "cluster.yaml", "--worker-class", ns.worker_class,
                       "--log-level", "error")
    log_tail = drain(proc)
    try:
        report = fuzz(port, proc.pid, ns.bodies, ns.seed)
    finally:
        stop(proc)
    print(json.dumps({"bodies": report.bodies, "seed": ns.seed, "worker_class": ns.worker_class,
                      "seconds": round(report.seconds, 1), "by_status": report.by_status,
                      "by_source": {k: {"bodies": int(v["bodies"]), "server_seconds": round(v["seconds"], 1)}
                                    for k, v in report.by_source.items()},
                      "failures": report.failures[:50], "failure_count": len(report.failures),
                      "server_log_tail": [line.decode(errors="replace")[:300] for line in log_tail][-5:]
                      if report.failures else []},
                     indent=2))
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
