"""Pods a burst leaves unschedulable (`--inflight-wait 0`) are unschedulable in the truth.

Without in-flight accounting a burst with hard zone + hostname spread can reach a state
where the zone constraint admits only the least-loaded zone's nodes and the hostname
constraint only the least-loaded nodes, in other zones: no node fits, forever. These
tests check that such "no node" answers are the truth's and not a stale cached answer:
the counting check (`perf.spread_truth.fitting_nodes`) against the reference engine on
states with and without a fitting node, and the whole loop live through the simulator.
"""

from __future__ import annotations

import random
from collections import Counter

from harness import HOST, ZONE, cluster, hard_spread, node, pod

from perf.spread_truth import Moment, TruthCheck, fitting_nodes, new_totals
from tests.doubles.apiserver import FakeApiServer

ZONES = ("a", "b", "c")
NODES = [node(f"n-{z}{i}", z, cpu="64") for z in ZONES for i in range(4)]
DOMAIN = {ZONE: {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in NODES},
          HOST: {n["metadata"]["name"]: n["metadata"]["name"] for n in NODES}}
LABELS = {"app": "burst0"}
SPREAD = [hard_spread(ZONE, LABELS), hard_spread(HOST, LABELS)]


def state(per_node: dict[str, int]) -> tuple[list[dict], Moment]:
    """The burst's pods bound `per_node[node]` times per node, plus one pending pod."""
    pods, bound = [], {}
    for name, n in per_node.items():
        for _ in range(n):
            key = ("default", f"burst0-{len(pods)}")
            pods.append(pod(key[1], LABELS, spread=SPREAD))
            bound[key] = name
    pods.append(pod(f"burst0-{len(pods)}", LABELS, spread=SPREAD))
    placed = dict(Counter(bound.values()))
    moment = Moment("burst0", placed, bound, ("default", pods[-1]["metadata"]["name"]),
                    fitting_nodes(placed, DOMAIN), 0)
    return pods, moment


def reference(pods: list[dict], moment: Moment) -> set[str]:
    check = TruthCheck(api=None, domain=DOMAIN)
    return check.reference(NODES, {("default", p["metadata"]["name"]): p for p in pods}, moment)


def test_the_believed_deadlock_is_one_for_the_reference_engine_too():
    # zone a is least loaded (8 vs 9, 9): only a's nodes pass the zone constraint; the
    # least-loaded node is n-b0 (1): only it passes the hostname one. Disjoint.
    counts = {"n-a0": 2, "n-a1": 2, "n-a2": 2, "n-a3": 2, "n-b0": 1, "n-b1": 3, "n-b2": 3, "n-b3": 2,
              "n-c0": 2, "n-c1": 2, "n-c2": 3, "n-c3": 2}
    pods, moment = state(counts)
    assert moment.fits == set()
    assert reference(pods, moment) == set()
    # one pod less on n-a0 makes it the least loaded node of the least loaded zone
    pods, moment = state({**counts, "n-a0": 1})
    assert moment.fits == {"n-a0"}
    assert reference(pods, moment) == {"n-a0"}


def test_counted_fits_equal_the_reference_engine_on_random_states():
    rand = random.Random(7)
    seen_empty = seen_some = 0
    for _ in range(40):
        counts = {n["metadata"]["name"]: rand.randint(0, 4) for n in NODES}
        pods, moment = state(counts)
        assert reference(pods, moment) == moment.fits, counts
        seen_empty += not moment.fits
        seen_some += bool(moment.fits)
    assert seen_empty and seen_some  # both verdicts were exercised


def test_a_wrong_no_node_answer_is_counted_as_wrongly_unschedulable():
    api = FakeApiServer()
    for n in NODES:
        api.create("nodes", n)
    p = api.create("pods", pod("burst0-0", LABELS, spread=SPREAD))  # nothing bound: every node fits
    check = TruthCheck(api, DOMAIN, binding=lambda: 0)
    check.burst("burst0", [("default", "burst0-0")])
    check.record(("default", "burst0-0"))
    totals = new_totals()
    check.verify("burst0", api.objects("nodes"), api.objects("pods"), totals)
    assert p["metadata"]["name"] == "burst0-0"
    assert totals["unschedulable_checked"] == 1 and totals["wrongly_unschedulable"] == 1
    assert totals["reference_disagrees"] == 0 and totals["final_truth_admits_a_node"] == 1


def test_bursts_without_inflight_accounting_leave_only_truly_unschedulable_pods(tmp_path):
    totals = new_totals()
    with cluster(NODES, tmp_path, inflight_wait=0, max_attempts=3,
                 on_unschedulable=lambda key: check.record(key)) as (api, served, sched):
        check = TruthCheck(api, DOMAIN, binding=lambda: sched._binding)
        for b in range(2):
            labels = {"app": f"burst{b}"}
            spread = [hard_spread(ZONE, labels), hard_spread(HOST, labels)]
            pods = [pod(f"burst{b}-{i}", labels, spread=spread) for i in range(200)]
            check.burst(f"burst{b}", [("default", p["metadata"]["name"]) for p in pods])
            sched.submit(pods)
            sched.run(timeout=120)
            check.verify(f"burst{b}", api.objects("nodes"), api.objects("pods"), totals)
        stats = sched.stats
    print(f"\n--inflight-wait 0: {stats.scheduled} scheduled, {stats.unschedulable} unschedulable: {totals}")
    assert not sched.errors, sched.errors[:5]
    assert stats.scheduled + stats.unschedulable == 400
    assert totals["unschedulable_checked"] == stats.unschedulable
    assert totals["wrongly_unschedulable"] == 0, totals["examples"]
    assert totals["reference_disagrees"] == 0, totals["examples"]
