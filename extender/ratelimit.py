"""A token bucket, as client-go's `flowcontrol.NewTokenBucketRateLimiter` (x/time/rate):
`burst` tokens to start with, refilled at `rate` per second, never above `burst`.

Used by the `/explain` and `/drift` endpoints (per user: `Buckets`; 429 with
Retry-After when empty), the side listener's review budgets (`extender.server.auth`) and
by the event recorder's per-object spam filter (`extender.events`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable


class TokenBucket:
    __slots__ = ("rate", "burst", "_tokens", "_at", "_clock", "_lock")

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._clock = clock
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def tokens(self) -> float:
        """Tokens available now (none taken)."""
        with self._lock:
            self._refill()
            return self._tokens

    def wait(self) -> float:
        """The seconds until a token can be taken (0.0: now); none is taken."""
        with self._lock:
            self._refill()
            return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def try_take(self) -> float:
        """Take a token: 0.0 when one was taken, else the seconds until one will be."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            return (1.0 - self._tokens) / self.rate


class Buckets:
    """A `TokenBucket` per key (a caller: an address, a user), each `rate`/`burst`; at
    most `keep` of them, the least recently used forgotten first (a forgotten caller
    starts again with a full bucket, as a new one does)."""

    def __init__(self, rate: float, burst: int, keep: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        TokenBucket(rate, burst, clock)  # checks the arguments
        self.rate, self.burst, self.keep, self._clock = rate, burst, keep, clock
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def try_take(self, key: Hashable) -> float:
        """Take a token of `key`'s bucket: 0.0 when one was taken, else the seconds
        until one will be."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, self._clock)
                if len(self._buckets) > self.keep:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
        return bucket.try_take()

    def wait(self, key: Hashable) -> float:
        """The seconds until `key`'s bucket has a token (0.0: now; a key without a bucket
        has a full one); none is taken, and `key`'s recency is unchanged."""
        with self._lock:
            bucket = self._buckets.get(key)
        return 0.0 if bucket is None else bucket.wait()
