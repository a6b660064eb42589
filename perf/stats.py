"""Latency summaries. Percentiles use the nearest-rank method, so a reported p99 is a
latency some request really saw (interpolation would invent one between two samples)."""

from __future__ import annotations

import math
from collections.abc import Sequence

STALL_FLOOR_S = 0.035  # Nagle + delayed ACK stalls sit at ~40 ms on Linux


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """Seconds in, milliseconds out (rounded to microseconds)."""
    values = sorted(samples)
    if not values:
        return {"n": 0}

    def ms(x: float) -> float:
        return round(x * 1000.0, 3)

    return {
        "n": len(values),
        "p50_ms": ms(percentile(values, 50)),
        "p90_ms": ms(percentile(values, 90)),
        "p99_ms": ms(percentile(values, 99)),
        "max_ms": ms(values[-1]),
        "mean_ms": ms(sum(values) / len(values)),
    }


def stalls(samples: Sequence[float]) -> dict[str, object]:
    """Requests that look like a 40 ms Nagle/delayed-ACK stall: at least 35 ms and at
    least 4x the median. Both conditions, so a slow-but-honest verb is not flagged."""
    values = sorted(samples)
    if not values:
        return {"count": 0, "worst_ms": []}
    median = percentile(values, 50)
    hits = [v for v in values if v >= STALL_FLOOR_S and v >= 4 * median]
    return {"count": len(hits), "worst_ms": [round(v * 1000, 1) for v in hits[-5:]]}
