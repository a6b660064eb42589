"""Binds have a lane of their own in the served extender (issue #22): with more binds in
flight than `--threads`, an unrelated pod's filter is answered at once, not after the
binds ahead of it in a shared pool. The binds are held (the engine's `bind` waits until
the test lets it go), so the verdict is an order, not a time: every bind is being served
at once, more of them than the pool has threads, and the filter is answered while all
of them still are. A bind queued in the filter's pool would never let that happen."""

from __future__ import annotations

import threading

import orjson
import pytest
from conftest import EXAMPLES

from extender.config import Config
from extender.server.app import create_app, serve
from testing.harness import pod
from testing.live import NAMES, request

BINDS = 24
HANG_GUARD = 120.0  # seconds; only a broken lane waits this long, a slow machine never does


@pytest.mark.parametrize("worker_class", ["inline", "pool"])
def test_an_unrelated_filter_is_not_queued_behind_slow_binds(worker_class):
    config = Config(cluster=str(EXAMPLES / "cluster.yaml"), threads=4, worker_class=worker_class,
                    reload_interval=0)
    app = create_app(config)
    held = threading.Condition()
    inside = [0]  # binds being served now
    release = threading.Event()
    bind = app.engine.bind

    def held_bind(args):
        with held:
            inside[0] += 1
            held.notify_all()
        assert release.wait(HANG_GUARD)
        return bind(args)

    app.engine.bind = held_bind
    listener = serve(app, config, address="127.0.0.1:0").start()
    other = orjson.dumps({"Pod": pod("other", {"app": "db"}, namespace="elsewhere"), "NodeNames": NAMES})
    codes: list[int] = []
    threads = [threading.Thread(target=lambda i=i: codes.append(request(listener.port, "POST", "/bind", orjson.dumps(
        {"PodName": f"w{i}", "PodNamespace": "default", "PodUID": "", "Node": NAMES[i % 3]}))[0]))
        for i in range(BINDS)]
    try:
        code, alone = request(listener.port, "POST", "/filter", other)
        assert code == 200 and orjson.loads(alone)["NodeNames"]
        for t in threads:
            t.start()
        with held:
            assert held.wait_for(lambda: inside[0] == BINDS, HANG_GUARD), \
                f"only {inside[0]} of {BINDS} binds served at once (--threads 4): binds share a pool"
        code, body = request(listener.port, "POST", "/filter", other)
        assert code == 200 and body == alone
        assert inside[0] == BINDS and not release.is_set()  # answered while every bind was held
    finally:
        release.set()
        for t in threads:
            t.join(HANG_GUARD)
        listener.stop()
    assert codes == [200] * BINDS
