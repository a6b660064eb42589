"""Keeping the cyclic garbage collector's full passes off the cluster state.

At 50,000 pods the state is millions of long-lived objects; a full (generation 2)
collection walks them all with the GIL held, and lands in whichever
request is running (a p99 spike under churn). The state holds no reference cycles
(`docs/design/live-state.md`), so reference counting alone frees what an event replaces:
the collector has nothing to find there. `freeze_state` moves every object alive
after a full sync to the permanent generation, which collections skip; later objects
(events, caches) are still collected as usual, and frozen objects that are replaced
are still freed by their reference counts (`tests/perf/test_heap.py` checks memory
stays flat under churn). A cluster-file (re)load runs with the collector paused and
freezes what it built without that full collection (`collector_paused`,
`freeze_loaded_state`), so a reload never stalls the worker's other threads.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("extender.state")
_pause_lock = threading.Lock()
_pausers = 0
_pause_state = [True]  # whether the collector was enabled when the first pause began


def freeze_state(reason: str) -> float:
    """Collect once, then freeze everything alive; returns the seconds it took."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    elapsed = time.perf_counter() - started
    log.info("state moved out of the cyclic collector's reach",
             extra={"reason": reason, "frozen_objects": gc.get_freeze_count(), "ms": round(elapsed * 1000, 1)})
    return elapsed


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside the block. Building millions of objects (a
    cluster file, a 20 MB Nodes-mode request) triggered full passes over the growing
    heap, with the GIL held throughout, inside orjson's one call too: at a 9 MB file
    three passes of 61, 122 and 254 ms; 0.6 s in one 21 MB request. The blocks of
    several threads nest: the collector runs again when the last one ends, and the C
    heap is trimmed then (`trim_heap`): what those objects took goes back to the system."""
    global _pausers
    with _pause_lock:
        if _pausers == 0:
            _pause_state[0] = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pausers -= 1
            last = _pausers == 0
            if last and _pause_state[0]:
                gc.enable()
        if last:
            trim_heap()


def collect_unfrozen() -> None:
    """Before a (re)load: collect what is not frozen (requests' garbage, caches): cheap
    once the state is frozen, and it leaves little for `freeze_loaded_state` to keep."""
    gc.collect()


def freeze_loaded_state() -> None:
    """After a (re)load run with `collector_paused`: freeze everything alive, without
    collecting first. Every object the load allocated is still in the young
    generation (no collection ran), so even a young collection would walk the whole
    new state (~1 s at a 9 MB file). The state holds no reference cycles and the parse
    leaves none; cyclic garbage that concurrent requests made during the load is frozen
    with it (bounded by the load's duration). `ReplacedStates` checks that replaced
    states really are freed."""
    gc.freeze()


class ReplacedStates:
    """Weak references to replaced snapshots: one still alive `grace` seconds after it
    was replaced (no request holds a snapshot that long) sits in a reference cycle that
    frozen objects keep for ever; then everything is collected and frozen again, once,
    and the leak is logged (it is a bug: the state must stay acyclic)."""

    def __init__(self, grace: float = 30.0) -> None:
        self.grace = grace
        self._replaced: list[tuple[float, weakref.ref]] = []

    def replaced(self, snapshot: object) -> None:
        self._replaced.append((time.monotonic(), weakref.ref(snapshot)))

    def check(self) -> bool:
        """True if a leaked snapshot had to be collected."""
        now = time.monotonic()
        alive = [(t, ref) for t, ref in self._replaced if ref() is not None]
        leaked = [ref for t, ref in alive if now - t > self.grace]
        self._replaced = [(t, ref) for t, ref in alive if now - t <= self.grace]
        if not leaked:
            return False
        log.warning("a replaced cluster state was not freed (a reference cycle); collecting",
                    extra={"snapshots": len(leaked)})
        gc.unfreeze()
        freeze_state("replaced state still alive")
        return True


# glibc's mallopt(M_MMAP_THRESHOLD): blocks this large or larger are mmap'ed, and given
# back to the system the moment they are freed
_M_MMAP_THRESHOLD = -3
LARGE_BLOCK = 1 << 20


def return_large_blocks() -> bool:
    """Serve request buffers of `LARGE_BLOCK` bytes or more from their own mappings, so
    that memory returns after a flood of large requests (large reviews otherwise stay
    resident: docs/operate/hardening.md). glibc otherwise raises its mmap threshold to the size of the
    largest block freed (up to 32 MiB): from then on every such buffer comes from the
    heap, which keeps what it has. A fixed threshold ends that adjustment; blocks under
    1 MiB (every NodeNames request) still come from the heap, as fast as before. False
    where the C library is not glibc."""
    mallopt = getattr(_libc(), "mallopt", None)
    return bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK)) if mallopt is not None else False


def _libc():
    """glibc, or None where the C library is not glibc (or cannot be loaded)."""
    global _LIBC
    if _LIBC is False:
        import ctypes
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            _LIBC = None
    return _LIBC


_LIBC = False  # not loaded yet


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc `malloc_trim`), after the
    millions of small objects of a large request or a reload are freed. Without it the
    pages stay with the allocator's per-thread arenas, where freed blocks lie between
    live ones: the worker's RSS climbed ~1.7 MiB with every 12 s of 7 MiB Nodes-mode
    requests (53 -> 61 MiB in five rounds) and stayed there; with it, flat at 54. It
    costs 0.7-2 ms after a 0.1-0.3 s answer, and nothing when little was freed. False
    where there is no glibc."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True
