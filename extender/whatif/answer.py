"""The what-if answer: the engine run on the state before and after the changes, in the
words of the drift report and `extender explain`.

    {"changes": [{"change", "nodes" | "selector" | "volume", "selected"}],
     "nodes": {"touched", "removed": [...], "examples": [...]},
     "running": {"evaluated", "pods": [{"namespace", "name", "node", "change", "severity",
                 "before": [violation...], "after": [violation...]}],
                 "displaced": [{"namespace", "name", "node"}], "totals": [...]},
     "pending": {"evaluated", "pods": [{"namespace", "name", "feasible": {"before", "after"},
                 "lost", "gained", "reasons": [explain's summary reasons]}], "omittedPods"},
     "spread": {"enabled", "workloads": [{"namespace", "example", "pods", "constraints":
                 [{"topologyKey", "maxSkew", "before": {"skew", "domains"}, "after": ...}]}]},
     "pods": [{"pod", "before": explain summary, "after": explain summary}]}

Running pods are those the drift report tracks (`DriftTracker.running_on`: the pods on
the touched nodes, and those whose claims are bound to a touched volume), each
evaluated by the drift report's own `Evaluator` on its node before and after; a pod
whose violations differ is listed with both, `change` saying whether it would violate a
requirement it meets now ("violates", `severity` the worst new one as the drift report
grades them), stop violating one ("stops violating"), both ("violates differently"), or
fail the same requirements for other reasons ("still violates": a taint's new value).
With hard topology spread in the shapes (`--drift-topology-spread`; always offline),
the drift report's spread check runs on both states too, and each workload (pods of one
namespace and constraint shape) whose domain counts change is listed with its skew
per constraint (largest minus smallest matching-pod count over the eligible domains).

Pending pods (from the API server or the cluster file) are run through the filter on
every node of each state, once per distinct pod spec; those whose feasible nodes change
are listed, with explain's reasons for the nodes they lose. The request's own pods and
workload templates get explain's summary (where they could go) before and after.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from extender import metrics
from extender.api.candidates import resolve
from extender.drift.evaluate import REQUIRED, SEVERITIES, Violation, gauge_reason
from extender.drift.shapes import Key, Running
from extender.drift.spread import SpreadDrift
from extender.drift.tracker import spread_checker
from extender.engine import Extender
from extender.explain import diagnose, explain_pod, snapshot_without, summarize
from extender.matching.tolerations import TolerationMatcher
from extender.model.parse import ModelError
from extender.plugins.podtopologyspread import filtering
from extender.plugins.podtopologyspread.args import DO_NOT_SCHEDULE
from extender.plugins.podtopologyspread.common import (
    ConstraintError,
    EligibleMasks,
    Inclusion,
    constraints_for,
)
from extender.plugins.podtopologyspread.index import spread_index
from extender.state import ClusterSnapshot
from extender.whatif.changes import Hypothesis, Plan

EXAMPLES = 3
MAX_PENDING = 1000  # pending pods read and evaluated at most
MAX_LISTED = 1000  # pods listed per section (the rest counted)
MAX_TOUCHED_LISTED = 100
REMOVED = "node removed by the what-if"
ORDER = {s: i for i, s in enumerate(SEVERITIES)}


class TimeLimit:
    """The wall-clock limit of one what-if: past it, pending pods are no longer
    evaluated and the answer says how many were left out (`incomplete`)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.until = None if not seconds else clock() + seconds

    def passed(self) -> bool:
        return self.until is not None and self.clock() > self.until


def _labels(violations: Iterable[Violation]) -> set[tuple[str, str, str]]:
    return {(v.plugin, gauge_reason(v), v.severity) for v in violations}


def running_pods(tracker: Any, hyp: Hypothesis, base: ClusterSnapshot) -> dict[str, Any]:
    """Running pods whose violations change (see the module docstring)."""
    evaluator = tracker.evaluator
    after_snap = hyp.snapshot
    affected = tracker.running_on(hyp.nodes, hyp.volumes)
    seen: dict[tuple, tuple] = {}
    changed: dict[Key, dict[str, Any]] = {}
    displaced = []
    for key, running in affected:
        node_b = base.nodes.by_name.get(running.node)
        if node_b is None:
            continue  # not in the state: the drift report has nothing to say of it either
        node_a = after_snap.nodes.by_name.get(running.node)
        if node_a is None:
            displaced.append({"namespace": key[0], "name": key[1], "node": running.node})
            continue
        group = (running.node, running.shape, key[0] if running.claims else "", running.claims)
        found = seen.get(group)
        if found is None:
            before = evaluator.evaluate(running.shape, node_b, key[0], running.claims, base.volume_layer)
            after = evaluator.evaluate(running.shape, node_a, key[0], running.claims, after_snap.volume_layer)
            found = seen[group] = (before, after)
        if found[0] != found[1]:
            changed[key] = {"node": running.node, "before": list(found[0]), "after": list(found[1])}
    return {"evaluated": len(affected), "changed": changed, "displaced": displaced}


