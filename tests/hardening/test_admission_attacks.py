"""Issue #35's second attack: admission compiled CEL with no deadline and went on after
its caller had left. Ten 62 KB reviews with six 10 KiB list literals each, sent with a
short client timeout: the next ordinary review waited 9.5 s, the queue drained 10-35 s
after every client had gone, and an honest `/filter` answered its deadline Error
(admission held the CEL parser's lock).

Now a review has its own deadline (below the webhook's `timeoutSeconds`), stops at the
next check once its client has closed the connection, compiles at most a budget of new
CEL, moves to a lane of its own when it compiles more than a little (ordinary reviews
never queue behind it), and every thread parses CEL with its own parser."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time

import orjson
import psutil
import pytest
from validation.pki import serving_pki

from extender.cel import environment, program
from extender.cel.program import compile_program
from extender.features import FeatureGates
from extender.request import lane
from extender.server.tls import ReloadingContext
from extender.server.webhook import webhook_listener
from extender.validation import rules
from extender.validation.rules import REVIEW_COMPILE_BYTES
from extender.validation.workloads import check_object
from perf.attacks import cel_review_body, review_body

P = "scheduling-extender.io"
ATTACKERS = 10
RUN = int(time.time() * 1000) % 10**9  # expressions never compiled before in this process


@pytest.fixture
def pki(tmp_path):
    return serving_pki(tmp_path)


def review(port: int, ctx: ssl.SSLContext, body: bytes, timeout: float = 30.0) -> tuple[int, float, dict]:
    started = time.monotonic()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    try:
        conn.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        return response.status, time.monotonic() - started, orjson.loads(data) if data else {}
    finally:
        conn.close()


def thread_cpu(prefix: str) -> float:
    """CPU seconds the threads named `prefix...` of this process have used."""
    ids = {t.native_id for t in threading.enumerate() if t.name.startswith(prefix)}
    return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id in ids)


def one_compile_cpu(n: int) -> float:
    """CPU seconds one of the attack's expressions takes to compile (this machine, now)."""
    body = orjson.loads(cel_review_body(n, lists=1))
    (toleration,) = json.loads(body["request"]["object"]["metadata"]["annotations"][f"{P}/tolerations"])
    started = time.thread_time()
    compile_program(toleration["expression"])
    return time.thread_time() - started


class Compiles:
    """Counts the CEL compiles that have started and finished (the attack's work). A
    compile of more than 1 KiB (the attack's ~10 KiB lists) first waits at `gate`
    (open unless a test closes it), so that a test can hold the attack mid-compile."""

    def __init__(self) -> None:
        self.started = self.done = 0
        self.lock = threading.Lock()
        self.real = program.compile_program
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, expression, *args, **kwargs):
        with self.lock:
            self.started += 1
        if len(expression) > 1024:
            self.gate.wait(60)
        try:
            return self.real(expression, *args, **kwargs)
        finally:
            with self.lock:
                self.done += 1


def test_an_ordinary_review_is_answered_and_abandoned_reviews_stop(pki, monkeypatch):
    """Ordinary reviews do not wait for the attack's compiles: the attack is held in the
    middle of its first compile (`Compiles.gate`) and every ordinary review is answered
    meanwhile, none of the attack's compiles finished (a count, not a race between the
    two: on a fast machine the attack used to finish half its compiles before the first
    ordinary answer; the issue's bound, 1 s, is measured by `python -m perf.attacks
    --only cel-reviews`: p99 65 ms on the busy shared machine). Once every attacker has
    gone, the webhook's threads stop: the CPU they use afterwards is at most the
    compiles under way when the clients left (the parse of one expression cannot be
    interrupted), not the attack's sixty."""
    listener = webhook_listener("127.0.0.1:0", ReloadingContext(pki["cert"], pki["key"]), P, FeatureGates()).start()
    ordinary = review_body()
    compiles = Compiles()
    try:
        compile_cpu = one_compile_cpu(RUN)
        monkeypatch.setattr(rules, "compile_program", compiles)  # what the webhook compiles with
        compiles.gate.clear()
        sockets = []
        for i in range(ATTACKERS):  # each sends its review, waits a little, gives up
            raw = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
            sock = pki["client"].wrap_socket(raw, server_hostname="localhost")
            body = cel_review_body(RUN + 1 + i)
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            sockets.append(sock)
        deadline = time.monotonic() + 60
        while not compiles.started:  # the attack is compiling (held at the gate)
            assert time.monotonic() < deadline, "the attack's reviews never compiled"
            time.sleep(0.01)
        compiled_when_answered = []
        for _ in range(10):  # ordinary reviews while the attack's are queued and compiling
            status, _, answer = review(listener.port, pki["client"], ordinary)
            assert status == 200 and answer["response"]["allowed"] is True
            compiled_when_answered.append(compiles.done)
        for sock in sockets:  # every attacker gives up
            sock.close()
        after_leaving = thread_cpu(listener.name)
        compiles.gate.set()  # the compile under way goes on
        deadline = time.monotonic() + 60
        while listener.busy() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not listener.busy(), "abandoned reviews still being answered a minute after their clients left"
        spent = thread_cpu(listener.name) - after_leaving
    finally:
        compiles.gate.set()
        listener.stop()
    assert compiled_when_answered == [0] * 10, compiled_when_answered  # none waited for the attack
    assert spent < 2 * compile_cpu + 0.5, (spent, compile_cpu)


