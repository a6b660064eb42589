"""Compile work is bounded (issue #28 item 1): no expression escapes the length and
nesting limits, compiles take turns in their own lane, and the request deadline covers
them.

Deeply nested list literals used to take ~0.5 s at depth 100, ~5 s at 200 and 29.5 s at
~245 (the checker resolved each node's nested type at every level: cubic); a depth
beyond cel-go's 250 was refused at once.  The series below runs every nesting shape at
depths 100, 200, 245, 250 and 1,000: each either compiles or fails with the nesting
message, and none takes seconds of CPU (the "doesn't hang" bound counts the CPU time
of the compiling thread, which a busy machine does not stretch as it stretches the
clock; ``perf/cel_bench.py`` reports the real times).
"""

from __future__ import annotations

import threading
import time

import pytest

from extender.cel import CelCache
from extender.cel.environment import CompileError
from extender.cel.limits import COMPILE_SLOTS, MAX_EXPRESSION_BYTES, MAX_NESTING_DEPTH
from extender.cel.program import compile_program, run_program
from extender.model import Taint
from extender.request.deadline import DeadlineExceeded, request_deadline

SHAPES = {
    "list": lambda d: "[" * d + "1" + "]" * d + " != []",
    "map": lambda d: "{'a': " * d + "1" + "}" * d + " != {}",
    "parentheses": lambda d: "(" * d + "taint.key == 'k'" + ")" * d,
    "call": lambda d: "string(" * d + "'x'" + ")" * d + " == 'x'",
    "addition": lambda d: "+".join(["1"] * d) + " > 0",
    "macro": lambda d: "[1].all(x, " * d + "true" + ")" * d,
    "selection": lambda d: "{'a': " * (d // 2) + "1" + "}" * (d // 2) + ".a" * (d // 2) + " == 1",
}
DEPTHS = (100, 200, 245, 250, 1000)
NESTED = f"expression is nested too deeply (more than {MAX_NESTING_DEPTH} levels)"
HANG = 5.0  # CPU seconds: "doesn't hang", not a benchmark (the cubic checker took 29.5)


def compile_outcome(expression: str) -> str:
    try:
        program = compile_program(expression)
    except CompileError as exc:
        return str(exc)
    return run_program(program, "k", "", "NoSchedule")[0]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_depth_series_compiles_in_bounded_time_or_fails_clearly(shape):
    outcomes = {}
    for depth in DEPTHS:
        expression = SHAPES[shape](depth)
        started = time.thread_time()
        outcomes[depth] = compile_outcome(expression)
        assert time.thread_time() - started < HANG, (shape, depth)
    assert outcomes[100] == "true"
    too_long = f"expression exceeds the maximum length of {MAX_EXPRESSION_BYTES} bytes"
    assert outcomes[1000] in (NESTED, too_long)
    for depth in (200, 245, 250):  # cel-go's limits count some shapes' levels twice
        assert outcomes[depth] in ("true", NESTED)


def test_the_deepest_list_allowed_compiles_and_evaluates():
    depth = MAX_NESTING_DEPTH - 1  # the root expression is one ``expr`` level (as cel-go)
    assert compile_outcome(SHAPES["list"](depth)) == "true"
    assert compile_outcome(SHAPES["list"](depth + 1)) == NESTED


def test_compiles_take_turns_within_the_request_deadline(deadline_clock):
    """COMPILE_SLOTS compiles at once; another waits for a slot within its deadline and
    gives up with DeadlineExceeded (not cached: the retry compiles); a compiled
    expression is evaluated meanwhile without waiting."""
    cache = CelCache()
    taint = Taint("k", "", "NoSchedule")
    assert cache.evaluate("taint.key == 'k'", taint).matched  # compiled before
    for _ in range(COMPILE_SLOTS):  # every compile slot taken
        assert cache._compiling.acquire(timeout=1)
    try:
        with request_deadline(0.05), pytest.raises(DeadlineExceeded):
            cache.evaluate("taint.key == 'z'", taint)
        # in time however busy the machine; a wait for a compile slot would still time out
        with request_deadline(0.05), deadline_clock.stopped():
            assert cache.evaluate("taint.key == 'k'", Taint("k", "v", "NoSchedule")).matched
    finally:
        for _ in range(COMPILE_SLOTS):
            cache._compiling.release()
    assert cache.compile_error("taint.key == 'z'") is None  # nothing wrong was cached


def test_an_expired_deadline_stops_a_compile_between_its_phases():
    cache = CelCache()
    deep = SHAPES["map"](200)
    with request_deadline(0.001):
        time.sleep(0.01)
        with pytest.raises(DeadlineExceeded):
            cache.evaluate(deep, Taint("k", "", "NoSchedule"))
    assert cache.stats()["programs"] == 0


def test_distinct_deep_expressions_from_many_threads_all_finish():
    """Six distinct ~490-character expressions at once (the attack that took 29.5 s
    each): all compile, in turns, well within the hang bound."""
    cache = CelCache()
    results: list[str] = []

    def work(i: int) -> None:
        expression = "[" * 240 + str(i) + "]" * 240 + " != []"
        results.append(cache.evaluate(expression, Taint("k", "", "NoSchedule")).kind)

    started = time.process_time()  # CPU of every thread: load does not stretch it
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["true"] * 6
    assert time.process_time() - started < 6 * HANG
