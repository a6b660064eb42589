"""Scheduling plugins, one module each, named as upstream names them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from extender.framework.handle import Handle


def default_plugins(handle: Handle) -> list:
    """The plugins in upstream's default multiPoint order (VolumeNodeAffinity where
    VolumeBinding is)."""
    from extender.plugins.nodeaffinity import NodeAffinity
    from extender.plugins.nodeunschedulable import NodeUnschedulable
    from extender.plugins.podtopologyspread import PodTopologySpread
    from extender.plugins.tainttoleration import TaintToleration
    from extender.plugins.volumenodeaffinity import VolumeNodeAffinity

    return [NodeUnschedulable(handle), TaintToleration(handle), NodeAffinity(handle),
            VolumeNodeAffinity(handle), PodTopologySpread(handle)]
