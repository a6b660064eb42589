"""What plugins get from the framework at construction: gates, the shared CEL cache,
their arguments. Per-request data (the cluster snapshot) travels in the CycleState."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extender.features import FeatureGates
from extender.model.parse import DEFAULT_ANNOTATION_PREFIX

SNAPSHOT_KEY = "snapshot"


@dataclass(frozen=True)
class Handle:
    gates: FeatureGates
    cel: Any  # extender.cel.CelCache (kept untyped so the framework does not import CEL)
    plugin_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    annotation_prefix: str = DEFAULT_ANNOTATION_PREFIX  # of the annotations objects carry
