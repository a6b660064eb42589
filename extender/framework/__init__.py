"""A small scheduling framework in kube-scheduler's shape.

Statuses instead of exceptions, one CycleState per pod and request, and the extension
points PreFilter -> Filter -> PreScore -> Score -> NormalizeScore run by `Framework`.
"""

from extender.framework.cycle_state import CycleState
from extender.framework.interface import (
    MAX_NODE_SCORE,
    FilterPlugin,
    NodeScore,
    Plugin,
    PluginContractError,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
)
from extender.framework.runner import FilterOutcome, Framework, ScoreOutcome
from extender.framework.status import Code, Status

__all__ = [
    "MAX_NODE_SCORE",
    "Code",
    "CycleState",
    "FilterOutcome",
    "FilterPlugin",
    "Framework",
    "NodeScore",
    "Plugin",
    "PluginContractError",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "ScoreOutcome",
    "ScorePlugin",
    "Status",
]