def spread_changes(tracker: Any, engine: Extender, base: ClusterSnapshot, after: ClusterSnapshot,
                   touched: Iterable[str], removed: set[str]) -> tuple[dict[Key, dict[str, Any]], list[dict[str, Any]]]:
    """Hard spread violations that change (by the drift report's spread check), and
    the skew of each workload whose counts change. A pod's verdict reads its node and
    its constraints' domain counts: only the pods of a workload whose counts change, or
    that run on a touched node, are checked again."""
    fallback, profiles = engine.plugins_by_profile()
    spread = spread_checker(fallback, profiles)
    if spread is None:  # no profile has the extender run PodTopologySpread
        return {}, []
    pods = [(k, r) for k, r in tracker.running_pods() if spread.wanted(r)]
    workloads, affected = skews(spread, base, after, pods, set(touched))
    before = spread.run(base, affected)
    after_found = spread_checker(fallback, profiles).run(after, [(k, r) for k, r in affected if r.node not in removed])
    changed: dict[Key, dict[str, Any]] = {}
    for key in before.keys() | after_found.keys():
        node, b = before.get(key, ("", ()))
        node_a, a = after_found.get(key, ("", ()))
        if b != a and (node or node_a) not in removed:
            changed[key] = {"node": node or node_a, "before": list(b), "after": list(a)}
    return changed, workloads


def _skew(counts: filtering.Counts) -> list[dict[str, int]]:
    out = []
    for per_domain in counts.per_domain:
        values = per_domain.values()
        out.append({"skew": (max(values) - min(values)) if values else 0, "domains": len(per_domain)})
    return out


def skews(spread: SpreadDrift, base: ClusterSnapshot, after: ClusterSnapshot, pods: list[tuple[Key, Running]],
          touched: set[str]) -> tuple[list[dict[str, Any]], list[tuple[Key, Running]]]:
    """Per workload (namespace, constraint shape) whose per-domain counts change: each
    hard constraint's skew before and after; and the pods whose verdict may change
    (those of such workloads, and those on touched nodes)."""
    groups: dict[tuple, list] = {}
    converted: dict[tuple, tuple] = {}  # (namespace, shape, labels) -> constraints
    for key, running in pods:
        slim = base.pod_layer.get(*key)
        if slim is None:
            continue
        memo = (key[0], running.shape, tuple(sorted(slim.labels.items())))
        constraints = converted.get(memo)
        if constraints is None:
            pod = dataclasses.replace(running.shape.pod, namespace=key[0], name=key[1], labels=slim.labels,
                                      node_name=running.node)
            try:
                constraints = tuple(constraints_for(pod, DO_NOT_SCHEDULE, spread.plugin_of(running).args, base,
                                                      spread.gates)[0])
            except ConstraintError:
                constraints = ()
            converted[memo] = constraints
        if constraints:
            group = groups.get((key[0], running.shape, constraints))
            if group is None:
                pod = dataclasses.replace(running.shape.pod, namespace=key[0], name=key[1], labels=slim.labels,
                                          node_name=running.node)
                group = groups[(key[0], running.shape, constraints)] = [pod, []]
            group[1].append((key, running))
    index_b, index_a = spread_index(base), spread_index(after)
    out, affected = [], []
    for (namespace, _, constraints), (pod, members) in sorted(groups.items(), key=lambda g: (g[0][0], g[1][0].name)):
        inclusion = Inclusion(pod, TolerationMatcher(pod.tolerations, spread.gates, spread.cel), spread.gates)
        cb = filtering.indexed_counts(index_b, pod, list(constraints), EligibleMasks(inclusion, index_b.nodes))
        ca = filtering.indexed_counts(index_a, pod, list(constraints), EligibleMasks(inclusion, index_a.nodes))
        if cb.per_domain == ca.per_domain:
            affected += [(k, r) for k, r in members if r.node in touched]
            continue
        affected += members
        sb, sa = _skew(cb), _skew(ca)
        out.append({"namespace": namespace, "example": pod.name, "pods": len(members), "constraints": [
            {"topologyKey": c.topology_key, "maxSkew": c.max_skew, "selector": str(c.selector),
             "before": b, "after": a} for c, b, a in zip(constraints, sb, sa, strict=True)]})
    return out, affected


