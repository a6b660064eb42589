"""Spec §5: every upstream PodTopologySpread unit-test case (and D01-D05), as data.

Each case is run through both implementations: the fast path (pod label index, batch
`filter_nodes`/`score_nodes`) and the per-node reference path.
"""

from __future__ import annotations

import ast
import math

import pytest
from pts_harness import (
    NAME,
    Case,
    case_world,
    cases_with,
    constraint,
    counts_of,
    groups,
    label_map,
    pod_obj,
    statuses_of,
)

from extender.framework import Code
from extender.model.parse import existing_pod_from_dict
from extender.plugins.podtopologyspread import filtering
from extender.plugins.podtopologyspread.common import EligibleMasks
from extender.plugins.podtopologyspread.filtering import indexed_counts, reference_counts
from extender.plugins.podtopologyspread.index import spread_index
from extender.plugins.podtopologyspread.scoring import PRE_SCORE_KEY
from extender.plugins.podtopologyspread.selector import parse_label_selector
from extender.state import ClusterSnapshot


def ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]


def both_counts(w, st):
    index = spread_index(w.snapshot)
    fast = indexed_counts(index, w.pod, st.constraints, EligibleMasks(st.inclusion, index.nodes))
    ref = reference_counts(w.snapshot, w.pod, st.constraints, st.inclusion)
    return fast, ref


def pre_filter(w):
    state = w.state()
    _, status = w.plugin.pre_filter(state, w.pod, w.nodeset())
    return state, status


PREFILTER = cases_with("expect PreFilter")


@pytest.mark.parametrize("case", PREFILTER, ids=ids(PREFILTER))
def test_prefilter_counts(case: Case) -> None:
    w = case_world(case)
    state, status = pre_filter(w)
    expected = case.f["expect PreFilter"]
    if expected == "Skip":
        assert status.code is Code.SKIP
        return
    assert status.is_success, status
    st = state.read(filtering.PRE_FILTER_KEY)
    fast, ref = both_counts(w, st)
    want = counts_of(expected.removeprefix("counts "))
    assert fast.per_domain == want
    assert ref.per_domain == want
    if "hard constraints after defaulting" in case.f:
        text = case.f["hard constraints after defaulting"]
        wanted = [constraint(g) for g in groups(text) if g[0].isdigit()]
        got = [(c.max_skew, c.topology_key, c.selector) for c in st.constraints]
        assert got == [
            (c["maxSkew"], c["topologyKey"], parse_label_selector(c["labelSelector"])) for c in wanted
        ]


UPDATES = cases_with("expect counts after update")


def _update(case: Case) -> tuple[str, str, dict, str, str]:
    key = "then AddPod" if "then AddPod" in case.f else "then RemovePod"
    head, _, node = case.f[key].rpartition(" on ")
    name, _, rest = head.partition("{")
    ns = "default"
    labels_text = "{" + rest
    if "@ns=" in labels_text:
        labels_text, _, ns = labels_text.partition("@ns=")
    return key, name, label_map(labels_text), node, ns


@pytest.mark.parametrize("case", UPDATES, ids=ids(UPDATES))
def test_counts_after_add_or_remove(case: Case) -> None:
    """AddPod/RemovePod: the counts of a snapshot with the pod added/removed; AddPod
    also through the nominated-pod path (which is upstream's AddPod)."""
    key, name, labels, node, ns = _update(case)
    want = counts_of(case.f["expect counts after update"])
    if key == "then AddPod":
        extra = [pod_obj(name, labels, node, ns)]
        w = case_world(case, extra=extra)
        # nominated form: the same pod waiting for `node`, priority above the incoming pod
        base = case_world(case)
        state, status = pre_filter(base)
        st = state.read(filtering.PRE_FILTER_KEY)
        counts, _ = both_counts(base, st)
        nominee = existing_pod_from_dict(pod_obj(name, labels, "", ns, nominated=node, priority=10))
        nominated = filtering.nominated_by_node([nominee], base.pod)
        added = filtering._with_nominated(st, counts, base.snapshot.nodes.by_name[node], nominated.get(node, []))
        assert (added or counts).per_domain == want
    else:
        w = case_world(case)
        objs_pods = [p for p in w.snapshot.pods]
        for i, p in enumerate(objs_pods):
            if p.node_name == node and dict(p.labels) == labels and p.namespace == ns:
                del objs_pods[i]
                break
        w.snapshot = ClusterSnapshot(w.snapshot.nodes.nodes, objs_pods, w.snapshot.workloads)
    state, status = pre_filter(w)
    st = state.read(filtering.PRE_FILTER_KEY)
    fast, ref = both_counts(w, st)
    assert fast.per_domain == want
    assert ref.per_domain == want


