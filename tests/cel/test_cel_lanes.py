"""Lanes (`extender.request.lane`): which CEL work a server thread may start, decided before
any of it runs, from the program cache and the memo; a redirected request leaves
nothing wrong behind and the verdict never depends on the lane."""

import time

import pytest

from extender.cel import CelCache
from extender.model.objects import Taint
from extender.request import deadline, lane
from extender.request.lane import EXPENSIVE_COST, LOOP_COST

TAINT = Taint("env.example.com/dev", "x", "NoSchedule")
CHEAP = "taint.key.startsWith('env.example.com/')"


def nested(n: int) -> str:
    items = ",".join(["0"] * n)
    return f"[{items}].all(a, [{items}].all(b, taint.key != 'x'))"


MIDDLE = nested(20)  # 2,691 units: too costly for the loop, not expensive
EXPENSIVE = nested(100)  # 61,411 units


def test_the_example_programs_sit_where_the_tests_need_them():
    cache = CelCache()
    costs = [cache._get_or_compile(e).estimated_cost for e in (CHEAP, MIDDLE, EXPENSIVE)]
    assert costs[0] < LOOP_COST <= costs[1] < EXPENSIVE_COST <= costs[2]


@pytest.mark.parametrize(("cost", "where"), [
    (None, lane.POOL), (0, lane.LOOP), (LOOP_COST - 1, lane.LOOP), (LOOP_COST, lane.POOL),
    (EXPENSIVE_COST - 1, lane.POOL), (EXPENSIVE_COST, lane.EXPENSIVE)])
def test_the_lane_a_program_needs(cost, where):
    assert lane.needed(cost) == where


def redirected(cache: CelCache, expression: str, where: int) -> int | None:
    """The lane `evaluate` asks for when run in `where` (None: it answered)."""
    with lane.running_in(where):
        try:
            cache.evaluate(expression, TAINT)
        except lane.NeedsCostlierLane as moved:
            return moved.lane
    return None


def test_the_loop_never_compiles_and_never_runs_costly_programs():
    cache = CelCache()
    assert redirected(cache, CHEAP, lane.LOOP) == lane.POOL  # not compiled yet
    assert cache.stats()["compiles"] == 0
    assert redirected(cache, CHEAP, lane.POOL) is None  # compiled and answered there
    assert redirected(cache, CHEAP, lane.LOOP) is None  # memoised
    assert redirected(cache, CHEAP, lane.LOOP) is None
    cache.evaluate(MIDDLE, Taint("other", "", "NoSchedule"))  # compiled, other taint memoised
    assert redirected(cache, MIDDLE, lane.LOOP) == lane.POOL
    assert redirected(cache, MIDDLE, lane.POOL) is None


def test_a_pool_thread_compiles_but_leaves_expensive_runs_to_the_expensive_lane():
    cache = CelCache()
    assert redirected(cache, EXPENSIVE, lane.POOL) == lane.EXPENSIVE
    assert cache.stats()["compiles"] == 1  # the compile is kept: the next lane reuses it
    assert redirected(cache, EXPENSIVE, lane.LOOP) == lane.EXPENSIVE
    assert redirected(cache, EXPENSIVE, lane.EXPENSIVE) is None
    assert redirected(cache, EXPENSIVE, lane.LOOP) is None  # memoised: cheap anywhere
    assert cache.stats()["compiles"] == 1


def test_a_redirect_memoises_nothing_and_the_verdict_does_not_depend_on_the_lane():
    alone = CelCache()
    expected = {e: alone.evaluate(e, TAINT) for e in (CHEAP, MIDDLE, EXPENSIVE)}
    cache = CelCache()
    for expression in (CHEAP, MIDDLE, EXPENSIVE):
        where = lane.LOOP
        while (moved := redirected(cache, expression, where)) is not None:
            assert moved > where  # always onwards: never a loop between lanes
            where = moved
        assert cache.evaluate(expression, TAINT) == expected[expression]
    assert cache.stats()["memo_hits"] == 3  # one memoised outcome each, none from a redirect


def test_a_lane_budget_is_per_request_and_a_request_moves_on_when_it_is_spent():
    cache = CelCache()
    rack = "taint.key.matches('^zone-a[12]-rack-[0-9]+$')"  # ~200 units
    cost = cache._get_or_compile(rack).estimated_cost
    fit = -(-LOOP_COST // cost) - 1  # how many fit below the loop's budget
    taints = [Taint(f"zone-a1-rack-{i}", "", "NoSchedule") for i in range(fit + 1)]
    with lane.running_in(lane.LOOP):
        for taint in taints[:fit]:
            assert cache.evaluate(rack, taint).matched
        with pytest.raises(lane.NeedsCostlierLane) as moved:
            cache.evaluate(rack, taints[fit])
    assert moved.value.lane == lane.POOL
    with lane.running_in(lane.LOOP):  # a retry: memoised answers are free, fresh budget
        assert all(cache.evaluate(rack, taint).matched for taint in taints)
    # mid-cost programs: a pool thread spends at most EXPENSIVE_COST units per request
    middle = cache._get_or_compile(MIDDLE).estimated_cost
    fit = -(-EXPENSIVE_COST // middle) - 1
    with lane.running_in(lane.POOL):
        for i in range(fit):
            cache.evaluate(MIDDLE, Taint(f"k{i}", "", "NoSchedule"))
        with pytest.raises(lane.NeedsCostlierLane) as moved:
            cache.evaluate(MIDDLE, Taint(f"k{fit}", "", "NoSchedule"))
    assert moved.value.lane == lane.EXPENSIVE


def test_compile_errors_are_cheap_once_known():
    cache = CelCache()
    assert redirected(cache, "taint.nope", lane.POOL) is None
    assert redirected(cache, "taint.nope", lane.LOOP) is None
    assert cache.evaluate("taint.nope", TAINT).kind == "compile"


def test_outside_a_server_lane_nothing_is_redirected():
    assert not lane.restricted()
    assert CelCache().evaluate(EXPENSIVE, TAINT).matched


def test_the_deadline_counts_from_the_arrival():
    with deadline.arrived(time.monotonic() - 10), deadline.request_deadline(4):
        assert deadline.remaining() == 0
        with pytest.raises(deadline.DeadlineExceeded):
            deadline.check()
    arrived = time.monotonic()
    with deadline.arrived(arrived), deadline.request_deadline(4):
        assert deadline.current() == pytest.approx(arrived + 4)
    with deadline.request_deadline(4):  # no arrival known: from now
        assert deadline.remaining() > 3


def test_moves_are_counted_by_lane():
    from prometheus_client import REGISTRY

    def moves(src: str, dst: str) -> float:
        return REGISTRY.get_sample_value("extender_cel_lane_moves_total",
                                         {"from_lane": src, "to_lane": dst}) or 0.0

    before = {pair: moves(*pair) for pair in (("loop", "pool"), ("pool", "expensive"), ("loop", "expensive"))}
    cache = CelCache()
    assert redirected(cache, EXPENSIVE, lane.LOOP) == lane.POOL  # not compiled yet
    assert redirected(cache, EXPENSIVE, lane.POOL) == lane.EXPENSIVE
    assert redirected(cache, EXPENSIVE, lane.LOOP) == lane.EXPENSIVE  # compiled now
    assert redirected(cache, EXPENSIVE, lane.EXPENSIVE) is None
    assert moves("loop", "pool") == before[("loop", "pool")] + 1
    assert moves("pool", "expensive") == before[("pool", "expensive")] + 1
    assert moves("loop", "expensive") == before[("loop", "expensive")] + 1
