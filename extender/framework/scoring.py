"""Combine the plugins' normalized scores into one extender score per node.

kube-scheduler multiplies an extender's score by `weight * 10` and does not clamp it
(semantics §1.7). Two modes:

* `in-tree` (default): Σ weight×score / 10, rounded half up. With extender weight 1
  the scheduler's ×10 restores the in-tree magnitude (to within ±5 of Σ weight×score,
  the unavoidable cost of integer scores), so the extender weighs against the
  remaining in-tree scorers (NodeResourcesFit, ImageLocality...) as the disabled
  plugins did. Scores then exceed 10 on purpose.
* `scaled`: Σ weight×score over the plugins that did not Skip, divided by the largest
  possible such sum, mapped onto 0..MaxExtenderPriority (10), rounded half up. It
  distorts the magnitude: rounding to 11 steps turns small in-tree differences into
  whole steps (2 points -> 70 with weight 7) and drops others, and skipping plugins
  scale the rest up by 700/M, so it can override in-tree scorers it should not.
"""

from __future__ import annotations

import numpy as np

from extender.framework.interface import MAX_NODE_SCORE
from extender.framework.runner import ScoreOutcome

MAX_EXTENDER_PRIORITY = 10
SCORE_MODES = ("scaled", "in-tree")


def combine(outcome: ScoreOutcome, weights: dict[str, int], mode: str = "in-tree") -> list[int]:
    return combine_vector(outcome, weights, mode).tolist()


def combine_vector(outcome: ScoreOutcome, weights: dict[str, int], mode: str = "in-tree") -> np.ndarray:
    """`combine` as an int64 vector (integer arithmetic throughout: exact)."""
    active = [(weights.get(name, 1), values) for name, values in outcome.scores.items() if values is not None]
    n = len(outcome.nodes)
    if not active:
        return np.zeros(n, dtype=np.int64)
    totals = np.zeros(n, dtype=np.int64)
    for weight, values in active:
        totals += weight * np.asarray(values, dtype=np.int64)
    if mode == "in-tree":
        return (totals + 5) // 10
    maximum = sum(w for w, _ in active) * MAX_NODE_SCORE
    if maximum == 0:
        return np.zeros(n, dtype=np.int64)
    # round(10 * t / maximum) with halves rounded up, in integers
    return (2 * MAX_EXTENDER_PRIORITY * totals + maximum) // (2 * maximum)
