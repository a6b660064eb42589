"""Combining plugin scores into the extender's range."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from extender.framework import ScoreOutcome
from extender.framework.scoring import combine

W = {"TaintToleration": 3, "NodeAffinity": 2, "PodTopologySpread": 2}


def outcome(**scores) -> ScoreOutcome:
    n = max(len(v) for v in scores.values() if v is not None)
    return ScoreOutcome(nodes=list(range(n)), scores=scores)


def test_skipped_plugins_do_not_dilute():
    o = outcome(TaintToleration=[100, 50, 0], NodeAffinity=None, PodTopologySpread=None)
    assert combine(o, W, "scaled") == [10, 5, 0]


def test_scaled_rounds_the_weighted_sum_half_up():
    o = outcome(TaintToleration=[100, 0, 100], NodeAffinity=[0, 100, 25], PodTopologySpread=None)
    # (300, 200, 350) / 500 * 10 = 6, 4, 7
    assert combine(o, W, "scaled") == [6, 4, 7]


def test_in_tree_mode_reproduces_weighted_sum_over_ten():
    o = outcome(TaintToleration=[100, 67, 0], NodeAffinity=[18, 100, 36], PodTopologySpread=[0, 0, 0])
    assert combine(o, W, "in-tree") == [34, 40, 7]  # (336, 401, 72) / 10 rounded half up


def test_no_active_plugin_scores_zero():
    assert combine(outcome(TaintToleration=None, NodeAffinity=[]), W) == []


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), min_size=1, max_size=30))
def test_scaled_scores_preserve_order_and_range(pairs):
    o = outcome(TaintToleration=[a for a, _ in pairs], NodeAffinity=[b for _, b in pairs])
    scores = combine(o, W, "scaled")
    totals = [3 * a + 2 * b for a, b in pairs]
    assert all(0 <= s <= 10 for s in scores)
    for i in range(len(pairs)):
        for j in range(len(pairs)):
            if totals[i] > totals[j]:
                assert scores[i] >= scores[j]
