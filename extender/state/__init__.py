"""Cluster state: immutable snapshots behind a small source interface.

`ClusterSource.snapshot()` is all plugins and the server ever call. The file source
(this package) and the later live API-server watch both produce `ClusterSnapshot`s.
"""

from extender.state.loader import load_objects
from extender.state.nodeset import NodeIndex, NodeSet
from extender.state.snapshot import ClusterSnapshot
from extender.state.source import ClusterSource, FileSource, StaticSource

__all__ = [
    "ClusterSnapshot",
    "ClusterSource",
    "FileSource",
    "NodeIndex",
    "NodeSet",
    "StaticSource",
    "load_objects",
]
