"""Cluster state: feeds (API-server watch, cluster file) write into one `Store` of
immutable, versioned layers; requests read consistent `ClusterSnapshot`s through the
`ClusterSource` interface (`extender.state.source`)."""

from extender.state.loader import load_objects
from extender.state.nodeset import NodeIndex, NodeSet, Reads
from extender.state.snapshot import ClusterSnapshot
from extender.state.source import (
    ClusterSource,
    FileSource,
    StaticSource,
    UnconfiguredSource,
)
from extender.state.store import Store

__all__ = [
    "ClusterSnapshot",
    "ClusterSource",
    "FileSource",
    "NodeIndex",
    "NodeSet",
    "Reads",
    "StaticSource",
    "Store",
    "UnconfiguredSource",
    "load_objects",
]
