"""Helpers shared by plugins (upstream `pkg/scheduler/framework/plugins/helper`)."""

from __future__ import annotations

from collections.abc import Iterable

from extender.framework import NodeScore, Status
from extender.model import Node

MAX_NODE_SCORE = 100


def default_normalize_score(max_priority: int, reverse: bool, scores: list[NodeScore]) -> Status:
    """`DefaultNormalizeScore`: scale to [0, max_priority] by the maximum (integer
    division); all zero stays zero, or becomes max_priority when reversed."""
    max_count = max((s.score for s in scores), default=0)
    if max_count == 0:
        if reverse:
            for s in scores:
                s.score = max_priority
        return Status()
    for s in scores:
        value = max_priority * s.score // max_count
        s.score = max_priority - value if reverse else value
    return Status()


def aligned(nodes: Iterable[Node], by_name: dict[str, int], default: int = 0) -> list[int]:
    """Scores in node order from a name -> score mapping."""
    get = by_name.get
    return [get(n.name, default) for n in nodes]
