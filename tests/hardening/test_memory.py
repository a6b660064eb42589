"""Every cache is bounded in bytes: 50,000 distinct hostile keys per cache leave it
under its share of `--memory-limit-bytes`, over-limit inputs are never stored, and the
memory Python actually holds (tracemalloc) stays under the ceiling.

Compiling a CEL program is the slow key (~0.4 ms): `make test` compiles 2,000, eleven
times what the programs' share holds (170), which crosses the bound as often as the
bound can be crossed; `make test-long` (CI) compiles the 50,000."""

from __future__ import annotations

import gc
import sys
import tracemalloc

import orjson
import pytest
from conftest import example_pod, make_extender

from extender import caching
from extender.api.wire import decode_args, known_names_cache
from extender.caching import ByteLRU, memoized, memory_share
from extender.cel import CelCache
from extender.cel.limits import MAX_EXPRESSION_BYTES
from extender.config import Config
from extender.model.objects import Taint

LIMIT = 16 << 20  # the smallest --memory-limit-bytes: caches fill and evict quickly
KEYS = 50_000


@pytest.fixture(autouse=True)
def small_limit():
    caching.set_memory_limit(LIMIT)
    yield
    caching.set_memory_limit(caching.DEFAULT_MEMORY_LIMIT)


def fill(cache: ByteLRU, add, count: int = KEYS) -> None:
    for i in range(count):
        add(i)
        if i % 100 == 0:
            assert cache.bytes <= cache.max_bytes, (cache.name, i, cache.bytes)
    assert 0 < cache.bytes <= cache.max_bytes == memory_share(cache.name)
    assert len(cache) * 10 <= count, (cache.name, len(cache))  # the keys overflowed it 10 times


def test_byte_lru_evicts_least_recently_used_and_refuses_oversized_items():
    cache = ByteLRU("answers", max_bytes=100, max_item_bytes=60)
    assert cache.put("a", 1, 40) and cache.put("b", 2, 40)
    assert cache.get("a") == 1  # now "b" is the oldest
    assert cache.put("c", 3, 40)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    assert cache.bytes == 80
    assert not cache.put("big", 4, 61) and cache.get("big") is None
    assert cache.put("a", 5, 10) and cache.bytes == 50  # replacing re-charges
    cache.clear()
    assert cache.bytes == 0 and len(cache) == 0


def test_cache_bytes_metric_follows_the_caches():
    from prometheus_client import REGISTRY

    def gauge() -> float:
        return REGISTRY.get_sample_value("extender_cache_bytes", {"cache": "parsed-pods"}) or 0.0

    gc.collect()  # caches of engines earlier tests dropped must not go during this test
    before = gauge()
    cache = ByteLRU("parsed-pods", max_bytes=1000)
    cache.put("k", "v", 300)
    assert gauge() == before + 300
    del cache
    gc.collect()
    assert gauge() == before  # a dropped (per-snapshot) cache no longer counts


def test_the_unaccounted_variants_are_bounded_but_not_exported():
    """`accounted=False` is bounded in bytes, `counted` in entries; neither moves
    extender_cache_bytes (what they hold is not a share of --memory-limit-bytes)."""
    before = dict(caching._totals)
    sized = ByteLRU("parsed-pods", max_bytes=100, accounted=False)
    assert sized.put("a", 1, 60) and sized.put("b", 2, 60)
    assert (sized.get("a"), sized.get("b"), sized.bytes) == (None, 2, 60)
    assert not sized.put("big", 3, 101)
    counted = ByteLRU.counted("memo", 2)
    for key in "abc":
        counted.put(key, key.upper())
    assert [k for k, _, _ in counted.entries()] == ["b", "c"] and counted.bytes == 0
    assert caching._totals == before


def test_a_copy_keeps_the_entries_and_is_independent():
    cache = ByteLRU.counted("memo", 3)
    for key in "abc":
        cache.put(key, key.upper())
    copy = cache.copy()
    assert copy.entries() == cache.entries() == [("a", "A", 0), ("b", "B", 0), ("c", "C", 0)]
    copy.put("d", "D")
    assert cache.get("a") == "A" and copy.get("a") is None  # the copy evicted its own oldest
    assert cache.get("d") is None and len(cache) == len(copy) == 3
    accounted = ByteLRU("parsed-pods", max_bytes=1000)
    accounted.put("k", "v", 300)
    twin = accounted.copy()
    assert twin.bytes == 300 and twin.get("k") == "v"


def test_a_first_in_first_out_cache_keeps_the_newest_and_a_hit_does_not_refresh():
    """`recency=False` (CEL's parser memo): a hit is a plain read, so the oldest stored
    goes first even if it was just read; only count-bounded, unaccounted caches."""
    evicted = []
    fifo = ByteLRU("memo", max_bytes=sys.maxsize, max_entries=2, accounted=False, recency=False,
                   on_evict=evicted.append)
    fifo.put("a", "A")
    fifo.put("b", "B")
    assert fifo.get("a") == "A"  # read, but not moved to the back
    fifo.put("c", "C")
    assert (fifo.get("a"), fifo.get("b"), fifo.get("c"), evicted) == (None, "B", "C", [1])
    assert [k for k, _, _ in fifo.copy().entries()] == ["b", "c"]
    with pytest.raises(ValueError, match="bounded by its count"):
        ByteLRU("memo", max_bytes=100, recency=False)


