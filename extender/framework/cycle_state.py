"""Per-pod, per-request scratch space that PreFilter/PreScore fill and Filter/Score read."""

from __future__ import annotations

from typing import Any


class CycleState:
    """What the framework tells every plugin as fields (`explain`,
    `record_plugin_metrics`), and a keyed store where each plugin keeps its own data
    under its own keys, as upstream's CycleState does.

    `explain`: the run is an `extender explain` (or a check that wants the reasons):
    filters then give every failing node its detailed status, and plugins skip the
    shortcuts that would leave details out.

    One CycleState lives for exactly one request, so nothing here needs a lock.
    """

    __slots__ = ("_data", "record_plugin_metrics", "explain")

    def __init__(self, record_plugin_metrics: bool = False, explain: bool = False) -> None:
        self._data: dict[str, Any] = {}
        # upstream's ShouldRecordPluginMetrics: plugin execution durations are observed
        # only in sampled cycles (`metrics.sample_plugin_metrics`)
        self.record_plugin_metrics = record_plugin_metrics
        self.explain = explain

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """Return the stored value or raise KeyError (upstream: ErrNotFound)."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)
