"""The double's scenarios on the real control plane, both version pairs (`make test-long`):
the same test functions (tests/e2e/test_*.py), given `start_real_cluster` instead of
`start_cluster`. kube-apiserver validates, defaults and admits every object, RBAC
authorizes every call of kube-scheduler and the extender (the shipped roles, the
ServiceAccount's token), the scheduler runs its shipped configuration with leader
election; the truth is replayed from the API server's watch (`testing.realapi`).

Where a real server cannot hold what the double's scenario writes, the real one is
asserted instead: v1.30.3 refuses `Gt` in `spec.tolerations` (KEP-5471 story 2's pod).
"""

from __future__ import annotations

import pytest
import yaml

from extender.state.loader import load_objects
from testing.apiserver import ApiError
from testing.realcluster import serve_endpoints
from tests.e2e import test_bursts as bursts
from tests.e2e import test_explain as explain
from tests.e2e import test_node_changes as node_changes
from tests.e2e import test_preemption as preemption
from tests.e2e import test_stories as stories
from tests.e2e import test_whatif as whatif

pytestmark = pytest.mark.long


def spec_numeric_tolerations(story) -> bool:
    return any(t.get("operator") in ("Gt", "Lt") for p in stories.story_pods(story)
               for t in p["spec"].get("tolerations") or [])


@pytest.mark.parametrize("story", stories.STORIES, ids=[p.name for p in stories.STORIES])
def test_story(story, start_real_cluster, pair):
    if spec_numeric_tolerations(story) and not pair.spec_gt_lt:
        cluster = start_real_cluster(load_objects(story / "cluster.yaml"))
        with pytest.raises(ApiError) as refused:
            cluster.create(*stories.story_pods(story))
        assert refused.value.code == 422 and 'operator: Unsupported value: "Gt"' in str(refused.value)
        assert yaml.safe_load((story / "expected.yaml").read_text())["pods"]  # a story, not an empty one
        return
    stories.test_story_through_kube_scheduler(story, start_real_cluster)


def patient(start_real_cluster):
    """`start_real_cluster` with the extender's in-flight wait at 10 s instead of 1 s.
    The extender waits that long for a pod it answered to come back through `bind`
    before it answers the next pod of the same spread without it (docs/reference/
    bind-preempt.md): a latency bound, which this suite's busy machine (load 12-18 on 2
    cores, the test process relaying the verbs) crossed now and then (a filter-to-bind gap
    of 2.9 s, then one placement at skew 2, the extender's warning "pod answered but never
    bound" just before it). 10 s is above kube-scheduler's 5 s httpTimeout on purpose: a
    filter that waits longer is an error kube-scheduler retries, and the retry waits again
    for the same late bind (the wait counts from that pod's answer). The property checked
    stays the same: 0 placements over maxSkew."""
    def start(objects=(), extender_flags=(), **kwargs):
        return start_real_cluster(objects, extender_flags=["--inflight-wait", "10", *extender_flags], **kwargs)
    return start


def test_burst_of_1000_with_hard_spread(start_real_cluster):
    bursts.test_burst_of_1000_keeps_max_skew_with_a_tainted_zone_honoured(patient(start_real_cluster))


def test_burst_without_honor(start_real_cluster):
    bursts.test_without_honor_the_untolerated_zone_blocks_the_spread(patient(start_real_cluster))


def test_taint_cordon_and_relabel_mid_burst(start_real_cluster):
    node_changes.test_taint_cordon_and_relabel_mid_burst(patient(start_real_cluster))


@pytest.mark.parametrize("extended", [True, False], ids=["extender", "in-tree"])
def test_preemption_victims(start_real_cluster, extended):
    preemption.test_victims_are_exactly_those_of_the_in_tree_plugins(start_real_cluster, extended)


def test_preemption_one_tolerated_node_among_300(start_real_cluster):
    preemption.test_the_one_tolerated_full_node_among_300_is_always_a_candidate(start_real_cluster)


def test_live_explain_and_kubectl_extender_through_the_service_proxy(start_real_cluster, pair, monkeypatch):
    """`kubectl extender why` through kube-apiserver's own service proxy: the Service's
    Endpoints point at this machine's address (`serve_endpoints`). The scenario's pod
    has `Gt` in spec: on v1.30.3 the refusal is what there is to see (the annotation's
    `Gt` is explained under the annotation's name, tests/e2e/test_real_webhook.py)."""
    if not pair.spec_gt_lt:
        with pytest.raises(ApiError) as refused:
            start_real_cluster([]).create(explain.pod("picky", tolerations=[
                {"key": explain.SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}]))
        assert 'operator: Unsupported value: "Gt"' in str(refused.value)
        return
    monkeypatch.setattr(explain, "add_service_proxy", serve_endpoints)
    explain.test_the_explanation_counts_what_the_scheduler_counts(start_real_cluster)


def test_live_explain_counts_spread_failures(start_real_cluster):
    explain.test_spread_failures_are_counted_as_the_scheduler_counts_them(start_real_cluster)


def test_what_if_says_what_drift_and_filter_say_on_the_real_control_plane(start_real_cluster, pair):
    """The what-if's four stories (SLA, kernel, zone cordon, volume annotation) with
    kube-apiserver's own TokenReview, SubjectAccessReview and RBAC. The cluster's pods
    have `Gt` in spec: on v1.30.3 the refusal is what there is to see."""
    if not pair.spec_gt_lt:
        with pytest.raises(ApiError) as refused:
            start_real_cluster([]).create(whatif.PODS["gt"])
        assert 'operator: Unsupported value: "Gt"' in str(refused.value)
        return
    whatif.test_what_if_says_what_drift_and_filter_say_once_the_change_is_made(start_real_cluster)
