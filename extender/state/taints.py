"""A node layer's taints as vectors, so that a toleration set is judged once per
distinct taint and its verdict spread to every node with numpy, not by a Python loop
over nodes or over taint tuples.

At 5,000 generated nodes there are ~900 distinct taint tuples but ~80 distinct taints:
a pod with tolerations no other pod has (nothing memoised for it) costs ~80 toleration
checks and a few vector operations instead of ~900 tuple checks and a set of names.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from extender.model import Taint


class TaintTable:
    """Each node's taint tuple as a group id (`group_of`, by position in the layer) and
    each group's taints as (group, taint) pairs over the distinct `taints`, a taint
    listed as often as its tuple holds it."""

    __slots__ = ("taints", "group_of", "pair_group", "pair_taint", "groups")

    def __init__(self, positions_by_tuple: dict[tuple[Taint, ...], np.ndarray], size: int) -> None:
        index: dict[Taint, int] = {}
        self.group_of = np.zeros(size, dtype=np.intp)
        pair_group: list[int] = []
        pair_taint: list[int] = []
        for group, (taints, positions) in enumerate(positions_by_tuple.items()):
            self.group_of[positions] = group
            for taint in taints:
                pair_group.append(group)
                pair_taint.append(index.setdefault(taint, len(index)))
        self.groups = len(positions_by_tuple)
        self.taints: list[Taint] = list(index)
        self.pair_group = np.array(pair_group, dtype=np.intp)
        self.pair_taint = np.array(pair_taint, dtype=np.intp)

    def flags(self, predicate: Callable[[Taint], bool]) -> np.ndarray:
        """`predicate` of each distinct taint, as a bool vector (one call per taint)."""
        return np.fromiter(map(predicate, self.taints), dtype=bool, count=len(self.taints))

    def any_per_node(self, flagged: np.ndarray) -> np.ndarray:
        """Per node: does its tuple hold a taint whose flag is set?"""
        hit = np.zeros(self.groups, dtype=bool)
        hit[self.pair_group[flagged[self.pair_taint]]] = True
        return hit[self.group_of]

    def count_per_node(self, flagged: np.ndarray) -> np.ndarray:
        """Per node: how many of its taints (with repeats) have their flag set (int64)."""
        per_group = np.bincount(self.pair_group, weights=flagged[self.pair_taint], minlength=self.groups)
        return per_group.astype(np.int64)[self.group_of]
