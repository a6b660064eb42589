"""The plugin contract: which extension points exist and what they return.

Plugins implement only the points they need (duck typing, like Go interfaces). Every
per-node point has two forms, no more:

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
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from extender.framework.cycle_state import CycleState
    from extender.framework.status import Status
    from extender.framework.verdicts import Masks
    from extender.model import Node, Pod
    from extender.state.nodeset import NodeSet


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Upstream `PreFilterResult`: when set, only these nodes may pass."""

    node_names: frozenset[str]


@dataclass(slots=True)
class NodeScore:
    name: str
    score: int


class Plugin(Protocol):
    """Marker protocol; see the module docstring for the optional methods."""

    name: str


class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeSet
    ) -> tuple[PreFilterResult | None, Status]: ...


class FilterPlugin(Protocol):
    name: str

    def filter(self, state: CycleState, pod: Pod, node: Node) -> Status: ...

    def filter_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Masks:
        """The failing candidates: disjoint masks over `nodes` (request order) per
        status; a candidate in none passes."""
        ...


class ScorePlugin(Protocol):
    name: str

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Status: ...

    def score(self, state: CycleState, pod: Pod, node: Node) -> tuple[int, Status]: ...

    def score_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> list[int]:
        """Raw scores aligned with `nodes.order` (the candidates' names)."""
        ...

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        """Upstream's NormalizeScore on NodeScore objects (the reference path)."""
        ...

    def normalize_values(self, state: CycleState, pod: Pod, nodes: NodeSet, raw: list[int]) -> list[int]:
        """The same on a plain list aligned with `nodes.order` (the batch path)."""
        ...