def test_get_or_build_never_keeps_none_and_a_reset_lock_is_free():
    cache = ByteLRU.counted("memo", 4)
    calls = []
    assert cache.get_or_build("k", lambda: calls.append(1)) is None
    assert cache.get_or_build("k", lambda: calls.append(1)) is None
    assert calls == [1, 1] and len(cache) == 0
    cache._lock.acquire()  # as a thread of the parent may hold it when a worker forks
    cache.reset_lock()
    assert cache.get_or_build("k", lambda: "v") == "v" == cache.get("k")


@pytest.mark.parametrize("keys", [2000, pytest.param(KEYS, marks=pytest.mark.long)])
def test_cel_program_cache(keys):
    cel = CelCache(max_programs=10**9)
    fill(cel._programs, lambda i: cel.compile_error(f"taint.value == 'v{i}' || taint.key.endsWith('{i}')"),
         keys)


def test_cel_programs_over_the_length_limit_are_errors_never_keys():
    cel = CelCache()
    for i in range(200):
        expression = f"taint.key == '{i}' || " + "x" * MAX_EXPRESSION_BYTES
        assert "exceeds the maximum length" in cel.compile_error(expression)
        assert cel.evaluate(expression, Taint("k", "v", "NoSchedule")).kind == "compile"
    assert len(cel._programs) == 0 and len(cel._memo) == 0 and cel._programs.bytes == 0


def test_cel_result_memo():
    cel = CelCache(max_results=10**9)
    fill(cel._memo, lambda i: cel.evaluate("taint.value.startsWith('a')",
                                           Taint("k" * 200, f"v{i}" + "y" * 200, "NoSchedule")))


def test_parsed_pods(example_extender):
    engine = make_extender([], Config(memory_limit_bytes=LIMIT))
    pod = example_pod("sla-gt")
    fill(engine._parsed, lambda i: engine.parse_pod(pod, b"%d" % i + b"x" * 4000))


def test_node_names_arrays():
    from extender.api import wire

    wire.known_names_cache.reset()  # the process-wide cache, created again at the test's limit
    try:
        cache = known_names_cache()
        pod = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": None})[:-1]
        fill(cache, lambda i: decode_args(pod + b',"NodeNames":["n%d",' % i + b'"x",' * 300 + b'"y"]}'))
        big = pod + b',"NodeNames":[' + b'"abcdefgh",' * 500_000 + b'"z"]}'  # > 4 MiB of names
        assert len(decode_args(big).node_names) == 500_001
        assert len(cache._data) <= cache.max_entries
        assert all(len(key) <= 4 << 20 for key in cache._data)
    finally:
        wire.known_names_cache.reset()


def test_candidate_sets(example_objects):
    engine = make_extender(example_objects, Config(memory_limit_bytes=LIMIT))
    snapshot = engine.source.snapshot()
    names = sorted(snapshot.nodes.by_name)
    pod = orjson.dumps({"Pod": example_pod("sla-gt"), "Nodes": None})[:-1]
    for i in range(2000):  # each distinct list: a candidate set
        subset = names[: 1 + i % len(names)] + [names[0]] * (i % 3)
        body = pod + b',"NodeNames":' + orjson.dumps(subset) + b" " * (i // 10) + b"}"
        engine.filter(decode_args(body))
    candidates = snapshot.nodes._candidates
    assert 0 < candidates.bytes <= candidates.max_bytes
    longer = names * 3  # longer than the cluster: never a candidate-set key
    body = pod + b',"NodeNames":' + orjson.dumps(longer) + b"}"
    before = len(candidates)
    engine.filter(decode_args(body))
    assert orjson.dumps(longer) not in candidates._data and len(candidates) <= before


def test_compiled_node_selectors():
    from extender.matching import nodeselector
    from extender.model import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

    nodeselector.compiled_selectors.reset()  # created again at the test's limit
    try:
        def add(i: int) -> None:
            req = NodeSelectorRequirement("zone", "In", (f"z{i}", "y" * 500))
            nodeselector.compile_selector(NodeSelector((NodeSelectorTerm((req,)),)))

        add(0)
        fill(nodeselector.compiled_selectors(), add)
    finally:
        nodeselector.compiled_selectors.reset()


def test_memoized_skips_long_arguments_and_remembers_none():
    calls = []

    @memoized(max_bytes=1000, max_chars=10)
    def length(s: str) -> int | None:
        calls.append(s)
        return len(s) or None

    assert length("abc") == length("abc") == 3 and calls == ["abc"]
    assert length("") is length("") is None and calls == ["abc", ""]
    assert length("x" * 11) == length("x" * 11) == 11 and len(calls) == 4
    assert len(length.cache) == 2 and length.cache.bytes <= 1000


def test_held_memory_stays_under_the_ceiling(example_objects):
    """What Python really allocates (tracemalloc) while every cache takes hostile keys."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        engine = make_extender(example_objects, Config(memory_limit_bytes=LIMIT))
        pod = example_pod("sla-gt")
        for i in range(3000):  # each cache overflowed: 3,000 > 2,046 results, 49 pods, 64 name lists
            if i < 1000:  # 170 programs fill theirs; a compile is the slow step under tracemalloc
                engine.cel.compile_error(f"taint.value == 'v{i}' || taint.key.endsWith('{i}')")
            engine.cel.evaluate("taint.key == 'a'", Taint("k" * 300, f"{i}" + "v" * 300, ""))
            engine.parse_pod(pod, b"%d" % i + b"x" * 8000)
            decode_args(b'{"Pod":{},"NodeNames":["%d",' % i + b'"x",' * 1000 + b'"y"]}')
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert held < LIMIT, f"{held} bytes held, ceiling {LIMIT}"
    # every cache was full and evicting, so what is held is each one's whole share
    assert len(engine.cel._programs) < 1000 and len(engine.cel._memo) < 3000 and len(engine._parsed) < 3000
