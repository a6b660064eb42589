"""The serving process freezes the cluster state out of the cyclic collector's full
passes after the initial sync (`extender.state.gcfreeze`); this is safe only because the
state holds no reference cycles, so what an event replaces is still freed by
reference counting. These tests pin both halves."""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import EXAMPLES

from extender.state import Reads, Store, load_objects
from extender.state.gcfreeze import freeze_state
from testing.apiserver import FakeApiServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "state"))
from live_truth import start_live  # noqa: E402


@pytest.fixture
def unfreeze():
    yield
    gc.unfreeze()


def node(name: str, zone: str, taint: str = "") -> dict:
    spec = {"taints": [{"key": taint, "effect": "NoSchedule"}]} if taint else {}
    return {"kind": "Node", "metadata": {"name": name, "labels": {"zone": zone}}, "spec": spec}


def pod(name: str, node_name: str, app: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": {"app": app}},
            "spec": {"nodeName": node_name}, "status": {"phase": "Running"}}


def test_live_source_freezes_once_synced(tmp_path, unfreeze):
    gc.unfreeze()
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.load(load_objects(EXAMPLES / "cluster.yaml"))
        source = start_live(api, tmp_path, freeze_after_sync=True)
        try:
            assert source.wait_synced(20), source.readiness()
            deadline = time.monotonic() + 30
            while gc.get_freeze_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert gc.get_freeze_count() > 0, "the state was not frozen after the initial sync"
        finally:
            source.stop()


def test_live_source_does_not_freeze_unless_asked(tmp_path, unfreeze):
    gc.unfreeze()
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.load(load_objects(EXAMPLES / "cluster.yaml"))
        source = start_live(api, tmp_path)
        try:
            assert source.wait_synced(20), source.readiness()
            time.sleep(0.2)
            assert gc.get_freeze_count() == 0
        finally:
            source.stop()


def test_frozen_state_is_freed_by_reference_counting_under_churn(unfreeze):
    """Frozen, with the cyclic collector off: thousands of pod and node events with
    readers in between leave allocated memory flat (replaced frozen objects are freed
    by their reference counts, none waits for a collection that will not come)."""
    s = Store()
    for i in range(50):
        s.upsert("Node", node(f"n{i}", "abc"[i % 3]))
    for i in range(500):
        s.upsert("Pod", pod(f"p{i}", f"n{i % 50}", f"a{i % 7}"))
    s.snapshot()

    def churn(rounds: int) -> None:
        for r in range(rounds):
            i = r % 500
            s.delete("Pod", "ns", f"p{i}")
            s.upsert("Pod", pod(f"p{i}", f"n{(i + r) % 50}", f"a{r % 7}"))
            if r % 50 == 0:
                s.upsert("Node", node(f"n{r % 50}", "abc"[r % 3], taint=str(r % 3)))
            s.snapshot().memo(("k", r % 5), lambda: frozenset(range(100)), Reads.NODES)

    churn(2_000)
    freeze_state("test")
    assert gc.get_freeze_count() > 0
    gc.disable()
    tracemalloc.start()
    try:
        churn(2_000)
        first = tracemalloc.get_traced_memory()[0]
        churn(10_000)
        second = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert second - first < 200_000, (first, second)


# ---- the C heap after large requests ------------------------------------------------------

FRAGMENTED = """
import sys, threading, psutil
from extender.state import gcfreeze
kept = []
def work():  # 80 MB of malloc'ed blocks (over pymalloc's 512 bytes) in a thread's arena
    blocks = [bytes(2000) + bytes([i & 255]) for i in range(40_000)]
    kept.extend(blocks[::64])  # one in 64 stays: freed blocks lie between live ones
t = threading.Thread(target=work)
t.start()
t.join()
before = psutil.Process().memory_info().rss
trimmed = gcfreeze.trim_heap()
print(trimmed, before, psutil.Process().memory_info().rss)
"""


def test_trim_heap_gives_a_fragmented_arena_back():
    """What a large request leaves: most of its blocks freed, a few kept, all in a
    worker thread's arena. glibc keeps those pages until `malloc_trim`."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", FRAGMENTED], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    trimmed, before, after = out[0] == "True", int(out[1]), int(out[2])
    assert trimmed  # glibc: the CI machine's and the image's C library
    assert before - after > 30 << 20, f"RSS {before >> 20} -> {after >> 20} MiB"


def test_the_heap_is_trimmed_once_the_last_pause_ends(monkeypatch):
    """Large requests in several threads nest their pauses: the heap is trimmed when the
    last one ends (also when it ends with an error), not inside a pause."""
    from extender.state import gcfreeze

    trims = []
    monkeypatch.setattr(gcfreeze, "trim_heap", lambda: trims.append(gcfreeze._pausers))
    with gcfreeze.collector_paused():
        with gcfreeze.collector_paused():
            pass
        assert trims == []
    assert trims == [0]
    with pytest.raises(RuntimeError), gcfreeze.collector_paused():
        raise RuntimeError("the request failed")
    assert trims == [0, 0]


def test_the_heap_is_trimmed_once_the_listeners_let_go_of_large_bodies(monkeypatch):
    """A large body released (stalled, refused or answered) trims the heap once no
    listener holds any request bytes; small requests alone never do."""
    from extender.server import inflight_bytes
    from extender.state import gcfreeze

    trims = []
    monkeypatch.setattr(gcfreeze, "trim_heap", lambda: trims.append(inflight_bytes._export()))
    monkeypatch.setattr(inflight_bytes, "_untrimmed", [0])
    verbs, webhook = inflight_bytes.InflightBytes(64 << 20, name="verbs-test"), inflight_bytes.InflightBytes(16 << 20, name="hook-test")
    small = 200 << 10
    for _ in range(20):  # ordinary traffic: 4 MB in all, but every request small
        assert verbs.acquire(small, small)
        verbs.release(small)
    assert trims == []
    large = 7 << 20
    assert verbs.acquire(large, large) and webhook.acquire(small, small)
    verbs.release(large)
    assert trims == []  # the webhook still holds a request
    webhook.release(small)
    assert trims == [0]
    assert verbs.acquire(small, small)
    verbs.release(small)
    assert trims == [0]  # once per large release, not on every idle moment after it
