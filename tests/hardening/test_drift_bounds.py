"""Issue #48's third finding: `/drift` had no rate limit and built the whole report for
every request (a JSON object per drifted pod, then cut to `limit`): 0.7 s of CPU a
request at 50,000 drifted pods. Now only `limit` pods are written out (the rest
counted), a report is built once per tracker settle and query, and `/drift` shares
`/explain`'s rate limit, per user."""

from __future__ import annotations

import http.client
import time
from types import SimpleNamespace

import orjson

from extender.config import Config
from extender.drift import report as drift_report
from extender.drift.evaluate import Violation
from extender.drift.report import Reports, build
from extender.drift.tracker import Drifted
from extender.engine import Extender
from extender.server.app import health_routes
from extender.server.auth import User
from extender.server.explain_routes import ExplainRoutes
from extender.server.listener import Listener

TAINTS = "TaintToleration"
REASON = "node(s) had untolerated taint(s)"


class Tracker(SimpleNamespace):
    """A drift tracker's face as the report reads it: `n` drifted pods."""

    def __init__(self, n: int) -> None:
        violation = Violation(TAINTS, "required", REASON, ("taint a=b:NoSchedule",))
        drifted = {("default", f"p{i:06d}"): Drifted("n1", f"u{i}", (violation,), 1.7e9) for i in range(n)}
        super().__init__(drifted=drifted, spread=None, settles=1, last_generation=7, tracked=n, pending=0,
                         settled_at=time.monotonic(), entries_calls=0)

    def first(self, limit):
        self.entries_calls += 1
        entries = sorted(self.drifted.items())
        return entries[:limit], len(entries), {(TAINTS, REASON, "required"): len(entries)}


def test_only_limit_pods_are_written_out_the_rest_counted(monkeypatch):
    written = []
    pod_json = drift_report._pod_json
    monkeypatch.setattr(drift_report, "_pod_json", lambda *a: written.append(a[0]) or pod_json(*a))
    answer = build(Tracker(5000), limit=10)
    assert len(written) == 10 and [p["name"] for p in answer["pods"]] == [f"p{i:06d}" for i in range(10)]
    assert answer["omittedPods"] == 4990
    assert answer["totals"] == [{"plugin": TAINTS, "reason": REASON, "severity": "required", "pods": 5000}]


def test_a_report_is_built_once_per_settle_and_query():
    tracker, reports = Tracker(100), Reports()

    def pods(limit: int) -> list[dict]:  # the pods are kept as JSON text
        return orjson.loads(orjson.dumps(reports.get(tracker, limit=limit)))["pods"]

    first = pods(5)
    for _ in range(5):
        assert pods(5) == first
    assert tracker.entries_calls == 1
    assert [p["name"] for p in pods(6)] == [f"p{i:06d}" for i in range(6)]  # another query: built
    assert tracker.entries_calls == 2
    del tracker.drifted[("default", "p000000")]
    tracker.settles += 1  # the next settle: built again, and it shows
    assert pods(5)[0]["name"] == "p000001"
    assert tracker.entries_calls == 3


