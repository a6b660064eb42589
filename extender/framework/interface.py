"""The plugin contract: one checkable Protocol per extension point, as upstream's
`framework.PreFilterPlugin`, `FilterPlugin`, `PreScorePlugin` and `ScorePlugin`.

A plugin declares the points it implements by subclassing their Protocols (upstream's
`var _ framework.FilterPlugin = &TaintToleration{}`); `Framework` checks at registration
that every point a plugin claims (by subclassing its Protocol or by defining any of its
methods) has all of that point's methods, and refuses it naming the missing one. It
then builds its per-point plugin lists once, so no request looks a method up by name.

Every per-node point has two forms, both required:

* `filter(state, pod, node)` / `score(state, pod, node)` / `normalize_score(...)`: one
  node (NodeScore objects), the plain reference path that mirrors upstream line by line:
  the differential tests' oracle (`Framework(fast=False)`);
* `filter_nodes(state, pod, nodes)` / `score_nodes(state, pod, nodes)` /
  `normalize_values(...)`: the batch path the server runs, which does the work once
  per distinct taint set or label projection (and per node layer and constraint where
  it can); `filter_nodes` answers masks over the candidates, with the same statuses
  (and, in an explain run, the same details) as `filter`.

Differential tests run both and compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from extender.framework.cycle_state import CycleState
from extender.framework.status import Status

#: Upstream `framework.MaxNodeScore`: every normalized score lands in [0, 100].
MAX_NODE_SCORE = 100


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Upstream `PreFilterResult`: when set, only these nodes may pass."""

    node_names: frozenset[str]


@dataclass(slots=True)
class NodeScore:
    name: str
    score: int


class Plugin(Protocol):
    """What every plugin has: the name the configuration and the metrics know it by."""

    name: str


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    """`pre_filter` answers (PreFilterResult or None, Status): Skip switches the plugin's
    Filter off for this pod, a rejection rejects every node."""

    def pre_filter(self, state: CycleState, pod: Any, nodes: Any) -> tuple[PreFilterResult | None, Status]: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    """Filter, per node (reference) and over the candidates as masks (batch)."""

    def filter(self, state: CycleState, pod: Any, node: Any) -> Status: ...

    def filter_nodes(self, state: CycleState, pod: Any, nodes: Any) -> Any: ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    """`pre_score` answers a Status: Skip switches the plugin's Score off for this pod."""

    def pre_score(self, state: CycleState, pod: Any, nodes: Any) -> Status: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    """Score and NormalizeScore, per node (reference) and as vectors (batch)."""

    def score(self, state: CycleState, pod: Any, node: Any) -> tuple[int, Status]: ...

    def score_nodes(self, state: CycleState, pod: Any, nodes: Any) -> Any: ...

    def normalize_score(self, state: CycleState, pod: Any, scores: list[NodeScore]) -> Status: ...

    def normalize_values(self, state: CycleState, pod: Any, nodes: Any, raw: Any) -> Any: ...


#: Each extension point's Protocol, in the order the runner runs them.
POINTS: dict[str, type] = {
    "PreFilter": PreFilterPlugin,
    "Filter": FilterPlugin,
    "PreScore": PreScorePlugin,
    "Score": ScorePlugin,
}


def methods(point: type) -> tuple[str, ...]:
    """The methods a point's Protocol requires (not the inherited `name`)."""
    return tuple(m for m in vars(point) if not m.startswith("_") and callable(vars(point)[m]))


def _defined(plugin: object, method: str) -> bool:
    """The plugin has `method` of its own (not a Protocol's `...` stub it inherits)."""
    found = getattr(type(plugin), method, None)
    return callable(found) and not any(vars(p).get(method) is found for p in POINTS.values())


class PluginContractError(TypeError):
    """A plugin claims an extension point without all of its methods."""


def points_of(plugin: object) -> tuple[str, ...]:
    """The extension points `plugin` implements, checked: it claims a point by
    subclassing its Protocol or by defining any of its methods, and must then define
    every one of them (PluginContractError names the missing method)."""
    name = getattr(plugin, "name", None)
    if not isinstance(name, str) or not name:
        raise PluginContractError(f"plugin {plugin!r} has no name")
    claimed = []
    for point, protocol in POINTS.items():
        required = methods(protocol)
        defined = [m for m in required if _defined(plugin, m)]
        if not defined and not isinstance(plugin, protocol):
            continue
        missing = [m for m in required if m not in defined]
        if missing:
            raise PluginContractError(
                f"plugin {name!r} implements {point} but does not define {', '.join(missing)}")
        claimed.append(point)
    return tuple(claimed)