def _pod_entry(key: Key, change: dict[str, Any]) -> dict[str, Any]:
    before, after = _labels(change["before"]), _labels(change["after"])
    new, gone = after - before, before - after
    if new:
        kind = "violates differently" if gone else "violates"
    else:
        kind = "stops violating" if gone else "still violates"  # the same requirements, other details
    severity = min((s for _, _, s in new), key=ORDER.__getitem__) if new else None
    return {"namespace": key[0], "name": key[1], "node": change["node"], "change": kind, "severity": severity,
            "before": [v.to_json() for v in change["before"]], "after": [v.to_json() for v in change["after"]]}


def _totals(changes: dict[Key, dict[str, Any]]) -> list[dict[str, Any]]:
    before: Counter = Counter()
    after: Counter = Counter()
    for change in changes.values():
        before.update(_labels(change["before"]))
        after.update(_labels(change["after"]))
    return [{"plugin": p, "reason": r, "severity": s, "before": before[(p, r, s)], "after": after[(p, r, s)]}
            for p, r, s in sorted(before.keys() | after.keys())]


def pending_key(raw: dict[str, Any]) -> bytes:
    """Pods that schedule alike (one workload's): the same namespace, labels,
    annotations and spec apart from their names."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    return orjson.dumps([meta.get("namespace") or "default", meta.get("labels"), meta.get("annotations"),
                         meta.get("ownerReferences"), raw.get("spec")], option=orjson.OPT_SORT_KEYS)


def _feasible(engine: Extender, pod: Any, snapshot: ClusterSnapshot, names: list[str] | None = None) -> list[str]:
    cands = resolve(snapshot, [n.name for n in snapshot.nodes.nodes] if names is None else names)
    outcome = engine.run_filter(engine.new_state(snapshot), pod, cands)
    return [] if outcome.error else list(outcome.feasible_names)


def node_local(engine: Extender, pod: Any, snapshot: ClusterSnapshot, volumes_changed: bool) -> bool:
    """Whether the filter's verdict on a node, for this pod, reads that node alone (and
    the volumes, when none changed): no hard topology spread, whose counts read every
    node's labels and pods (a plugin's record says so: `reads_other_nodes`). Then only
    the touched nodes' verdicts can change."""
    if volumes_changed and pod.volume_claims:
        return False
    return not engine.reads_other_nodes(pod, snapshot)


def pending_pods(engine: Extender, pending: list[dict[str, Any]], base: ClusterSnapshot, hyp: Hypothesis,
                 time_limit: TimeLimit, examples: int) -> dict[str, Any]:
    """Pending pods whose feasible nodes change, with the reasons for the nodes lost."""
    answers: dict[bytes, dict[str, Any] | None] = {}
    out, evaluated, omitted = [], 0, 0
    for raw in pending:
        if time_limit.passed():
            omitted += 1
            continue
        meta = raw.get("metadata") or {}
        group = pending_key(raw)
        if group not in answers:
            try:
                pod = engine.parse_pod(raw)
            except ModelError:
                answers[group] = None
                continue
            answers[group] = _pending_change(engine, pod, base, hyp, examples)
        evaluated += 1
        found = answers[group]
        if found is not None:
            out.append({"namespace": meta.get("namespace") or "default", "name": meta.get("name") or "", **found})
    return {"evaluated": evaluated, "pods": out[:MAX_LISTED], "omittedPods": max(0, len(out) - MAX_LISTED),
            "incomplete": omitted}


