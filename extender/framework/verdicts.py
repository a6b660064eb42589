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


def failing(masks: Masks, nodes: NodeSet) -> dict[str, Status]:
    """The candidates a plugin's masks fail, name -> status (explain, tests)."""
    return as_map((status, nodes.names_where(mask)) for status, mask in masks)


class Verdict:
    """Each candidate's final status as an index into `table` (-1: feasible)."""

    __slots__ = ("nodes", "status_of", "table", "_used")

    def __init__(self, nodes: NodeSet, status_of: np.ndarray, table: list[Status]) -> None:
        self.nodes = nodes
        self.status_of = status_of
        self.table = table
        self._used: list[int] | None = None

    def groups(self) -> list[tuple[Status, np.ndarray]]:
        """(status, mask of the candidates that end with it) for every status in use."""
        if self._used is None:
            # bincount, not np.unique: no sort, same ascending order (-1 = feasible)
            used = np.bincount(self.status_of + 1, minlength=len(self.table) + 1)[1:]
            self._used = np.flatnonzero(used).tolist()
        return [(self.table[i], self.status_of == i) for i in self._used]

    def feasible(self) -> np.ndarray:
        return self.status_of < 0

    def feasible_names(self) -> list[str]:
        return self.nodes.names_where(self.feasible())

    def failures(self) -> Failures:
        return [(status, self.nodes.names_where(mask)) for status, mask in self.groups()]


def overlay(per_plugin: Sequence[Masks], nodes: NodeSet) -> Verdict:
    """Overlay the plugins' masks, the earliest plugin's status winning per node."""
    status_of = np.full(len(nodes), -1, dtype=np.int32)
    table: list[Status] = []
    for masks in reversed(per_plugin):
        for status, mask in masks:
            np.putmask(status_of, mask, len(table))  # a third of `status_of[mask] = ...`'s work
            table.append(status)
    return Verdict(nodes, status_of, table)


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
