"""Where a request's CEL work may run: the worker's event loop, a pool thread, or the
expensive lane.

The verbs' listener (`extender.server.listener`, `--worker-class inline`) answers
complete small requests on its event loop, the thread that also reads every other
client's request. CEL evaluation there must stay
cheap: one pod whose toleration runs for seconds would make every other request wait
for it. So the server runs each request *in a lane* (a ``ContextVar``, set by the
listener around one answer) and the CEL cache checks, before it compiles or evaluates
anything that is not memoised, whether the lane allows it (`admit`):

* ``LOOP``: only programs already compiled, estimated below ``LOOP_COST`` together;
* ``POOL``: also compiling, and programs estimated below ``EXPENSIVE_COST`` together;
* ``EXPENSIVE``: anything (also the default outside a server: `explain`, tests, the
  webhook).

"Together": a lane's cost allowance (`COST_PER_REQUEST`) is for all of one request's
evaluations that are not memoised (the sum of their estimates), so neither many cheap evaluations (a new
expression over hundreds of distinct taints) nor many mid-cost ones keep a thread for
long; the request moves on when the next one would exceed it. Estimates, not clocks,
decide, so where a request runs does not depend on load either.

A request that needs more than its lane allows raises `NeedsCostlierLane` (a ``BaseException``,
so no ``except Exception`` on the way turns it into an answer) before any of that work
starts; the listener then answers the whole request again in the lane named (see
`extender.server.app`). Nothing is lost: outcomes computed before are memoised, and
a verdict never depends on the lane (the cost limit is the same everywhere), only where
the work runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from extender import metrics

#: Programs estimated below this many units may run on a server worker's event loop: at
#: the evaluator's slowest rate they take a few milliseconds, which the loop's other
#: clients do not notice (perf/PERFORMANCE.md has the rate). Costlier ones, and any
#: expression not compiled yet (compiling a long expression costs far more than running
#: it), run on a pool thread, and those at ``EXPENSIVE_COST`` or more in the expensive lane.
LOOP_COST = 2_000
#: Programs estimated at this many units or more are "expensive" (long enough to hold a
#: pool thread that other requests need): they run in the expensive lane, and at most ``extender.cel.limits.EXPENSIVE_SLOTS`` of their
#: evaluations at once per process.
EXPENSIVE_COST = 50_000

LOOP, POOL, EXPENSIVE = 0, 1, 2
NAMES = {LOOP: "loop", POOL: "pool", EXPENSIVE: "expensive"}

_LANE: ContextVar[int] = ContextVar("extender_cel_lane", default=EXPENSIVE)
_SPENT: ContextVar[list[int]] = ContextVar("extender_cel_lane_spent")  # [units]
#: the summed estimates one request may run in a lane before it moves to the next
COST_PER_REQUEST = {LOOP: LOOP_COST, POOL: EXPENSIVE_COST}


class NeedsCostlierLane(BaseException):  # noqa: N818 - a redirection, not an error
    """This request needs a costlier lane than the one it runs in (`lane`)."""

    def __init__(self, lane: int) -> None:
        super().__init__(f"CEL work needs the {NAMES[lane]} lane")
        self.lane = lane


@contextmanager
def running_in(lane: int) -> Iterator[None]:
    """Run the block (one request's answer) in `lane`, none of its cost allowance spent."""
    token, spent = _LANE.set(lane), _SPENT.set([0])
    try:
        yield
    finally:
        _LANE.reset(token)
        _SPENT.reset(spent)


def current() -> int:
    """The lane the current request runs in."""
    return _LANE.get()


def move(lane: int) -> NeedsCostlierLane:
    """The `NeedsCostlierLane` that moves the current request to `lane`, counted."""
    metrics.child(metrics.CEL_LANE_MOVES_TOTAL, NAMES[_LANE.get()], NAMES[lane]).inc()
    return NeedsCostlierLane(lane)


def on_loop() -> bool:
    """Whether the current request is answered on an event loop (which must not block)."""
    return _LANE.get() == LOOP


def restricted() -> bool:
    """Whether the current lane limits anything (cheap to ask before a lookup)."""
    return _LANE.get() != EXPENSIVE


def needed(estimated_cost: int | None) -> int:
    """The lane a program needs; None: not compiled yet."""
    if estimated_cost is None:
        return POOL
    if estimated_cost >= EXPENSIVE_COST:
        return EXPENSIVE
    return POOL if estimated_cost >= LOOP_COST else LOOP


def admit(estimated_cost: int | None) -> None:
    """Raise `NeedsCostlierLane` if the current lane may not compile (None) or run a program
    estimated at `estimated_cost` now; a program it may run is charged to the lane's
    cost allowance for this request."""
    here = _LANE.get()
    if here == EXPENSIVE:
        return
    lane = needed(estimated_cost)
    if lane <= here and estimated_cost is not None:
        spent = _SPENT.get()
        if spent[0] + estimated_cost >= COST_PER_REQUEST[here]:
            lane = here + 1
        else:
            spent[0] += estimated_cost
    if lane > here:
        metrics.child(metrics.CEL_LANE_MOVES_TOTAL, NAMES[here], NAMES[lane]).inc()
        raise NeedsCostlierLane(lane)
