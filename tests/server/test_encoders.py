"""The template encoders (`filter_json`, `host_priority_json`) and the slim ones
(`slim_filter_json`, `slim_priority_json`) against the plain dict-plus-orjson encoding,
on arbitrary names (escapes included), verdicts and scores."""

from __future__ import annotations

from collections import Counter
from unittest.mock import patch

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.api import answers as templates
from extender.api.answers import (
    FEW_SCORES,
    filter_json,
    host_priority_json,
    slim_filter_json,
    slim_priority_json,
)
from extender.api.templatecache import new_templates
from extender.api.wire import filter_result, host_priority_list
from extender.framework import Code, Status
from extender.framework.verdicts import Verdict
from extender.model import Node
from extender.state.nodeset import NodeSet
from testing.scores import host_scores

STATUSES = [
    Status(Code.UNSCHEDULABLE, ("node(s) didn't match pod topology spread constraints",)),
    Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) had untolerated taint(s)",)),
    Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ('a "quoted" \\ message\n',)),
    Status(Code.UNSCHEDULABLE, ("ünïcode",)),
]
names_st = st.lists(st.text(min_size=1, max_size=12), min_size=0, max_size=40, unique=True)


def shared_set(names: list[str]) -> NodeSet:
    """The candidates over a universe that holds them in another order (as NodeNames
    over a snapshot), with templates (a candidate set many requests share)."""
    universe = NodeSet([Node(n) for n in reversed(names)]).universe
    nodes = NodeSet(None, names=names, universe=universe)
    nodes.templates = new_templates()
    return nodes


@settings(max_examples=200, deadline=None)
@given(names=names_st, data=st.data())
def test_filter_json_equals_the_dict_encoding(names, data):
    nodes = shared_set(names)
    status_of = np.array(data.draw(st.lists(st.integers(-1, len(STATUSES) - 1), min_size=len(names),
                                            max_size=len(names))), dtype=np.int32)
    verdict = Verdict(nodes, status_of, list(STATUSES))
    extra = [(STATUSES[1], ["unknown \"x\""])] if data.draw(st.booleans()) else []
    want = filter_result(verdict.feasible_names(), None, verdict.failures() + extra)
    got = orjson.loads(filter_json(verdict, extra))
    assert got == want
    assert filter_json(verdict, extra) == filter_json(verdict, extra)  # remembered: same bytes
    for field in ("FailedNodes", "FailedAndUnresolvableNodes"):
        assert list(got[field]) == list(want[field])  # same key order too


@settings(max_examples=200, deadline=None)
@given(names=names_st, data=st.data())
def test_host_priority_json_equals_the_dict_encoding(names, data):
    nodes = shared_set(names)
    scores = data.draw(st.lists(st.integers(0, 10**6), min_size=len(names), max_size=len(names)))
    for _ in range(2):  # the second call fills the cached template
        got = orjson.loads(host_priority_json(nodes, np.array(scores, dtype=np.int64)))
        assert got == host_priority_list(names, scores)


@settings(max_examples=200, deadline=None)
@given(names=names_st, data=st.data())
def test_host_priority_json_small_scores_from_the_digit_table(names, data):
    """Scores below 10**4 (every plugin's) are written from a lookup table of digits."""
    nodes = shared_set(names)
    top = data.draw(st.sampled_from([9, 99, 100, 999, 9999]))
    scores = data.draw(st.lists(st.integers(0, top), min_size=len(names), max_size=len(names)))
    got = orjson.loads(host_priority_json(nodes, np.array(scores, dtype=np.int64)))
    assert got == host_priority_list(names, scores)


# names as a cluster's are (similar lengths: padded rows apply), or anything at all
slim_names_st = st.lists(st.text(alphabet="abcdefgh-0123456789", min_size=6, max_size=8), max_size=40,
                         unique=True) | names_st


@settings(max_examples=300, deadline=None)
@given(names=slim_names_st, data=st.data(), shared=st.booleans(), padded=st.booleans())
def test_slim_filter_json_is_the_full_answer_without_failures(names, data, shared, padded):
    nodes = shared_set(names) if shared else NodeSet([Node(n) for n in names])
    status_of = np.array(data.draw(st.lists(st.integers(-1, len(STATUSES) - 1), min_size=len(names),
                                            max_size=len(names))), dtype=np.int32)
    verdict = Verdict(nodes, status_of, list(STATUSES))
    with patch.object(templates, "PADDED_MIN", 1 if padded else templates.PADDED_MIN):
        for _ in range(2):  # the second from the padded rows kept with the set
            got = orjson.loads(slim_filter_json(verdict))
            assert got == filter_result(verdict.feasible_names(), None, [])
            assert list(got) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]


