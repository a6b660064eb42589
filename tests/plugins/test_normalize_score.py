"""DefaultNormalizeScore table ported as data from upstream tests.

Source (kubernetes/kubernetes, facts only):
pkg/scheduler/framework/plugins/helper/normalize_score_test.go: TestDefaultNormalizeScore.
Rows marked "spec" come from semantics.md §5 and §6.4.
"""

from __future__ import annotations

import pytest

from extender.framework import MAX_NODE_SCORE, NodeScore
from extender.plugins.helper import (
    default_normalize_score,
    default_normalize_values,
)

# (reverse, scores, expected)
DEFAULT_NORMALIZE = [
    (False, [1, 2, 3, 4], [25, 50, 75, 100]),
    (True, [1, 2, 3, 4], [75, 50, 25, 0]),
    (False, [1000, 10, 20, 30], [100, 1, 2, 3]),
    (True, [1000, 10, 20, 30], [0, 99, 98, 97]),
    (False, [1, 1, 1, 1], [100, 100, 100, 100]),
    (False, [1000, 1, 1, 1], [100, 0, 0, 0]),
    (True, [0, 1, 1, 1], [100, 0, 0, 0]),
    # spec §5 (TaintToleration, reverse) and §6.4 (NodeAffinity)
    (True, [0, 1, 2], [100, 50, 0]),
    (True, [1, 3], [67, 0]),
    (True, [0, 0], [100, 100]),
    (False, [0, 0, 0], [0, 0, 0]),
    (False, [2, 11, 4], [18, 100, 36]),
    (False, [], []),
    (True, [], []),
]


@pytest.mark.parametrize(
    "reverse, raw, expected",
    DEFAULT_NORMALIZE,
    ids=[f"{'rev' if r else 'fwd'}-{s}" for r, s, _ in DEFAULT_NORMALIZE],
)
def test_default_normalize_score(reverse, raw, expected):
    scores = [NodeScore(f"n{i}", s) for i, s in enumerate(raw)]
    status = default_normalize_score(MAX_NODE_SCORE, reverse, scores)
    assert status.is_success
    assert [s.score for s in scores] == expected
    assert [s.name for s in scores] == [f"n{i}" for i in range(len(raw))]


@pytest.mark.parametrize(
    "reverse, raw, expected",
    DEFAULT_NORMALIZE,
    ids=[f"{'rev' if r else 'fwd'}-{s}" for r, s, _ in DEFAULT_NORMALIZE],
)
def test_default_normalize_values_batch_path(reverse, raw, expected):
    """The list-based batch twin must give the same answers and leave its input alone."""
    original = list(raw)
    assert list(default_normalize_values(MAX_NODE_SCORE, reverse, raw)) == expected
    assert raw == original


def test_max_node_score_is_100():
    assert MAX_NODE_SCORE == 100
