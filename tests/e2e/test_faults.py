"""Faults end the way they end for the in-tree plugins (issue #32), through the real
kube-scheduler.

Each scenario runs twice in the same test on the same cluster and workload: with the
extender, and with kube-scheduler's in-tree plugins (the control). The workload is the
issue's: 12 nodes in 3 zones, one node per zone tainted `tier=5:NoSchedule`; `web`
pods with hard zone and hostname spread (`nodeTaintsPolicy: Honor`) and `tier` pods
that tolerate the taint (for the extender `tier Gt 3`, KEP-5471; for the control,
whose v1.30 plugins know no Gt, the equivalent `tier Equal 5`), with the same spread
over their own label. The faults:

- `frozen`: the extender's watch streams fall silent (TCP open), a node per zone is
  tainted, then the burst comes;
- `prebind`: some binds are held 1.3 s after the scheduler assumed the pod (a long
  PreBind: the wiretap holds our `bind` verb call; the control's binding POST is held
  in the API);
- `pause`: the extender (for the control: kube-scheduler) is stopped 1.3 s (SIGSTOP);
- `slow-late`: every binding write takes 2-8 s, and lands even if its client left;
- `slow-lost`: every binding write takes 2-8 s, and is dropped if its client left (the
  API server cancels the request's context); neither kube-scheduler's binder nor the
  extender's leaves, so neither loses one;
- `restore`: between two bursts, etcd is restored to a backup taken after the first
  (the API had moved on since): the API answers 504 "Too large resource version" to
  every client that resumes from a resourceVersion it handed out before; the second
  burst comes right after. (A backup older than some bindings would unbind pods and
  have them scheduled again; the in-tree control does not always end that within
  `maxSkew`, so it makes no comparison.)

Each run ends with every pod the control binds bound, final skew within `maxSkew` per
group over its eligible nodes, and (the extender) 0 violations judged at the state
version behind each verdict (`X-Extender-State-Version`, recorded by the wiretap).
`make test` runs each once at a small size; `make test-long` runs each ten times at the
issue's size, two at a time. With `FAULTS_FIGURES=path` each run appends one JSON line
of figures (docs/operate/failures.md quotes them).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import pytest

from testing import truth
from testing.harness import HOST, ZONE, E2ECluster, key_of, node, pod, spread, wait_for

OPENAPI_CLIENT = "OpenAPI-Generator"  # the User-Agent of the extender's kubernetes client
TIER = {"key": "tier", "value": "5", "effect": "NoSchedule"}
MAINTENANCE = {"key": "maintenance", "value": "now", "effect": "NoSchedule"}
HOLD = 1.3  # seconds a held bind waits, and the pause
SIZES = {"short": (45, 9), "long": (150, 30)}  # (web, tier) pods
RUNS = 10  # make test-long: each scenario this many times


@dataclass
class Run:
    """One profile's run of a scenario, and what the test reads of it."""

    cluster: E2ECluster
    pods: list[dict]
    bound: dict = field(default_factory=dict)
    seconds: float = 0.0
    figures: dict = field(default_factory=dict)

    @property
    def in_tree(self) -> bool:
        return self.cluster.in_tree


def nodes() -> list[dict]:
    return [node(f"n-{z}{i}", z, cpu="64", taints=[TIER] if i == 0 else ())
            for z in "abc" for i in range(4)]


def workload(web: int, tier: int, in_tree: bool, seed: int) -> list[dict]:
    """`web` and `tier` pods, interleaved at random (the same order for both profiles)."""
    toleration = ({"key": "tier", "operator": "Equal", "value": "5", "effect": "NoSchedule"} if in_tree
                  else {"key": "tier", "operator": "Gt", "value": "3", "effect": "NoSchedule"})

    def spreads(app: str) -> list[dict]:
        labels = {"app": app}
        return [spread(ZONE, labels, nodeTaintsPolicy="Honor"), spread(HOST, labels, nodeTaintsPolicy="Honor")]

    pods = [pod(f"web-{i}", {"app": "web"}, spread=spreads("web")) for i in range(web)]
    pods += [pod(f"tier-{i}", {"app": "tier"}, spread=spreads("tier"), tolerations=[toleration])
             for i in range(tier)]
    random.Random(seed).shuffle(pods)
    return pods


