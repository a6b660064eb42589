"""Caches bounded in bytes, and the one memory budget they share.

Every cache that holds what clients send (CEL programs and results, parsed pods,
NodeNames arrays, candidate sets, memoized parsers) is a `ByteLRU`, cachetools'
`LRUCache(getsizeof=...)` with a lock and accounting: least recently used first out,
bounded by the *estimated* bytes of its entries, not their number (a count bound lets a
few huge keys take gigabytes). An entry larger than the cache's
`max_item_bytes` is never stored: the caller computes it again next time, which is
what an over-limit input deserves.

`--memory-limit-bytes` is split between the caches by `SHARES` (`memory_share`). Sizes are
estimates (Python objects have no exact size); each cache's estimator is calibrated
with tracemalloc and errs high. `extender_cache_bytes{cache}` exports the estimated
bytes held, summed over the instances of a cache (per-snapshot caches come and go with
their snapshot).

Two variants of the same class, for caches that are not a share of the budget:
`accounted=False` (bounded in bytes, not exported: a candidate set's encoder
templates, already charged to its set) and `ByteLRU.counted` (bounded by a number of
entries only: the memos that live with one layer of cluster state, whose values are
vectors or name sets over its nodes and so bounded by the cluster, not by clients).
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict
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


def memory_share(cache: str) -> int:
    """The bytes `cache` may hold: its share of `--memory-limit-bytes`."""
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
    extender_cache_bytes (unless `accounted` is False). Values are never None (None
    means "not held")."""

    __slots__ = ("name", "on_evict", "max_bytes", "max_item_bytes", "max_entries", "accounted", "recency", "_data",
                 "_lock", "_held", "__weakref__")

    def __init__(self, name: str, max_bytes: int | None = None, max_item_bytes: int | None = None,
                 max_entries: int | None = None, on_evict: Callable[[int], None] | None = None,
                 accounted: bool = True, recency: bool = True) -> None:
        self.name = name
        # recency=False (`counted` caches only): first in, first out, in an OrderedDict; a
        # hit is one dict read without the lock, a put a store and at most one pop: for
        # memos on paths where the cache must cost what a plain dict would (CEL's parsers)
        if not recency and (max_entries is None or accounted):
            raise ValueError("a first-in-first-out ByteLRU is bounded by its count and not accounted")
        self.recency = recency
        self.on_evict = on_evict  # called with the number of entries evicted by a put
        self.max_bytes = memory_share(name) if max_bytes is None else max_bytes
        self.max_item_bytes = self.max_bytes if max_item_bytes is None else min(max_item_bytes, self.max_bytes)
        self.max_entries = max_entries
        self.accounted = accounted
        self._data: LRUCache | OrderedDict = (LRUCache(self.max_bytes, getsizeof=itemgetter(1)) if recency
                                              else OrderedDict())
        self._lock = threading.Lock()
        self._held = [0]  # a list, so that the finalizer can see the last value
        if accounted:
            weakref.finalize(self, _release, name, self._held)

    @classmethod
    def counted(cls, name: str, entries: int, recency: bool = True) -> ByteLRU:
        """A cache bounded by its number of `entries` alone (entries are put with size 0)
        and not in extender_cache_bytes: the memos of one layer of cluster state (node
        layer, snapshot, candidate set, namespace bucket), whose values are answers over
        that layer's nodes or pods, bounded by the cluster rather than by clients."""
        return cls(name, max_bytes=sys.maxsize, max_entries=entries, accounted=False, recency=recency)

    def copy(self) -> ByteLRU:
        """A new cache with the same limits and entries (stored in `entries` order: the
        copy's recency starts from that order)."""
        new = ByteLRU(self.name, self.max_bytes, self.max_item_bytes, self.max_entries, self.on_evict,
                      self.accounted, self.recency)
        with self._lock:
            items = list(self._data.items())
        for key, (value, size) in items:
            new._data[key] = (value, size)
        new._held[0] = new._data.currsize if self.recency else 0
        if self.accounted:
            _account(self.name, new._held[0])
        return new

    def reset_lock(self) -> None:
        """A fresh lock, in a child process after fork (another thread of the parent may
        have held this one when it forked)."""
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        return self._held[0]

    def __len__(self) -> int:
        return len(self._data)

    def entries(self) -> list[tuple[Hashable, Any, int]]:
        """(key, value, size) of every entry, in the order they were first stored (a
        copy: safe while others write)."""
        with self._lock:
            return [(k, v, size) for k, (v, size) in self._data.items()]

    def get(self, key: Hashable, default: Any = None) -> Any:
        if not self.recency:
            try:  # one dict read, atomic under the GIL; an entry evicted meanwhile is a miss
                return self._data[key][0]
            except KeyError:
                return default
        with self._lock:
            entry = self._data.get(key)
        return default if entry is None else entry[0]

    def put(self, key: Hashable, value: Any, size: int = 0) -> bool:
        """Store `value` (estimated `size` bytes); False, storing nothing, if it is
        larger than `max_item_bytes`. Older entries make room."""
        if size > self.max_item_bytes:
            return False
        if not self.recency:
            return self._put_fifo(key, value)
        with self._lock:
            count = len(self._data) + (key not in self._data)
            self._data[key] = (value, size)
            while self.max_entries and len(self._data) > self.max_entries:
                self._data.popitem()
            evicted = count - len(self._data)
            delta, self._held[0] = self._data.currsize - self._held[0], self._data.currsize
        if self.accounted:
            _account(self.name, delta)
        if evicted and self.on_evict is not None:
            self.on_evict(evicted)
        return True

    def _put_fifo(self, key: Hashable, value: Any) -> bool:
        with self._lock:
            self._data[key] = (value, 0)
            evicted = len(self._data) - self.max_entries
            for _ in range(evicted):
                self._data.popitem(last=False)
        if evicted > 0 and self.on_evict is not None:
            self.on_evict(evicted)
        return True

    def get_or_build(self, key: Hashable, build: Callable[[], Any],
                     size: Callable[[Any], int] | None = None) -> Any:
        """The cached value, or `build()` stored (if small enough; `size` estimates its
        bytes, none for a `counted` cache) and returned; `build` runs outside the lock
        (values are pure, so a rare double build is harmless). None is never stored."""
        value = self.get(key)
        if value is None:
            value = build()
            if value is not None:
                self.put(key, value, 0 if size is None else size(value))
        return value

    def clear(self) -> None:
        with self._lock:
            freed, self._held[0] = self._held[0], 0
            self._data.clear()
        if self.accounted:
            _account(self.name, -freed)


class OnFirstUse:
    """A process-wide `ByteLRU` made when first asked for (`cache()`), not at import: its
    share of `--memory-limit-bytes` is read then, once the configuration has set it.
    `reset()` drops it (tests: made again at another limit)."""

    __slots__ = ("_args", "_kwargs", "_cache")

    def __init__(self, name: str, **kwargs: Any) -> None:
        self._args, self._kwargs = (name,), kwargs
        self._cache: ByteLRU | None = None

    def __call__(self) -> ByteLRU:
        cache = self._cache
        if cache is None:
            cache = self._cache = ByteLRU(*self._args, **self._kwargs)
        return cache

    def reset(self) -> None:
        self._cache = None


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