@settings(max_examples=400, deadline=None)
@given(names=slim_names_st, data=st.data(), shared=st.booleans(), padded=st.booleans(), signed=st.booleans())
def test_slim_priorities_are_the_full_scores_shifted_by_one_base(names, data, shared, padded, signed):
    """Every host reads (as kube-scheduler reads it: absent = 0) its full score minus the
    base: the lowest score, or `signed` the most common one (the lowest of equals).
    Only hosts off the base are listed, each once: in request order from padded rows or
    with many distinct scores, else highest score first."""
    nodes = shared_set(names) if shared else NodeSet([Node(n) for n in names])
    top = data.draw(st.sampled_from([0, 1, 10, 100, 1500, 10**6]))
    scores = data.draw(st.lists(st.integers(0, top), min_size=len(names), max_size=len(names)))
    low = min(scores, default=0)
    seen = Counter(scores)
    base = min((s for s in seen if seen[s] == max(seen.values())), default=0) if signed else low
    off = [n for n, s in zip(names, scores, strict=True) if s != base]
    by_score = sorted(off, key=lambda n: (-scores[names.index(n)], names.index(n)))
    with patch.object(templates, "PADDED_MIN", 1 if padded else templates.PADDED_MIN):
        for _ in range(2):
            got = orjson.loads(slim_priority_json(nodes, np.array(scores, dtype=np.int64), signed=signed))
            assert host_scores(names, got) == {n: s - base for n, s in zip(names, scores, strict=True)}
            hosts = [e["Host"] for e in got]
            width = max(len(str(low - base)), len(str(max(scores, default=0) - base)))
            rows = templates.padded_rows(nodes, b"", b",") is not None and width <= templates.LOOKUP_WIDTH
            assert hosts == (off if rows or len({s for s in scores if s != base}) > FEW_SCORES else by_score)
            assert all(list(e) == ["Host", "Score"] and e["Score"] != 0 for e in got)
            assert signed or all(e["Score"] > 0 for e in got)


def test_a_signed_answer_lists_the_hosts_below_the_top_when_most_score_the_top():
    nodes = shared_set([f"n{i}" for i in range(8)])
    scores = np.array([30, 30, 30, 30, 30, 12, 30, 0], dtype=np.int64)
    assert orjson.loads(slim_priority_json(nodes, scores, signed=True)) == [
        {"Host": "n5", "Score": -18}, {"Host": "n7", "Score": -30}]
    assert len(orjson.loads(slim_priority_json(nodes, scores))) == 7  # the lowest as base: all others


def test_remembered_answers_follow_the_result_not_the_candidate_set():
    nodes = shared_set(["a", "b", "c"])
    for scores in ([1, 2, 3], [3, 2, 1], [1, 2, 3], [0, 0, 10]):
        got = orjson.loads(host_priority_json(nodes, np.array(scores, dtype=np.int64)))
        assert [e["Score"] for e in got] == scores
    for status_of in ([-1, 0, 1], [1, 0, -1], [-1, 0, 1], [-1, -1, -1]):
        verdict = Verdict(nodes, np.array(status_of, dtype=np.int32), list(STATUSES))
        assert orjson.loads(filter_json(verdict)) == filter_result(verdict.feasible_names(), None,
                                                                   verdict.failures())
    # Same codes, other messages: a different answer.
    other = [Status(s.code, ("other " + s.msg,)) for s in STATUSES]
    verdict = Verdict(nodes, np.array([0, 0, 0], dtype=np.int32), other)
    assert orjson.loads(filter_json(verdict))["FailedNodes"] == dict.fromkeys("abc", "other " + STATUSES[0].msg)


def test_an_answer_is_kept_from_its_second_sighting_so_one_offs_do_not_evict_repeats():
    """Under churn most results are seen once (new scores after every bind): they leave
    a marker, not an answer, so the answers that repeat stay in the LRU."""
    names = [f"node-{i:03d}" for i in range(100)]
    nodes = shared_set(names)
    nodes.templates = new_templates(40_000)  # room for ~15 answers of ~2.4 KB
    repeat = Verdict(nodes, np.zeros(100, dtype=np.int32), list(STATUSES))
    first = filter_json(repeat)
    assert all(k[0] == "seen" for k, _, _ in nodes.templates.entries())  # seen once: a marker only
    assert filter_json(repeat) is not first  # written again, now kept
    kept = filter_json(repeat)
    assert filter_json(repeat) is kept
    rng = np.random.default_rng(7)
    for i in range(200):  # one-off verdicts, 20 between repeats: more than the cache holds
        once = Verdict(nodes, rng.integers(-1, len(STATUSES), 100).astype(np.int32), list(STATUSES))
        assert orjson.loads(filter_json(once)) == filter_result(once.feasible_names(), None, once.failures())
        if i % 20 == 19:
            assert filter_json(repeat) is kept  # the repeating answer survives


def test_the_every_node_set_gets_a_larger_template_budget_within_the_cache():
    from extender.api.templatecache import FULL_TEMPLATE_BYTES, template_budget
    from extender.caching import memory_share, set_memory_limit

    assert template_budget(5000, full=True) > template_budget(5000)
    assert template_budget(15000, full=True) <= FULL_TEMPLATE_BYTES
    try:
        set_memory_limit(64 << 20)  # a small --memory-limit-bytes: the set must still be cached
        assert template_budget(15000, full=True) <= memory_share("candidate-sets") // 8
    finally:
        set_memory_limit(256 << 20)


def test_score_tails_cover_negative_and_positive_ranges_as_they_grow():
    """The tails table is replaced whole when a range falls outside it (threads read it
    unlocked): every range asked, in any order, gets its own scores' text."""
    for low, high in [(0, 5), (-3000, 10), (-5, 5000), (0, 2000), (-2, 2)]:
        values = np.array([low, high, 0, (low + high) // 2], dtype=np.int64)
        assert templates._score_tails(values, low, high).tolist() == [
            b',"Score":%d},' % v for v in values.tolist()]
