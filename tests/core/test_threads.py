"""Pool workers share one engine between threads: cold per-snapshot memos, indexes
and the CEL cache filled concurrently must give the answers a single thread gives."""

from __future__ import annotations

import threading

import orjson
from conftest import EXAMPLES, example_pod, make_extender

from extender.api.wire import ExtenderArgs, decode_args
from extender.config import Config

PODS = [p.stem for p in sorted((EXAMPLES / "pods").glob("*.yaml"))]
NAMES = ["od-a1", "od-a2", "od-b1", "od-b2", "od-c1", "od-c2", "spot-a1", "spot-b1", "spot-c1", "dev-a1"]


def answers(ext, name: str) -> tuple:
    pod = example_pod(name)
    filtered = orjson.loads(ext.filter(ExtenderArgs(pod, None, NAMES)))
    scores = orjson.loads(ext.prioritize(ExtenderArgs(example_pod(name), None, filtered["NodeNames"])))
    return filtered, scores


def wire_answers(ext, name: str) -> tuple:
    """The server's path: shared candidate sets, templates and remembered answers."""
    pod = example_pod(name)
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": NAMES})
    filtered = orjson.loads(ext.filter(decode_args(body)))
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": filtered["NodeNames"]})
    return filtered, orjson.loads(ext.prioritize(decode_args(body)))


def test_concurrent_requests_on_cold_caches_match_sequential_answers(example_objects):
    # No in-flight waits: the 8 threads ask for pods of one namespace that are never
    # bound, and waiting for each other could use up the request deadline on a loaded
    # machine (an Error answer, correct but not what this test compares).
    config = Config(inflight_wait=0)
    expected = {name: answers(make_extender(example_objects, config), name) for name in PODS}
    shared = make_extender(example_objects, config)  # cold: every memo is filled under contention
    barrier = threading.Barrier(8)
    mismatches: list[str] = []
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            barrier.wait()
            for i in range(15 * len(PODS)):
                name = PODS[(i + offset) % len(PODS)]
                ask = wire_answers if (i + offset) % 2 else answers
                if ask(shared, name) != expected[name]:
                    mismatches.append(name)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert not mismatches, sorted(set(mismatches))
    assert all(not t.is_alive() for t in threads)
