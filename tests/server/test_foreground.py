"""Scheduling first (`extender.request.foreground`, issue #48): while the verbs' loop is
at work, the side listener's queued requests and the drift report's sort wait for it
(bounded); health probes do not; the verbs' listener marks its loop and its pool threads
at work. Orders and states are asserted, never times: the waits under test are given a
bound no run reaches, so a request that should wait is seen waiting, then let go."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import orjson
import pytest
from conftest import EXAMPLES

from extender.config import Config
from extender.drift.tracker import SORT_RUN, YIELD_RUNS, sorted_in_runs
from extender.request import foreground
from extender.request.foreground import FOREGROUND, Foreground
from extender.server import listener as listener_module
from extender.server.app import create_app, serve
from extender.server.listener import LOOP_YIELD, Listener, Routes
from testing.harness import pod
from testing.live import NAMES, request

HANG_GUARD = 60.0  # seconds; only a broken gate waits this long, a slow machine never does


def eventually(condition) -> bool:
    pause = threading.Event()
    for _ in range(int(HANG_GUARD / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return False


class Loop:
    """A thread that marks `fg` at work until `leave()`."""

    def __init__(self, fg: Foreground) -> None:
        self.fg, self.entered, self.go = fg, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.entered.wait(HANG_GUARD)

    def _run(self) -> None:
        self.fg.enter()
        self.entered.set()
        self.go.wait(HANG_GUARD)
        self.fg.leave()

    def leave(self) -> None:
        self.go.set()
        self.thread.join(HANG_GUARD)


def in_thread(call) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def test_an_idle_foreground_lets_admin_work_go_at_once():
    fg = Foreground()
    assert fg.yield_to(HANG_GUARD) is True
    assert fg.waiting == 0 and not fg.working


def test_admin_work_waits_until_every_loop_at_work_leaves():
    fg = Foreground()
    first, second = Loop(fg), Loop(fg)
    thread, out = in_thread(lambda: fg.yield_to(HANG_GUARD))
    assert eventually(lambda: fg.waiting == 1)
    first.leave()
    assert fg.waiting == 1 and not out  # the other loop still works
    second.leave()
    thread.join(HANG_GUARD)
    assert out == [True] and fg.waiting == 0 and not fg.working


def test_a_busy_loop_delays_admin_work_by_the_bound_not_more():
    fg = Foreground()
    loop = Loop(fg)
    try:
        assert fg.yield_to(0.01) is False  # went on, the loop still at work
        assert fg.waiting == 0
    finally:
        loop.leave()


def test_the_loop_never_waits_for_itself():
    fg = Foreground()
    fg.enter()
    try:
        assert fg.yield_to(HANG_GUARD) is True  # the loop's own thread: at once
    finally:
        fg.leave()
    assert not fg.working


@pytest.fixture
def held_foreground(monkeypatch):
    """`FOREGROUND` marked at work by a thread of the test's (as the verbs' loop marks
    it), with checkpoints that wait as long as it is; `leave()` it to let them go."""
    monkeypatch.setattr(foreground, "MOST", HANG_GUARD)
    loop = Loop(FOREGROUND)
    yield loop
    loop.leave()


def test_the_side_listener_answers_probes_and_holds_reports_while_the_verbs_work(held_foreground):
    ran: list[str] = []

    def report():
        ran.append("report")
        return 200, "text/plain", b"report"

    listener = Listener("127.0.0.1:0", {"/healthz": lambda: (200, "text/plain", b"ok"), "/report": report}).start()
    try:
        thread, out = in_thread(lambda: request(listener.port, "GET", "/report"))
        assert eventually(lambda: FOREGROUND.waiting == 1), "the report did not wait for the verbs' loop"
        assert request(listener.port, "GET", "/healthz") == (200, b"ok")  # the probe did not wait
        assert not ran and not out
        held_foreground.leave()
        thread.join(HANG_GUARD)
        assert out == [(200, b"report")] and ran == ["report"]
    finally:
        listener.stop()


def test_the_side_loop_waits_for_the_verbs_at_most_its_bound_per_turn(monkeypatch):
    """Its events are its clients' (a probe's among them): however many a turn holds,
    the loop waits `LOOP_YIELD` in all, not per event."""
    clock = [100.0]
    waits: list[float] = []

    def waited(most=None):  # as if the verbs' loop stayed at work the whole bound
        waits.append(most)
        clock[0] += most
        return False

    monkeypatch.setattr(listener_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(FOREGROUND, "yield_to", waited)
    ran: list[int] = []
    events = [(SimpleNamespace(data=ran.append), mask) for mask in range(5)]
    side = Listener("127.0.0.1:0", {"/healthz": lambda: (200, "text/plain", b"ok")})
    loop = Loop(FOREGROUND)
    try:
        side._turn(events)
        assert ran == [0, 1, 2, 3, 4] and waits == [pytest.approx(LOOP_YIELD)]
        waits.clear()
        side._turn(events[:2])  # the next turn may wait again
        assert waits == [pytest.approx(LOOP_YIELD)]
    finally:
        loop.leave()
        side.close()
    verbs = Listener("127.0.0.1:0", app=Routes({"/x": lambda: (200, "text/plain", b"x")}), foreground=True)
    try:
        verbs._turn(events[:1])  # the verbs' loop never waits
        assert waits == [pytest.approx(LOOP_YIELD)] and not FOREGROUND.working
    finally:
        verbs.close()


def test_the_drift_reports_sort_waits_between_runs_and_sorts(held_foreground):
    keys = [(f"ns-{i % 7}", f"pod-{(i * 7919) % 10007}") for i in range(2 * YIELD_RUNS * SORT_RUN + 5)]
    thread, out = in_thread(lambda: sorted_in_runs(keys))
    assert eventually(lambda: FOREGROUND.waiting == 1)
    assert not out
    held_foreground.leave()
    thread.join(HANG_GUARD)
    assert out == [sorted(keys)]


@pytest.mark.parametrize("worker_class", ["inline", "pool"])
def test_the_verbs_listener_is_at_work_while_it_answers_a_filter(worker_class):
    config = Config(cluster=str(EXAMPLES / "cluster.yaml"), threads=2, worker_class=worker_class,
                    reload_interval=0)
    app = create_app(config)
    seen: list[bool] = []
    verb = app.engine.filter

    def watched(args):
        seen.append(threading.get_ident() in FOREGROUND.working)
        return verb(args)

    app.engine.filter = watched
    listener = serve(app, config, address="127.0.0.1:0").start()
    try:
        body = orjson.dumps({"Pod": pod("web", {"app": "web"}), "NodeNames": NAMES})
        code, answer = request(listener.port, "POST", "/filter", body)
        assert code == 200 and orjson.loads(answer)["NodeNames"]
        assert seen == [True]  # marked on the thread that answered it, loop or pool
        assert eventually(lambda: not FOREGROUND.working)  # and no longer once answered
    finally:
        listener.stop()
