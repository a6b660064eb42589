"""The plugin contract: which extension points exist and what they return.

Plugins implement only the points they need (duck typing, like Go interfaces; the
runner looks for the methods), with these signatures:

* `pre_filter(state, pod, nodes) -> (PreFilterResult | None, Status)`;
* `pre_score(state, pod, nodes) -> Status`.

Every per-node point has two forms, no more:

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
from typing import Protocol

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
    """Marker protocol; see the module docstring for the optional methods."""

    name: str
