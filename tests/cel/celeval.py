"""Evaluating an expression in tests the way cel-go would, without KEP-5500's admission
(many value tests use expressions admission refuses: ``type(x) == int`` has an unbounded
estimate in cel-go too)."""

from __future__ import annotations

from extender.cel.limits import MAX_COST
from extender.cel.program import build, evaluate


def ev(expr: str, key: str = "k", value: str = "", effect: str = "NoSchedule",
       cost_limit: int = MAX_COST) -> tuple[str, str]:
    """(kind, message) of one evaluation; raises CompileError for what does not compile."""
    kind, message, _used = evaluate(build(expr).runner, key, value, effect,
                                    cost_limit=cost_limit)
    return kind, message


def used(expr: str, key: str = "k", value: str = "", effect: str = "NoSchedule") -> int:
    """The units one evaluation uses (cel-go's ActualCost)."""
    return evaluate(build(expr).runner, key, value, effect)[2]


def estimate(expr: str) -> tuple[int, int]:
    """cel-go's (min, max) cost estimate."""
    return build(expr).estimate
