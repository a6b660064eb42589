"""Slim, immutable views of Kubernetes objects, built once from their JSON."""

from extender.model.objects import (
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PreferredSchedulingTerm,
    Taint,
    Toleration,
)

__all__ = [
    "Node",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Pod",
    "PreferredSchedulingTerm",
    "Taint",
    "Toleration",
]