def eligible(group: str) -> Callable[[dict], bool]:
    """The nodes a group's spread counts at the end (`nodeTaintsPolicy: Honor`)."""
    def ok(n: dict) -> bool:
        keys = {t["key"] for t in (n.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoSchedule"}
        return not (keys - ({"tier"} if group == "tier" else set()))
    return ok


def bound_count(cluster: E2ECluster, keys) -> int:
    return sum(1 for s in cluster.pod_state(keys).values() if s[0])


def settle(run: Run, timeout: float) -> None:
    """Until every pod is bound (or `timeout`); the bound pods and the time taken."""
    keys = [key_of(p) for p in run.pods]
    started = time.monotonic()
    wait_for(lambda: bound_count(run.cluster, keys) == len(keys), timeout=timeout, interval=0.1)
    time.sleep(1.0)  # a late write or a re-bind shows up now, not after the checks
    run.bound = {k: s[0] for k, s in run.cluster.pod_state(keys).items() if s[0]}
    run.seconds = time.monotonic() - started


def final_skews(run: Run) -> dict[str, int]:
    out = {}
    for group in ("web", "tier"):
        keys = [key_of(p) for p in run.pods if p["metadata"]["labels"]["app"] == group]
        for name, key in (("zone", ZONE), ("host", HOST)):
            out[f"{group}-{name}"] = truth.final_skew(run.cluster.api, keys, key, eligible(group))
    return out


def metric(cluster: E2ECluster, name: str, labels: str = "") -> float:
    try:
        return cluster.extender_metric(name, labels)
    except (AssertionError, OSError):
        return 0.0


# --- the faults: each acts on a started run, returns when its burst may finish ----------


def after_bound(run: Run, count: int, timeout: float = 120.0) -> None:
    keys = [key_of(p) for p in run.pods]
    assert wait_for(lambda: bound_count(run.cluster, keys) >= count, timeout=timeout, interval=0.02), \
        f"fewer than {count} pods bound before the fault\n{run.cluster.logs()}"


MAINTAINED = ("n-a1", "n-b1", "n-c1")  # one node per zone: the spread stays satisfiable


def frozen(run: Run) -> None:
    run.cluster.api.freeze_watches(agent=OPENAPI_CLIENT)  # the extender's streams (none in the control)
    time.sleep(0.2)
    rvs = [run.cluster.set_taints(name, [MAINTENANCE])["metadata"]["resourceVersion"] for name in MAINTAINED]
    run.figures["taint_rv"] = max(int(rv) for rv in rvs)


def held(run: Run) -> set[str]:
    """The pods whose binds are held: every 15th of the burst, at most 4."""
    return {p["metadata"]["name"] for p in run.pods[5::15][:4]}


def prebind(run: Run) -> None:
    names = held(run)
    if run.in_tree:  # kube-scheduler's own binder: its binding POST is held in the API
        run.cluster.api.faults.delay_for = lambda line: HOLD if any(
            f"/pods/{n}/binding" in line for n in names) else 0.0
    else:  # ours: the scheduler's call to the bind verb is held
        run.cluster.tap.hold_bind = lambda key: HOLD if key[1] in names else 0.0


def pause(run: Run) -> None:
    after_bound(run, len(run.pods) // 4)
    process = run.cluster.scheduler if run.in_tree else run.cluster.extender
    os.killpg(process.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(HOLD)
    finally:
        os.killpg(process.proc.pid, signal.SIGCONT)


def slow_binds(late: bool) -> Callable[[Run], None]:
    """Every binding write takes 2-8 s; one whose client went away meanwhile is applied
    at the end anyway (`late`) or not at all (the request's context is cancelled)."""
    def slow(run: Run) -> None:
        faults = run.cluster.api.faults
        draws = random.Random(7)
        faults.delay_for = lambda line: draws.uniform(2.0, 8.0) if line.startswith("POST") and \
            line.endswith("/binding") else 0.0
        faults.late_writes = late
    return slow


def restore(run: Run) -> None:
    """Between two bursts: a backup once the first is bound, the API moves on (events,
    and a pod no scheduler handles, which every Pod watch sees), the backup is
    restored: every client resumes from a resourceVersion the API has not reached (504
    Too large resource version). The second burst comes once every client is back."""
    after_bound(run, len(run.pods) // 2)
    api = run.cluster.api
    backup = api.checkpoint()
    for i in range(30):
        api.create("events", {"metadata": {"name": f"after-backup-{i}", "namespace": "default"},
                              "involvedObject": {"kind": "Node", "name": "n-a1"}, "reason": "Test"})
    added = metric(run.cluster, "extender_watch_events_total", 'kind="Pod",type="ADDED"')
    api.create("pods", pod("outsider", {"app": "outsider"}, scheduler="no-such-scheduler"))
    if not run.in_tree:  # our Pod watch is past the backup
        assert wait_for(lambda: metric(run.cluster, "extender_watch_events_total",
                                       'kind="Pod",type="ADDED"') > added, timeout=60)
    time.sleep(0.2)  # kube-scheduler's too (no way to ask it)
    seen = api.agents_total
    run.figures["restored_objects"] = api.restore(backup)
    run.figures["restored_rv"] = backup.rv
    run.figures["restored_at"] = time.monotonic()
    # the second burst once every client is back on the restored server: relisted, or
    # with a pod watch it accepted (a pod written before that could be skipped by a watch
    # still ahead of the restore, as with a real API server: no fault of the plugins
    # under test; kube-scheduler's own event posts can bring the resourceVersion up to
    # its watch's within the watch cache's wait, and then it never relists)
    clients = ["kube-scheduler"] + ([] if run.in_tree else [OPENAPI_CLIENT])
    assert wait_for(lambda: all(_back(api, seen, agent) for agent in clients), timeout=120), \
        f"a client never came back to the restored API server ({seen} requests before the restore); " \
        f"the clients' requests since: {[(w, line) for w, line in api.agents_since(seen) if 'kube-scheduler' in w or OPENAPI_CLIENT in w][-30:]}"


def _back(api, seen: int, agent: str) -> bool:
    """Has `agent` listed the pods since request number `seen`, or had a pod watch accepted
    by the restored server? (A watch from a resourceVersion ahead of the restore is
    accepted too once writes reach it within the watch cache's wait: kube-scheduler's own
    event posts can, so the request line's resourceVersion cannot say. The request count
    is a count, not a position: positions in the double's bounded record move once it
    holds 10,000 requests.)"""
    for who, line in api.agents_since(seen):
        if agent not in who or not line.startswith("GET /api/v1/pods?"):
            continue
        query = parse_qs(urlsplit(line[4:]).query)
        if "watch" not in query and query.get("limit") != ["1"]:
            return True
    return api.watching_since_restore(agent, "pods")


SCENARIOS: dict[str, Callable[[Run], None]] = {
    "frozen": frozen, "prebind": prebind, "pause": pause,
    "slow-late": slow_binds(late=True), "slow-lost": slow_binds(late=False), "restore": restore,
}
BEFORE_BURST = {"frozen", "prebind", "slow-late", "slow-lost"}  # faults set before the pods are created
BETWEEN_BURSTS = {"restore"}  # half the pods before the fault, half after


# --- one run, then the comparison -------------------------------------------------------


def run_profile(start_cluster, scenario: str, in_tree: bool, size: str, seed: int) -> Run:
    cluster = start_cluster(nodes(), in_tree=in_tree)
    run = Run(cluster, workload(*SIZES[size], in_tree=in_tree, seed=seed))
    fault = SCENARIOS[scenario]
    if scenario in BEFORE_BURST:
        fault(run)
    started = time.monotonic()
    split = len(run.pods) // 2 if scenario in BETWEEN_BURSTS else len(run.pods)
    cluster.create(*run.pods[:split])
    if scenario not in BEFORE_BURST:
        fault(run)
    cluster.create(*run.pods[split:])
    settle(run, timeout=240)
    run.seconds = time.monotonic() - started
    return run


def figures(run: Run, scenario: str, report: truth.Report | None) -> dict:
    out = {"scenario": scenario, "profile": "in-tree" if run.in_tree else "extender",
           "pods": len(run.pods), "bound": len(run.bound), "seconds": round(run.seconds, 1),
           "skew": final_skews(run)}
    if not run.in_tree:
        calls = list(run.cluster.tap.calls)
        refused = [c for c in calls if c.error and c.verb in ("filter", "bind")]
        out["errors"] = dict(Counter(_reason(c.error) for c in refused))
        out["refusing_s"] = round(refused[-1].at - refused[0].at, 1) if refused else 0.0
        out["slowest_answer_s"] = {verb: round(max((c.seconds for c in calls if c.verb == verb), default=0.0), 2)
                                   for verb in ("filter", "bind")}
        out["pending_binds"] = metric(run.cluster, "extender_bindings_total", 'result="pending"')
        out["suspicions"] = metric(run.cluster, "extender_watch_suspicions_total")
        missed = [c.missed for c in report.checked]
        out["decisions"] = len(missed)
        out["stale_decisions"] = sum(1 for m in missed if m > 0.5)
        out["max_missed"] = round(max(missed, default=0.0), 2)
        out["violations"] = len(report.violations)
    restored = run.figures.get("restored_at")
    if restored is not None:  # the second burst, from the restore to its last pod bound
        binds = [c.at for c in run.cluster.api.journal if c.resource == "pods" and c.at > restored
                 and c.type == "MODIFIED" and c.obj["spec"].get("nodeName")]
        out["after_restore_s"] = round(max(binds, default=restored) - restored, 1)
    for k, v in run.figures.items():
        if not k.endswith("_at"):
            out[k] = v
    return out


def _reason(error: str) -> str:
    """A short name for an Error answer's kind."""
    for needle, name in (("not bound yet", "inflight"), ("not confirmed", "unconfirmed"), ("stale", "stale"),
                         ("not synced", "not_synced"), ("binding", "bind"), ("HTTP", "http")):
        if needle in error:
            return name
    return "other"


def record(figs: dict) -> None:
    path = os.environ.get("FAULTS_FIGURES")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(figs, sort_keys=True) + "\n")


CONTROL_RUNS = 3  # the control's runs at most, for one that ends clean


def clean_control(start_cluster, scenario: str, size: str, seed: int) -> Run:
    """The control's run, repeated (at most CONTROL_RUNS times) until it binds every
    pod. kube-scheduler's own race, not ours: when a taint written just before the
    burst reaches its cache after a pod's first attempt failed on it, no later event
    requeues that pod (v1.30's queueing hints skip taint additions), and it waits out
    --pod-max-in-unschedulable-pods-duration (5 min). The comparison needs a control
    run that ended clean; the extender's run is never repeated."""
    for attempt in range(CONTROL_RUNS):
        control = run_profile(start_cluster, scenario, in_tree=True, size=size, seed=seed)
        record(figures(control, scenario, None))
        if len(control.bound) == len(control.pods) or attempt == CONTROL_RUNS - 1:
            return control
        control.cluster.stop()
    raise AssertionError("unreachable")


def check_scenario(start_cluster, scenario: str, size: str, seed: int) -> None:
    control = clean_control(start_cluster, scenario, size, seed)
    assert len(control.bound) == len(control.pods), \
        f"the control left pods unbound {CONTROL_RUNS} times: the scenario is not one the in-tree plugins " \
        f"end clean\n{control.cluster.logs()}"
    assert max(final_skews(control).values()) <= 1, final_skews(control)
    control.cluster.stop()

    ours = run_profile(start_cluster, scenario, in_tree=False, size=size, seed=seed)
    report = ours.cluster.replay()
    figs = figures(ours, scenario, report)
    record(figs)
    missing = sorted(k[1] for k in control.bound.keys() - ours.bound.keys())
    assert not missing, f"{len(missing)} pods the control binds are not bound: {missing[:5]}\n{figs}\n" \
                        f"{ours.cluster.logs()}"
    assert report.violations == [], [str(v) for v in report.violations[:5]]
    assert len(report.checked) == report.binds, "a placement without the state version behind its verdict"
    skews = final_skews(ours)
    assert max(skews.values()) <= 1, (skews, figs)
    CHECKS[scenario](ours, report)


# --- what each scenario must also show (that its fault happened and was handled) --------


def frozen_checks(run: Run, report: truth.Report) -> None:
    assert metric(run.cluster, "extender_watch_errors_total", 'reason="silent"') >= 1, \
        "the frozen streams were never found"
    # every verdict read a state that had the taints: the first pod kube-scheduler
    # asked about was newer than the frozen Pod watch, which was then probed
    refusals = [c for c in run.cluster.tap.calls if c.verb == "filter" and "not confirmed" in c.error]
    assert refusals, "no verdict was refused while the watch was unconfirmed"
    stale = [c for c in report.checked if c.versions.get("Node", 0) < run.figures["taint_rv"]]
    assert stale == [], stale[:3]
    assert not any(node in MAINTAINED for node in run.bound.values())


def prebind_checks(run: Run, report: truth.Report) -> None:
    held_pods = held(run)
    bind_at = {c.pod[1]: c.at for c in run.cluster.tap.calls if c.verb == "bind" and c.pod[1] in held_pods}
    assert held_pods <= bind_at.keys(), "a held pod never came back through bind"


def pause_checks(run: Run, report: truth.Report) -> None:
    assert run.cluster.extender.alive()


def slow_checks(run: Run, report: truth.Report) -> None:
    faults = run.cluster.api.faults
    assert metric(run.cluster, "extender_bindings_total", 'result="pending"') >= 1, \
        "no bind was answered before the API: it was never slow"
    # the extender never gave up on a binding call, so the API never had to decide
    # what to do with a write whose client left
    assert faults.fired["aborted_writes"] == faults.fired["late_writes"] == 0
    assert metric(run.cluster, "extender_bindings_total", 'result="error"') == 0
    assert metric(run.cluster, "extender_assumed_pods") == 0


def restore_checks(run: Run, report: truth.Report) -> None:
    assert run.figures["restored_objects"] >= 30  # the events written after the backup
    assert metric(run.cluster, "extender_watch_errors_total", 'reason="too large"') >= 1, \
        "the server's resourceVersion behind ours was never noticed"
    assert metric(run.cluster, "extender_watch_relists_total", 'kind="Pod"') >= 2, "the pods were never relisted"


CHECKS: dict[str, Callable[[Run, truth.Report], None]] = {
    "frozen": frozen_checks, "prebind": prebind_checks, "pause": pause_checks,
    "slow-late": slow_checks, "slow-lost": slow_checks, "restore": restore_checks,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_fault_ends_like_the_in_tree_plugins(start_cluster, scenario):
    check_scenario(start_cluster, scenario, "short", seed=1)


# two at a time: `make test-long` gives each group one xdist worker
FULL_SIZE = [pytest.param(s, i, id=f"{s}-{i}", marks=pytest.mark.xdist_group(f"e2e/test_faults-{i % 2}"))
             for i in range(RUNS) for s in SCENARIOS]


@pytest.mark.long
@pytest.mark.parametrize("scenario, run_index", FULL_SIZE)
def test_fault_ends_like_the_in_tree_plugins_at_full_size(start_cluster, scenario, run_index):
    check_scenario(start_cluster, scenario, "long", seed=100 + run_index)


def test_a_frozen_watch_with_a_spread_that_cannot_be_met_ends_as_the_control_does(start_cluster, monkeypatch):
    """The frozen scenario with one node tainted instead of one per zone: 2, 3 and 3
    eligible nodes per zone, so zone and hostname spread (maxSkew 1 each) cannot both
    hold for every web pod, and kube-scheduler's own plugins (the control) leave pods
    Unschedulable ("4 node(s) had untolerated taint(s), 8 node(s) didn't match pod
    topology spread constraints"). The extender, its watches frozen meanwhile, may
    refuse them too, but never wrongly: the truth judges each "no node fits" answer at
    its state version (`NoNodeFits`), as it judges each placement."""
    monkeypatch.setitem(globals(), "MAINTAINED", ("n-a1",))  # what `frozen` taints
    control = Run(start_cluster(nodes(), in_tree=True), workload(*SIZES["short"], in_tree=True, seed=1))
    frozen(control)
    control.cluster.create(*control.pods)
    assert control.cluster.wait_settled(control.pods, timeout=240).unschedulable, \
        "the control bound every pod: the spread could be met, the scenario proves nothing"
    control.cluster.stop()
    ours = Run(start_cluster(nodes()), workload(*SIZES["short"], in_tree=False, seed=1))
    frozen(ours)
    ours.cluster.create(*ours.pods)
    outcome = ours.cluster.wait_settled(ours.pods, timeout=240)
    report = ours.cluster.replay()
    assert report.violations == [], ours.cluster.explain(report)
    assert outcome.unschedulable and ours.cluster.tap.refusals(), "no pod was refused: nothing was judged"
    assert metric(ours.cluster, "extender_watch_errors_total", 'reason="silent"') >= 1, "the watches never froze"
