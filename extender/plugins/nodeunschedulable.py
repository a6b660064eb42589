"""NodeUnschedulable (`pkg/scheduler/framework/plugins/nodeunschedulable`).

A cordoned node passes only if the pod tolerates the synthetic
`node.kubernetes.io/unschedulable:NoSchedule` taint, with every operator the
extender supports (through the shared matcher). Node taints are not looked at here.
"""

from __future__ import annotations

from extender.framework import CycleState, Status
from extender.framework.handle import Handle
from extender.framework.interface import FilterPlugin
from extender.framework.status import unschedulable
from extender.framework.verdicts import Masks
from extender.matching.tolerations import matcher_for
from extender.model import Node, Pod, Taint
from extender.state.nodeset import NodeSet, Reads

NAME = "NodeUnschedulable"
ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
REJECTED = unschedulable(ERR_REASON_UNSCHEDULABLE)


class NodeUnschedulable(FilterPlugin):
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def _tolerated(self, state: CycleState, pod: Pod) -> bool:
        return matcher_for(state, pod, self.handle.gates, self.handle.cel).tolerated(UNSCHEDULABLE_TAINT)

    def filter(self, state: CycleState, pod: Pod, node: Node) -> Status:
        if not node.unschedulable or self._tolerated(state, pod):
            return Status()
        return REJECTED

    def filter_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Masks:
        """The cordoned candidates as a mask, gathered from one mask per node layer (no
        name lookups per request)."""
        universe = nodes.universe
        if not universe.unschedulable or self._tolerated(state, pod):
            return []
        cordoned = nodes.gather(nodes.memo(("cordoned",), lambda: universe.mask_of(universe.unschedulable),
                                           Reads.NODES))
        return [(REJECTED, cordoned)] if cordoned.any() else []
