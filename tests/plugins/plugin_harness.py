"""Helpers shared by the plugin table tests."""

from __future__ import annotations

from extender.framework import Code, CycleState, Status
from extender.framework.handle import SNAPSHOT_KEY
from extender.state import ClusterSnapshot, NodeSet


def verdict(status: Status) -> tuple[Code, str]:
    """What a table row asserts: the code and the wire message."""
    return status.code, status.message()


def snapshot_backed(nodes: list) -> tuple[CycleState, NodeSet]:
    """A state and node set as the engine builds them in NodeNames mode: the batch path may
    then answer from per-snapshot memos."""
    snapshot = ClusterSnapshot(nodes)
    state = CycleState()
    state.write(SNAPSHOT_KEY, snapshot)
    return state, NodeSet(list(snapshot.nodes.nodes), snapshot.nodes)
