"""A prioritize answer as kube-scheduler reads it (`prioritizeNodes`): each listed host
gets its `Score` (times the extender's weight x 10) added to its total, every other
feasible host nothing. A slim answer (the default, `--slim-answers`) leaves out the
hosts at a base score (the most common one, or the lowest with `--score-mode scaled`),
shifted to 0, so "absent" reads as 0 here."""

from __future__ import annotations

from collections import Counter
from typing import Any


def host_scores(feasible: list[str], answer: list[dict[str, Any]]) -> dict[str, int]:
    """Every feasible host's extender score: its listed `Score`, or 0."""
    listed = {entry["Host"]: entry["Score"] for entry in answer}
    return {name: listed.get(name, 0) for name in feasible}


def best_hosts(feasible: list[str], answer: list[dict[str, Any]]) -> list[str]:
    """The feasible hosts with the highest extender score, in request order (with no
    other scorer, kube-scheduler picks one of them at random)."""
    scores = host_scores(feasible, answer)
    top = max(scores.values(), default=0)
    return [name for name in feasible if scores[name] == top]


def slim_base(full: list[dict[str, Any]], scaled: bool = False) -> int:
    """The score a slim answer subtracts from a full answer's: its most common score
    (the lowest of equals), or with `scaled` its lowest."""
    if not full:
        return 0
    if scaled:
        return min(entry["Score"] for entry in full)
    seen = Counter(entry["Score"] for entry in full)
    return min(score for score, n in seen.items() if n == max(seen.values()))