def test_drift_shares_the_per_user_rate_limit_of_explain(example_snapshot):
    """/drift and /explain draw on one bucket per user (`--explain-rate`, `--explain-burst`):
    past it a user gets 429 with Retry-After, while another user is still answered."""
    from extender.state import StaticSource

    engine = Extender(Config(explain_endpoint=True, drift_endpoint=True), StaticSource(example_snapshot))

    class Guard:  # the user is the token (an API server that vouches for anyone)
        def authenticate(self, header, client):
            return User(header("Authorization").removeprefix("Bearer "))

        def authorize(self, user, access):
            pass

    tracker = Tracker(50)
    routes = ExplainRoutes(engine, True, rate=0.01, burst=3, drift=tracker, drift_enabled=True, guard=Guard())
    listener = Listener("127.0.0.1:0", health_routes(engine), dispatch=routes).start()

    def drift(user: str) -> tuple[int, dict, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", listener.port, timeout=30)
        try:
            conn.request("GET", "/drift?limit=2", headers={"Authorization": f"Bearer {user}"})
            response = conn.getresponse()
            return response.status, orjson.loads(response.read()), dict(response.getheaders())
        finally:
            conn.close()

    try:
        answers = [drift("alice") for _ in range(5)]
        assert [a[0] for a in answers] == [200, 200, 200, 429, 429]
        assert answers[0][1]["omittedPods"] == 48 and len(answers[0][1]["pods"]) == 2
        assert "per user" in answers[3][1]["error"] and int(answers[3][2]["Retry-After"]) >= 1
        assert drift("bob")[0] == 200
        assert tracker.entries_calls == 1  # one build for every answer of this settle
    finally:
        listener.stop()


def test_a_pods_kept_text_is_the_report_text_of_its_object():
    """The tracker writes each drifted pod's JSON text once (`pod_fragment`); the report
    joins those texts: byte for byte what writing the pod's object gives."""
    violations = (Violation(TAINTS, "required", REASON, ("taint a=b:NoSchedule", "ünïcode \"quoted\"")),
                  Violation("NodeAffinity", "preferred", "node(s) didn't match", ()))
    key, since = ("ns-1", "pod-é"), 1.7e9 + 0.75
    text = drift_report.pod_fragment(key, "node-1", "uid-1", since, violations)
    assert text == orjson.dumps(drift_report._pod_json(key, "node-1", "uid-1", since, violations))
    plain, kept = Tracker(3), Tracker(3)
    kept.drifted = {k: Drifted(d.node, d.uid, d.violations, d.since,
                               drift_report.pod_fragment(k, d.node, d.uid, d.since, d.violations))
                    for k, d in plain.drifted.items()}
    answers = [Reports().get(t, limit=2) for t in (kept, plain)]
    for answer in answers:
        del answer["drift"]["ageSeconds"]  # the time since each fake's settle
    assert orjson.dumps(answers[0]) == orjson.dumps(answers[1])
    assert orjson.loads(orjson.dumps(answers[0]))["pods"][1]["name"] == "p000001"
    # a severity that hides some violations: the pod is written with the others only
    tracker = Tracker(0)
    tracker.drifted = {key: Drifted("node-1", "uid-1", violations, since, text)}
    tracker.entries = lambda namespace=None: sorted(tracker.drifted.items())
    pods = build(tracker, severities={"preferred"})["pods"]
    assert [v["severity"] for v in pods[0]["violations"]] == ["preferred"]


def _raw(port: int, target: str, token: str) -> bytes:
    """One GET's whole answer as sent, its Date line left out (the one thing that differs
    from one answer to the next)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                     f"Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return b"\r\n".join(line for line in data.split(b"\r\n") if not line.startswith(b"Date: "))


def test_a_user_past_the_rate_limit_is_refused_on_the_loop_with_flasks_very_answer(example_snapshot):
    """A request whose token and access are cached as accepted and whose user's bucket is
    empty is answered 429 as it is placed, without Flask: byte for byte Flask's 429."""
    from extender.ratelimit import Buckets
    from extender.server.auth import Delegated
    from extender.state import StaticSource

    reviews = []

    def reviewer(kind, spec):
        reviews.append(kind)
        if kind == "tokenreviews":
            return {"authenticated": spec["token"] == "t-alice", "user": {"username": "alice"}}
        return {"allowed": True}

    engine = Extender(Config(explain_endpoint=True, drift_endpoint=True), StaticSource(example_snapshot))
    routes = ExplainRoutes(engine, True, rate=1.0, burst=1, drift=Tracker(50), drift_enabled=True,
                           guard=Delegated(None, reviewer))
    routes.bucket = Buckets(1.0, 1, clock=lambda: 0.0)  # no time passes: every wait is 1.0 s
    flask_calls = []
    app = routes.app
    routes.app = lambda environ, start: flask_calls.append(environ["PATH_INFO"]) or app(environ, start)
    listener = Listener("127.0.0.1:0", health_routes(engine), dispatch=routes).start()
    try:
        assert _raw(listener.port, "/drift?limit=2", "t-alice").startswith(b"HTTP/1.1 200 ")  # the one token
        for target in ("/drift?limit=3&namespace=default", "/explain/default/some-pod?examples=2"):
            by_flask = _raw(listener.port, target, "t-alice")  # its access reviewed now: Flask answers
            assert flask_calls[-1] == target.partition("?")[0]
            calls, asked = len(flask_calls), len(reviews)
            early = _raw(listener.port, target, "t-alice")
            assert len(flask_calls) == calls and len(reviews) == asked  # neither Flask nor the API server
            assert early == by_flask and early.startswith(b"HTTP/1.1 429 ")
            assert b"\r\nRetry-After: 1\r\n" in early and b"per second per user" in early
        # what Flask must judge goes to Flask: a bad query (400), an unknown token (401)
        assert _raw(listener.port, "/drift?limit=0", "t-alice").startswith(b"HTTP/1.1 400 ")
        assert _raw(listener.port, "/drift?limit=2", "t-mallory").startswith(b"HTTP/1.1 401 ")
        assert _raw(listener.port, "/drift?limit=%32", "t-alice").startswith(b"HTTP/1.1 429 ")
        assert len(flask_calls) == 6  # the first 200, the two 429s above, these three
    finally:
        listener.stop()
