"""Keeping the cyclic garbage collector's full passes off the cluster state.

At 50,000 pods the state is millions of long-lived objects; a full (generation 2)
collection walks them all, 40-100 ms with the GIL held, and lands in whichever
request is running (a p99 spike under churn). The state holds no reference cycles
(`docs/design/live-state.md`), so reference counting alone frees what an event replaces:
the collector has nothing to find there. `freeze_state` moves every object alive
after a full sync to the permanent generation, which collections skip; later objects
(events, caches) are still collected as usual, and frozen objects that are replaced
are still freed by their reference counts (`tests/perf/test_heap.py` checks memory
stays flat under churn).
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("extender.state")


def freeze_state(reason: str) -> float:
    """Collect once, then freeze everything alive; returns the seconds it took."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    elapsed = time.perf_counter() - started
    log.info("state moved out of the cyclic collector's reach",
             extra={"reason": reason, "frozen_objects": gc.get_freeze_count(), "ms": round(elapsed * 1000, 1)})
    return elapsed
