"""A token bucket, as client-go's `flowcontrol.NewTokenBucketRateLimiter` (x/time/rate):
`burst` tokens to start with, refilled at `rate` per second, never above `burst`.

Used by the `/explain` endpoint (429 with Retry-After when empty) and by the event
recorder's per-object spam filter (`extender.events`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


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

    def try_take(self) -> float:
        """Take a token: 0.0 when one was taken, else the seconds until one will be."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            return (1.0 - self._tokens) / self.rate
