"""The engine: one pod, its candidate nodes and the cluster state -> the verbs' answers.

`Extender` (extender.py) answers filter, prioritize, preempt and bind; around it, what
only it uses: the lifecycle gate (gate.py: no verdict on a partial or stale state), the
pods in flight between a filter and their bind (inflight.py), preemption (preemption.py),
binding (binding.py), the request's candidate nodes (candidates.py) and the answers
written from per-candidate-set templates (templates.py).
"""

from extender.engine.extender import Extender

__all__ = ["Extender"]
