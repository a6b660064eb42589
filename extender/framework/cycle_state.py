"""Per-pod, per-request scratch space that PreFilter/PreScore fill and Filter/Score read."""

from __future__ import annotations

from typing import Any


class CycleState:
    """A plain keyed store; plugins use their own state keys, as upstream does.

    One CycleState lives for exactly one request, so nothing here needs a lock.
    """

    __slots__ = ("_data", "record_plugin_metrics")

    def __init__(self, record_plugin_metrics: bool = False) -> None:
        self._data: dict[str, Any] = {}
        # upstream's ShouldRecordPluginMetrics: plugin execution durations are observed
        # only in sampled cycles (`metrics.sample_plugin_metrics`)
        self.record_plugin_metrics = record_plugin_metrics

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """Return the stored value or raise KeyError (upstream: ErrNotFound)."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)
