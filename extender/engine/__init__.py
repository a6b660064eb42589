"""The engine: one pod, its candidate nodes and the cluster state -> the verbs' answers.

`Extender` (extender.py) answers filter, prioritize, preempt and bind; around it, what
only it uses: the lifecycle gate (gate.py: no verdict on a partial or stale state), the
pods in flight between a filter and their bind (inflight.py), preemption (preemption.py),
binding (binding.py). The request's candidate nodes and the answers' bytes live in
`extender.api` (candidates.py, answers.py): every byte on the wire is written in one place.
"""

from extender.engine.extender import Extender

__all__ = ["Extender"]
