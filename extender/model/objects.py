"""Immutable data classes for the parts of Node and Pod that scheduling reads.

They are plain values: hashable where that lets callers cache per distinct value
(a taint, a tuple of taints), and free of behaviour; matching lives in
`extender.matching`, plugin logic in `extender.plugins`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"

# the API server's default spec.schedulerName, and the name of kube-scheduler's first profile
DEFAULT_SCHEDULER_NAME = "default-scheduler"


class Taint(NamedTuple):
    """A NamedTuple, not a dataclass: hashing and equality run in C, which matters
    because verdicts are memoized per taint and per taint tuple on every request."""

    key: str
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        """Upstream `Taint.ToString`: `key=value:effect`; `key=value:` when only the
        effect is empty; `key:effect` or `key` when the value is empty."""
        if not self.value:
            return f"{self.key}:{self.effect}" if self.effect else self.key
        return f"{self.key}={self.value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None
    expression: str = ""
    source: str = "spec"  # "spec" or the annotation name it came from

    def describe(self) -> str:
        """A short human form for explain output."""
        if self.expression:
            return f"expression {self.expression!r}"
        parts = [self.key or "<any key>", self.operator or "Equal"]
        if self.operator not in ("Exists",):
            parts.append(repr(self.value))
        text = " ".join(parts)
        return f"{text} ({self.effect})" if self.effect else text


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelector:
    terms: tuple[NodeSelectorTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class PreferredSchedulingTerm:
    weight: int
    preference: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """Required selectors are ANDed (spec affinity, then annotation affinity)."""

    required: tuple[NodeSelector, ...] = ()
    preferred: tuple[PreferredSchedulingTerm, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """A node as scheduling sees it.

    `taints` is a tuple so that nodes with the same taints share one hashable value;
    plugins cache verdicts per distinct taint tuple, not per node.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    raw: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Pod:
    """A pod with its *effective* scheduling constraints.

    `tolerations` and `affinity` already merge `spec` with the annotation channel
    (`extender.validation.pod.pod_from_dict`). `tolerations_error` / `affinity_error` are
    set when an annotation is malformed: every node must then reject the pod loudly.
    `has_node_selector` distinguishes a nil `nodeSelector` from an empty map, which
    NodeAffinity's PreFilter Skip rule cares about.
    """

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_name: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    has_node_selector: bool = False
    tolerations: tuple[Toleration, ...] = ()
    affinity: NodeAffinity = NodeAffinity()
    has_required_affinity: bool = False
    has_preferred_affinity: bool = False
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = ()
    volume_claims: tuple[tuple[str, bool], ...] = ()  # (claim name, generic ephemeral?)
    owner_references: tuple[Mapping[str, Any], ...] = ()
    priority: int = 0
    phase: str = ""
    terminating: bool = False
    nominated_node_name: str = ""
    preempts: bool = True  # spec.preemptionPolicy is not Never
    # spec.schedulerName, defaulted as the API server defaults it: the profile whose
    # plugins' arguments and weights apply (extender.schedconfig)
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    tolerations_error: str | None = None
    affinity_error: str | None = None
    raw: Mapping[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