def _pending_change(engine: Extender, pod: Any, base: ClusterSnapshot, hyp: Hypothesis,
                    examples: int) -> dict[str, Any] | None:
    """The filter over every node before and after (after: over the touched nodes only
    when the verdicts are `node_local`)."""
    snap_b, snap_a = snapshot_without(base, pod), snapshot_without(hyp.snapshot, pod)
    before = _feasible(engine, pod, snap_b)
    if node_local(engine, pod, snap_b, bool(hyp.volumes)):
        touched = [n for n in hyp.nodes if n in snap_a.nodes.by_name]
        now = [n for n in before if n not in hyp.nodes] + (_feasible(engine, pod, snap_a, touched) if touched else [])
    else:
        now = _feasible(engine, pod, snap_a)
    now_set, before_set = set(now), set(before)
    if before_set == now_set:  # (a removed node's place is taken by another: the order may differ)
        return None
    lost = [n for n in before if n not in now_set]
    gone = [n for n in lost if n not in snap_a.nodes.by_name]
    kept = [n for n in lost if n in snap_a.nodes.by_name]
    reasons: list[dict[str, Any]] = []
    if kept:
        diag = diagnose(engine, pod, snap_a, resolve(snap_a, kept))
        reasons = summarize(diag, [], examples).get("reasons", [])
    if gone:
        reasons.append({"reason": REMOVED, "plugin": "WhatIf", "code": "Unschedulable", "nodes": len(gone),
                        "groups": [{"details": [], "nodes": len(gone), "examples": gone[:examples]}]})
    return {"feasible": {"before": len(before), "after": len(now)}, "lost": len(lost),
            "gained": sum(1 for n in now if n not in before_set), "reasons": reasons}


def what_if(engine: Extender, tracker: Any, base: ClusterSnapshot, plan: Plan, hyp: Hypothesis,
            pending: list[dict[str, Any]], time_limit: TimeLimit | None = None, examples: int = EXAMPLES) -> dict[str, Any]:
    """The answer (module docstring) for `plan`, already applied to `base` as `hyp`."""
    time_limit = time_limit or TimeLimit(None)
    removed = {name for name, (_, node) in hyp.nodes.items() if node is None}
    with metrics.quiet():
        running = running_pods(tracker, hyp, base)
        changes = running["changed"]
        spread: dict[str, Any] = {"enabled": bool(tracker.shapes.spread)}
        if tracker.shapes.spread:
            spread_changed, workloads = spread_changes(tracker, engine, base, hyp.snapshot, hyp.nodes, removed)
            for key, change in spread_changed.items():
                mine = changes.setdefault(key, {"node": change["node"], "before": [], "after": []})
                if "spread" in mine:
                    continue
                mine["before"] = [*mine["before"], *change["before"]]
                mine["after"] = [*mine["after"], *change["after"]]
                mine["spread"] = True
            spread["workloads"] = workloads
        pods = [_pod_entry(key, changes[key]) for key in sorted(changes)]
        pods.sort(key=lambda p: (ORDER.get(p["severity"], len(ORDER)), p["namespace"], p["name"]))
        pending_answer = pending_pods(engine, pending, base, hyp, time_limit, examples)
        asked = [{"pod": f"{(p.get('metadata') or {}).get('namespace') or 'default'}/"
                         f"{(p.get('metadata') or {}).get('name') or ''}",
                  "before": where_to(engine, p, base, examples), "after": where_to(engine, p, hyp.snapshot, examples)}
                 for p in plan.pods]
    touched = sorted(hyp.nodes)
    return {
        "changes": [{**c.to_json(), "selected": n} for c, n in zip(plan.changes, hyp.selected, strict=True)],
        "nodes": {"touched": len(touched), "removed": sorted(removed)[:MAX_TOUCHED_LISTED],
                  "examples": touched[:MAX_TOUCHED_LISTED]},
        "running": {"evaluated": running["evaluated"], "pods": pods[:MAX_LISTED],
                    "omittedPods": max(0, len(pods) - MAX_LISTED),
                    "displaced": running["displaced"][:MAX_LISTED], "totals": _totals(changes),
                    "required": sum(1 for p in pods if p["severity"] == REQUIRED)},
        "pending": pending_answer,
        "spread": spread,
        "pods": asked,
    }


def where_to(engine: Extender, raw: dict[str, Any], snapshot: ClusterSnapshot, examples: int) -> dict[str, Any]:
    """Explain's summary of a pod on one state: where it could go."""
    try:
        return explain_pod(engine, raw, None, snapshot, examples, every_node=False)["summary"]
    except ModelError as exc:
        return {"error": f"the pod cannot be explained: {exc}"}
