"""Filter verdicts: which status each candidate ends with, as vectors or as a map.

Upstream runs Filter plugins node by node and the first failing plugin decides the
node's status. The batch path gets each plugin's failures for all candidates at once,
as boolean masks per status over the candidates (request order); overlaying them in
reverse plugin order leaves every node with its first failing plugin's status. The
answer is kept grouped by status (`Failures`), which is also what the wire format
needs: one message per failing node, split by code. A name -> status map is built
only for callers that ask for it (explain, tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from extender.framework.status import Status
from extender.state.nodeset import NodeSet

Masks = list[tuple[Status, np.ndarray]]  # disjoint failing-candidate masks per status
Failures = list[tuple[Status, list[str]]]  # failing names per status, no name twice


def masks_of(fails: Mapping[str, Status], nodes: NodeSet) -> Masks:
    """A plugin's name -> status failures as masks (statuses are shared objects, so a
    plugin's failures usually form one group)."""
    if not fails:
        return []
    groups: dict[Status, list[str]] = {}
    distinct = set(fails.values())
    if len(distinct) == 1:
        groups[distinct.pop()] = list(fails)
    else:
        for name, status in fails.items():
            groups.setdefault(status, []).append(name)
    return [(status, nodes.mask_of(names)) for status, names in groups.items()]


def overlay(per_plugin: Sequence[Masks], nodes: NodeSet) -> tuple[list[str], Failures]:
    """Feasible names and failures, the earliest plugin's status winning per node."""
    status_of = np.full(len(nodes), -1, dtype=np.int32)
    table: list[Status] = []
    for masks in reversed(per_plugin):
        for status, mask in masks:
            status_of[mask] = len(table)
            table.append(status)
    feasible = nodes.names_where(status_of < 0)
    failures = [(table[i], nodes.names_where(status_of == i)) for i in np.unique(status_of[status_of >= 0]).tolist()]
    return feasible, failures


def group(statuses: Mapping[str, Status]) -> Failures:
    """A name -> status map grouped by status (first appearance order)."""
    groups: dict[Status, list[str]] = {}
    for name, status in statuses.items():
        groups.setdefault(status, []).append(name)
    return list(groups.items())


def as_map(failures: Iterable[tuple[Status, Iterable[str]]]) -> dict[str, Status]:
    out: dict[str, Status] = {}
    for status, names in failures:
        out.update(dict.fromkeys(names, status))
    return out
