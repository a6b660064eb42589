"""Slim answers (the default) against full ones (`--slim-answers false`), pod by pod, on
a generated cluster under churn: the same feasible nodes; failure maps only when no node
fits, and then the full answer's; every host's score (absent = 0, as kube-scheduler
reads it) the full score minus one base (the most common), so the same hosts have the highest
total whatever the other scorers add (docs/reference/semantics.md 1.10)."""

from __future__ import annotations

import random

import orjson
import pytest

from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.engine import Extender
from extender.model.parse import existing_pod_from_dict
from extender.state import ClusterSnapshot, StaticSource
from perf.engine import extend_snapshot
from perf.generate import generate_cluster
from perf.workloads import mixed_pods, no_two_alike
from testing.scores import best_hosts, host_scores, slim_base


@pytest.fixture(scope="module")
def cluster():
    objects = generate_cluster(300, 2000, seed=5)[0]["items"]
    return ClusterSnapshot.from_objects(objects), [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]


def winners(totals: dict[str, int]) -> set[str]:
    top = max(totals.values())
    return {name for name, total in totals.items() if total == top}


@pytest.mark.parametrize("distinct", [False, True])
def test_slim_answers_carry_what_the_scheduler_reads_of_the_full_ones(cluster, distinct):
    snapshot, names = cluster
    source = StaticSource(snapshot)
    slim, full = (Extender(Config(slim_answers=s), source) for s in (True, False))
    rng = random.Random(11)
    pods = mixed_pods(60, start=500)
    pods = no_two_alike(pods) if distinct else pods
    nothing_fits = 0
    for pod in pods:
        args = ExtenderArgs(pod, None, names)
        got, want = orjson.loads(slim.filter(args)), orjson.loads(full.filter(args))
        assert got["NodeNames"] == want["NodeNames"] and got["Error"] == want["Error"] == ""
        feasible = want["NodeNames"]
        if not feasible:
            nothing_fits += 1
            assert got == want  # the scheduler may explain and preempt: every failing node
            continue
        assert got["FailedNodes"] == got["FailedAndUnresolvableNodes"] == {}
        args = ExtenderArgs(pod, None, feasible)
        got, want = orjson.loads(slim.prioritize(args)), orjson.loads(full.prioritize(args))
        base = slim_base(want)
        assert host_scores(feasible, got) == {h["Host"]: h["Score"] - base for h in want}
        assert len(got) == sum(1 for h in want if h["Score"] != base)
        # prioritizeNodes: total = in-tree scores + Score x weight x 10; any in-tree scores
        in_tree = {name: rng.randrange(0, 400, 7) for name in feasible}
        weight = rng.choice([1, 2, 5])
        assert winners({n: in_tree[n] + 10 * weight * s for n, s in host_scores(feasible, got).items()}) == \
            winners({n: in_tree[n] + 10 * weight * s for n, s in host_scores(feasible, want).items()})
        bound = {**pod, "spec": {**pod["spec"], "nodeName": best_hosts(feasible, got)[0]},
                 "status": {"phase": "Running"}}
        source.set(extend_snapshot(source.snapshot(), existing_pod_from_dict(bound)))
    assert nothing_fits < len(pods)