def test_admission_holds_no_lock_a_verbs_compile_needs():
    """A verb's compile (another thread) finishes while an admission compile is in the
    middle of parsing; before issue #35 both parsed under one lock."""
    inside, verb_done = threading.Event(), threading.Event()
    parse = environment._parse_text
    admission_thread: list[int] = []

    def parse_and_wait(text):
        if threading.get_ident() in admission_thread:
            inside.set()
            verb_done.wait(20)  # the verb's compile must not need us to finish first
        return parse(text)

    def admission() -> None:
        admission_thread.append(threading.get_ident())
        compile_program(f"taint.key == 'admission-{RUN}'")

    environment._parse_text = parse_and_wait
    try:
        thread = threading.Thread(target=admission)
        thread.start()
        assert inside.wait(20)
        compile_program(f"taint.value == 'verb-{RUN}'")  # with the lock held, this would wait 20 s
        finished_while_admission_parsed = not verb_done.is_set() and thread.is_alive()
        verb_done.set()
        thread.join()
    finally:
        environment._parse_text = parse
    assert finished_while_admission_parsed


def test_a_review_compiles_within_its_budget_and_warns_about_the_rest(monkeypatch):
    from extender.validation.rules import admission, compile_budget

    body = orjson.loads(cel_review_body(RUN + 100))
    compiles = Compiles()
    monkeypatch.setattr(rules, "compile_program", compiles)  # what the webhook compiles with
    with admission(), compile_budget():
        result = check_object({**body["request"]["object"], "kind": "Pod"}, P, FeatureGates())
    assert compiles.done == REVIEW_COMPILE_BYTES // (10 * 1024)  # 3 of the 6
    assert not result.errors
    unchecked = [w for w in result.warnings if "not checked at admission" in w]
    assert len(unchecked) == 6 - compiles.done


def test_a_review_past_its_deadline_is_answered_503(pki):
    """The API server then applies the webhook's failurePolicy, as if we had not answered."""
    listener = webhook_listener("127.0.0.1:0", ReloadingContext(pki["cert"], pki["key"]), P, FeatureGates(),
                                seconds=1e-6).start()
    try:
        status, _, answer = review(listener.port, pki["client"], cel_review_body(RUN + 200))
        assert status == 503 and "deadline" in answer["error"]
        assert review(listener.port, pki["client"], review_body())[0] == 200  # no CEL: nothing to wait for
    finally:
        listener.stop()


def test_compiling_reviews_move_to_their_own_lane(pki):
    from extender import metrics

    def moves() -> float:
        return metrics.CEL_LANE_MOVES_TOTAL.labels("pool", "expensive")._value.get()

    listener = webhook_listener("127.0.0.1:0", ReloadingContext(pki["cert"], pki["key"]), P, FeatureGates()).start()
    try:
        before = moves()
        status, _, answer = review(listener.port, pki["client"], cel_review_body(RUN + 300, lists=1))
        assert status == 200 and answer["response"]["allowed"] is True
        assert moves() == before + 1
        assert lane.POOL in listener.pools and lane.EXPENSIVE in listener.pools
    finally:
        listener.stop()
