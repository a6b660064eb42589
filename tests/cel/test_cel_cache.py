"""The shared CelCache: hits/misses/evictions, negative caching, single-flight compile,
result memo, metrics, and thread safety."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import extender.cel.cache as cache_module
from extender.cel import MAX_EXPRESSION_BYTES, CelCache, CelOutcome
from extender.metrics import (
    CEL_CACHE_EVICTIONS_TOTAL,
    CEL_CACHE_REQUESTS_TOTAL,
    CEL_EVALUATION_ERRORS_TOTAL,
    CEL_RESULT_MEMO_TOTAL,
)
from extender.model.objects import Taint

T1 = Taint("env.example.com/dev", "", "NoSchedule")
EXPR = "taint.key.startsWith('env.example.com/')"


def value(metric, **labels):
    m = metric.labels(**labels) if labels else metric
    return m._value.get()


def test_outcome_is_frozen():
    outcome = CelOutcome(True, "true", "")
    with pytest.raises(AttributeError):
        outcome.matched = False  # type: ignore[misc]


def test_hits_misses_and_stats():
    cache = CelCache()
    before_hit = value(CEL_CACHE_REQUESTS_TOTAL, result="hit")
    before_miss = value(CEL_CACHE_REQUESTS_TOTAL, result="miss")
    assert cache.evaluate(EXPR, T1) == CelOutcome(True, "true", "")
    assert cache.evaluate(EXPR, Taint("other", "", "NoSchedule")) == CelOutcome(False, "false", "")
    stats = cache.stats()
    assert stats == {"programs": 1, "hits": 1, "misses": 1, "evictions": 0, "memo_hits": 0,
                     "memo_misses": 2, "compiles": 1}
    assert value(CEL_CACHE_REQUESTS_TOTAL, result="hit") == before_hit + 1
    assert value(CEL_CACHE_REQUESTS_TOTAL, result="miss") == before_miss + 1


def test_evictions_are_counted():
    cache = CelCache(max_programs=2)
    before = value(CEL_CACHE_EVICTIONS_TOTAL)
    for i in range(5):
        assert cache.compile_error(f"taint.key == 'k{i}'") is None
    assert cache.stats()["programs"] == 2
    assert cache.stats()["evictions"] == 3
    assert value(CEL_CACHE_EVICTIONS_TOTAL) == before + 3
    # the most recent two are still cached
    cache.compile_error("taint.key == 'k4'")
    assert cache.stats()["compiles"] == 5


def test_compile_errors_are_negatively_cached():
    cache = CelCache(max_results=0)
    bad = "taint.key > 5"
    before = value(CEL_EVALUATION_ERRORS_TOTAL, reason="compile")
    for i in range(50):
        outcome = cache.evaluate(bad, Taint(f"k{i}", "", "NoSchedule"))
        assert outcome == CelOutcome(False, "compile", "found no matching overload for '_>_' "
                                     "applied to '(string, int)'")
    assert cache.stats()["compiles"] == 1
    assert cache.compile_error(bad) == outcome.message
    assert cache.stats()["compiles"] == 1
    assert value(CEL_EVALUATION_ERRORS_TOTAL, reason="compile") == before + 50


def test_compile_once_under_concurrent_misses(monkeypatch):
    calls = []
    real = cache_module.compile_program
    barrier = threading.Barrier(8)

    def slow_compile(expression):
        calls.append(expression)
        return real(expression)

    monkeypatch.setattr(cache_module, "compile_program", slow_compile)
    cache = CelCache(max_results=0)

    def worker(i):
        barrier.wait()
        return cache.evaluate(EXPR, Taint(f"env.example.com/{i}", "", "NoSchedule"))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(worker, range(8)))
    assert all(r.matched for r in results)
    assert calls == [EXPR]
    stats = cache.stats()
    assert (stats["misses"], stats["hits"], stats["compiles"]) == (1, 7, 1)


def test_memo():
    cache = CelCache()
    before = value(CEL_RESULT_MEMO_TOTAL, result="hit")
    first = cache.evaluate(EXPR, T1)
    again = cache.evaluate(EXPR, Taint(T1.key, T1.value, T1.effect))
    assert first is again
    assert cache.stats()["memo_hits"] == 1 and cache.stats()["hits"] == 0
    assert value(CEL_RESULT_MEMO_TOTAL, result="hit") == before + 1
    # the key includes value and effect
    cache.evaluate(EXPR, Taint(T1.key, "x", T1.effect))
    cache.evaluate(EXPR, Taint(T1.key, T1.value, "NoExecute"))
    assert cache.stats()["memo_misses"] == 3


def test_memo_is_bounded():
    cache = CelCache(max_results=3)
    for i in range(10):
        cache.evaluate(EXPR, Taint(f"k{i}", "", ""))
    cache.evaluate(EXPR, Taint("k0", "", ""))
    assert cache.stats()["memo_hits"] == 0
    cache.evaluate(EXPR, Taint("k9", "", ""))
    assert cache.stats()["memo_hits"] == 1


def test_errors_are_memoized_and_counted_by_reason():
    cache = CelCache()
    before = {r: value(CEL_EVALUATION_ERRORS_TOTAL, reason=r) for r in ("runtime", "non-bool")}
    t = Taint("k", "not-a-number", "")
    for _ in range(3):
        out = cache.evaluate("int(taint.value) > 3", t)
        assert out.kind == "runtime" and not out.matched
        assert "cannot parse 'not-a-number' as int" in out.message
    assert value(CEL_EVALUATION_ERRORS_TOTAL, reason="runtime") == before["runtime"] + 1
    out = cache.evaluate("dyn(taint.key)", t)
    assert (out.matched, out.kind) == (False, "non-bool")
    assert value(CEL_EVALUATION_ERRORS_TOTAL, reason="non-bool") == before["non-bool"] + 1


def test_cost_errors_are_counted():
    cache = CelCache(max_results=0, cost_limit=1000)
    before = value(CEL_EVALUATION_ERRORS_TOTAL, reason="cost")
    lst = "[" + ",".join(["0"] * 50) + "]"
    out = cache.evaluate(f"{lst}.all(a, {lst}.all(b, taint.key != ''))", T1)
    assert (out.matched, out.kind) == (False, "cost")
    assert value(CEL_EVALUATION_ERRORS_TOTAL, reason="cost") == before + 1


def test_thread_safety_hammer():
    """16 threads x 150 evaluations of one cached program with distinct taints, no memo."""
    cache = CelCache(max_results=0)
    expr = ("taint.key.startsWith('zone-') && "
            "semver(taint.value).isGreaterThan(semver('5.15.0')) && taint.effect != 'NoExecute'")
    assert cache.compile_error(expr) is None
    barrier = threading.Barrier(16)

    def expected(i, j):
        return (i + j) % 3 != 0 and j % 2 == 0 and (i * j) % 5 != 0

    def worker(i):
        barrier.wait()
        bad = []
        for j in range(150):
            key = f"zone-{i}-{j}" if (i + j) % 3 else f"rack-{i}-{j}"
            version = f"5.{16 + j}.0" if j % 2 == 0 else f"5.{j % 15}.0"
            effect = "NoSchedule" if (i * j) % 5 else "NoExecute"
            out = cache.evaluate(expr, Taint(key, version, effect))
            if out.matched != expected(i, j) or out.kind not in ("true", "false"):
                bad.append((i, j, out))
        return bad

    with ThreadPoolExecutor(16) as pool:
        failures = [b for bad in pool.map(worker, range(16)) for b in bad]
    assert failures == []
    assert cache.stats()["compiles"] == 1
    assert cache.stats()["hits"] == 16 * 150


@pytest.mark.parametrize("expression", [
    "taint.key == '" + "a" * MAX_EXPRESSION_BYTES + "'",
    "taint.key == '" + "é" * (MAX_EXPRESSION_BYTES // 2) + "'",  # few chars, many bytes
])
def test_an_over_limit_expression_is_an_error_and_never_a_cache_key(expression):
    cache = CelCache()
    message = f"expression exceeds the maximum length of {MAX_EXPRESSION_BYTES} bytes"
    assert cache.compile_error(expression) == message
    for _ in range(2):
        out = cache.evaluate(expression, T1)
        assert (out.matched, out.kind, out.message) == (False, "compile", message)
    assert all(expression not in (k if isinstance(k, str) else k[0])
               for k in [*cache._programs._data, *cache._memo._data])
    stats = cache.stats()
    assert (stats["programs"], stats["compiles"], stats["memo_misses"]) == (0, 0, 0)
