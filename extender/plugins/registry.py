"""The plugins the engine runs (upstream's in-tree registry, `plugins/registry.go`)."""

from __future__ import annotations

from extender.framework.handle import Handle
from extender.plugins.nodeaffinity import NodeAffinity
from extender.plugins.nodeunschedulable import NodeUnschedulable
from extender.plugins.podtopologyspread import PodTopologySpread
from extender.plugins.tainttoleration import TaintToleration
from extender.plugins.volumenodeaffinity import VolumeNodeAffinity


def default_plugins(handle: Handle) -> list:
    """The plugins in upstream's default multiPoint order (VolumeNodeAffinity where
    VolumeBinding is)."""
    return [NodeUnschedulable(handle), TaintToleration(handle), NodeAffinity(handle),
            VolumeNodeAffinity(handle), PodTopologySpread(handle)]