FILTERS = cases_with("expect Filter")


@pytest.mark.parametrize("fast", [True, False], ids=["batch", "reference"])
@pytest.mark.parametrize("case", FILTERS, ids=ids(FILTERS))
def test_filter(case: Case, fast: bool) -> None:
    w = case_world(case)
    out = w.framework(fast).run_filter(w.state(), w.pod, w.nodeset())
    assert not out.error
    want = statuses_of(case.f["expect Filter"])
    got = {n: str(out.statuses[n].code) if n in out.statuses else "Success" for n in want}
    assert got == want
    for status in out.statuses.values():
        expected = {
            Code.UNSCHEDULABLE: filtering.ERR_REASON_CONSTRAINTS_NOT_MATCH,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE: filtering.ERR_REASON_NODE_LABEL_NOT_MATCH,
        }[status.code]
        assert status.reasons == (expected,)


PRESCORES = cases_with("expect PreScore")


@pytest.mark.parametrize("case", PRESCORES, ids=ids(PRESCORES))
def test_prescore_state(case: Case) -> None:
    w = case_world(case)
    names = [n.strip() for n in case.f["candidate (filtered) nodes"].split(",")]
    state = w.state()
    status = w.plugin.pre_score(state, w.pod, w.nodeset(names))
    assert status.is_success
    st = state.read(PRE_SCORE_KEY)
    text = case.f["expect PreScore"]
    ignored = ast.literal_eval(text.partition("ignored=")[2].partition(", seeded")[0])
    seeded = ast.literal_eval(text.partition("per constraint=")[2].partition(", weight")[0])
    sizes = ast.literal_eval(text.partition("size=")[2])
    assert st.ignored == set(ignored)
    assert [sorted(s) if s is not None else [] for s in st.seeded] == seeded
    assert st.weights == [math.log(s + 2) for s in sizes]


SKIPS = cases_with("expect")


@pytest.mark.parametrize("case", SKIPS, ids=ids(SKIPS))
def test_prescore_skip(case: Case) -> None:
    w = case_world(case)
    names = [n.strip() for n in case.f["candidate (filtered) nodes"].split(",")]
    assert w.plugin.pre_score(w.state(), w.pod, w.nodeset(names)).code is Code.SKIP
    out = w.framework(True).run_score(w.state(), w.pod, w.nodeset(names))
    assert out.scores[NAME] is None


SCORES = cases_with("expect normalized scores")


@pytest.mark.parametrize("fast", [True, False], ids=["batch", "reference"])
@pytest.mark.parametrize("case", SCORES, ids=ids(SCORES))
def test_normalized_scores(case: Case, fast: bool) -> None:
    w = case_world(case)
    names = [n.strip() for n in case.f["candidate (filtered) nodes"].split(",")]
    out = w.framework(fast).run_score(w.state(), w.pod, w.nodeset(names))
    assert not out.error
    want = {k: int(v) for k, v in statuses_of(case.f["expect normalized scores"]).items()}
    assert dict(zip(names, out.scores[NAME], strict=True)) == want


def _case(ident: str) -> Case:
    return next(c for c in cases_with("args") if c.id == ident)


def test_pf26_production_gates_merge_match_label_keys() -> None:
    """NOTE of PF26: with MatchLabelKeysInPodTopologySpread on the result differs."""
    w = case_world(_case("PF26"), production=True)
    state, status = pre_filter(w)
    fast, ref = both_counts(w, state.read(filtering.PRE_FILTER_KEY))
    assert fast.per_domain == ref.per_domain == [{"zone1": 0, "zone2": 0}]


@pytest.mark.parametrize("fast", [True, False])
def test_sc26_production_gates_all_nodes_100(fast: bool) -> None:
    case = _case("SC26")
    w = case_world(case, production=True)
    names = [n.strip() for n in case.f["candidate (filtered) nodes"].split(",")]
    out = w.framework(fast).run_score(w.state(), w.pod, w.nodeset(names))
    assert list(out.scores[NAME]) == [100, 100, 100, 100]


def test_catalogue_is_complete() -> None:
    """144 cases, every one exercised by some test above."""
    cases = cases_with("args")
    assert len(cases) == 144
    covered = {c.id for c in PREFILTER + UPDATES + FILTERS + PRESCORES + SKIPS + SCORES}
    assert covered == {c.id for c in cases}
