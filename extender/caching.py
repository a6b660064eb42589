"""Caches bounded in bytes, and the one memory budget they share.

Every cache that holds what clients send (CEL programs and results, parsed pods,
NodeNames arrays, candidate sets, memoized parsers) is a `ByteLRU`, cachetools'
`LRUCache(getsizeof=...)` with a lock and accounting: least recently used first out,
bounded by the *estimated* bytes of its entries, not their number (a count bound lets a
few huge keys take gigabytes). An entry larger than the cache's
`max_item_bytes` is never stored: the caller computes it again next time, which is
what an over-limit input deserves.

`--memory-limit-bytes` is split between the caches by `SHARES` (`budget`). Sizes are
estimates (Python objects have no exact size); each cache's estimator is calibrated
with tracemalloc and errs high. `extender_cache_bytes{cache}` exports the estimated
bytes held, summed over the instances of a cache (per-snapshot caches come and go with
their snapshot).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from functools import wraps
from operator import itemgetter
from typing import Any

from cachetools import LRUCache

from extender import metrics

DEFAULT_MEMORY_LIMIT = 256 << 20
# share of --memory-limit-bytes per cache; per-snapshot caches get theirs per snapshot
SHARES = {
    "cel-programs": 0.20,
    "cel-results": 0.10,
    "node-selectors": 0.05,
    "parsed-pods": 0.10,
    "node-names": 0.20,
    "candidate-sets": 0.35,  # the every-node set keeps each workload's filter answer
}
_limit = DEFAULT_MEMORY_LIMIT
_totals: dict[str, int] = {}
_totals_lock = threading.Lock()


def set_memory_limit(limit: int) -> None:
    """The total budget (`--memory-limit-bytes`) for caches created from now on."""
    global _limit
    _limit = limit


def budget(cache: str) -> int:
    return int(_limit * SHARES[cache])


def _account(cache: str, delta: int) -> None:
    if not delta:
        return
    with _totals_lock:
        total = _totals[cache] = _totals.get(cache, 0) + delta
    # Config validation fills the parsers' caches before `serve` installs the metrics
    # (after its multiprocess set-up): their gauge shows from their next change.
    if metrics.installed():
        metrics.child(metrics.CACHE_BYTES, cache).set(total)


class ByteLRU:
    """cachetools' `LRUCache(getsizeof=...)` over (value, size) entries: bounded by the
    sum of the sizes given to `put` (and, optionally, a count), thread-safe, counted in
    extender_cache_bytes. Values are never None (None means "not held")."""

    def __init__(self, name: str, max_bytes: int | None = None, max_item_bytes: int | None = None,
                 max_entries: int | None = None, on_evict: Callable[[int], None] | None = None) -> None:
        self.name = name
        self.on_evict = on_evict  # called with the number of entries evicted by a put
        self.max_bytes = budget(name) if max_bytes is None else max_bytes
        self.max_item_bytes = self.max_bytes if max_item_bytes is None else min(max_item_bytes, self.max_bytes)
        self.max_entries = max_entries
        self._data: LRUCache = LRUCache(self.max_bytes, getsizeof=itemgetter(1))
        self._lock = threading.Lock()
        self._held = [0]  # a list, so that the finalizer can see the last value
        weakref.finalize(self, _release, name, self._held)

    @property
    def bytes(self) -> int:
        return self._held[0]

    def __len__(self) -> int:
        return len(self._data)

    def entries(self) -> list[tuple[Hashable, Any, int]]:
        """(key, value, size) of every entry, oldest first (a copy: safe while others write)."""
        with self._lock:
            return [(k, v, size) for k, (v, size) in self._data.items()]

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            entry = self._data.get(key)
        return default if entry is None else entry[0]

    def put(self, key: Hashable, value: Any, size: int) -> bool:
        """Store `value` (estimated `size` bytes); False, storing nothing, if it is
        larger than `max_item_bytes`. Older entries make room."""
        if size > self.max_item_bytes:
            return False
        with self._lock:
            count = len(self._data) + (key not in self._data)
            self._data[key] = (value, size)
            while self.max_entries and len(self._data) > self.max_entries:
                self._data.popitem()
            evicted = count - len(self._data)
            delta, self._held[0] = self._data.currsize - self._held[0], self._data.currsize
        _account(self.name, delta)
        if evicted and self.on_evict is not None:
            self.on_evict(evicted)
        return True

    def get_or_build(self, key: Hashable, build: Callable[[], Any], size: Callable[[Any], int]) -> Any:
        """The cached value, or `build()` stored (if small enough) and returned; `build`
        runs outside the lock (values are pure, so a rare double build is harmless)."""
        value = self.get(key)
        if value is None:
            value = build()
            self.put(key, value, size(value))
        return value

    def clear(self) -> None:
        with self._lock:
            freed, self._held[0] = self._held[0], 0
            self._data.clear()
        _account(self.name, -freed)


def _release(name: str, held: list[int]) -> None:
    _account(name, -held[0])


_ABSENT = (None,)  # memoized() holds results in 1-tuples: None is a result too


def memoized(max_bytes: int = 1 << 20, max_chars: int = 1024) -> Callable:
    """Memoize a pure function of strings in a `ByteLRU` ("memoized" in
    extender_cache_bytes) charged by its arguments' length; arguments longer than
    `max_chars` are never keys (the function just runs)."""

    def decorate(func: Callable) -> Callable:
        cache = ByteLRU("memoized", max_bytes=max_bytes, max_item_bytes=max_chars + 200)

        @wraps(func)
        def call(*args: Any) -> Any:
            held = cache.get(args, _ABSENT)
            if held is _ABSENT:
                held = (func(*args),)
                cache.put(args, held, 200 + sum(len(a) for a in args if isinstance(a, str)))
            return held[0]

        call.cache = cache  # type: ignore[attr-defined]
        return call

    return decorate
