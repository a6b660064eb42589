"""Combine the plugins' normalized scores into one extender score per node.

kube-scheduler multiplies an extender's score by `weight * 10` and does not clamp it
(semantics §1.7). Two modes:

* `scaled` (default): Σ weight×score over the plugins that did not Skip, divided by
  the largest possible such sum, mapped onto 0..MaxExtenderPriority (10), rounded half
  up. Skipping plugins do not dilute the others, and rounding the *sum* once loses
  less ranking than rounding per plugin. Use extender weight 7 (= 3 + 2 + 2) to give the
  extender the same maximum as the in-tree plugins it replaces.
* `in-tree`: Σ weight×score / 10, rounded half up. With extender weight 1 the
  scheduler's ×10 restores the in-tree magnitude (to within ±5 of Σ weight×score, the
  unavoidable cost of integer scores), so the extender weighs against the remaining
  in-tree scorers as the disabled plugins did. Scores then exceed 10 on purpose.
"""

from __future__ import annotations

from itertools import repeat
from operator import add, mul
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no runtime import: config imports this module before metrics may exist
    from extender.framework.runner import ScoreOutcome

MAX_NODE_SCORE = 100

MAX_EXTENDER_PRIORITY = 10
SCORE_MODES = ("scaled", "in-tree")
DEFAULT_WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2, "PodTopologySpread": 2}


def combine(outcome: ScoreOutcome, weights: dict[str, int], mode: str = "scaled") -> list[int]:
    active = [(weights.get(name, 1), values) for name, values in outcome.scores.items() if values is not None]
    n = len(outcome.nodes)
    if not active:
        return [0] * n
    totals: list[int] = [0] * n
    for weight, values in active:  # map/operator keep the per-node arithmetic in C
        totals = list(map(add, totals, map(mul, repeat(weight), values)))
    if mode == "in-tree":
        return [(t + 5) // 10 for t in totals]
    maximum = sum(w for w, _ in active) * MAX_NODE_SCORE
    if maximum == 0:
        return [0] * n
    # round(10 * t / maximum) with halves rounded up, in integers
    return [(2 * MAX_EXTENDER_PRIORITY * t + maximum) // (2 * maximum) for t in totals]
