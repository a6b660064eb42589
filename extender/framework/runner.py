"""Runs the extension points in order for one pod and one set of candidate nodes.

Mirrors `pkg/scheduler/framework/runtime/framework.go` and `schedule_one.go`:
PreFilter (Skip switches a plugin's Filter off; a PreFilterResult restricts the
nodes; a rejection rejects every node), Filter (first failing plugin in profile order
decides a node's status), PreScore (Skip switches Score off), Score and
NormalizeScore (scores must land in [0, 100]).

Metrics: `scheduler_plugin_evaluation_total` counts Filter and Score per node, as
upstream does, but is incremented once per plugin and status with the node count;
`scheduler_plugin_execution_duration_seconds` is observed only when the cycle state
says so (10% of requests, as upstream samples 10% of cycles), once per plugin and
extension point (upstream observes per node; a batch observation is what a batched
plugin can honestly measure).
"""

from __future__ import annotations

import time
from collections.abc import Sequence, Sized
from dataclasses import dataclass, field

import numpy as np

from extender import metrics
from extender.framework import verdicts
from extender.framework.cycle_state import CycleState
from extender.framework.interface import MAX_NODE_SCORE, NodeScore, PreFilterResult, points_of
from extender.framework.status import Code, Status
from extender.model import Pod
from extender.state.nodeset import NodeSet


class FilterOutcome:
    """Feasible names (request order) and the failing nodes with their statuses.

    The run leaves a `verdict` (each candidate's status, as vectors); `failures`
    (grouped by status, what the wire needs) and `statuses` (a map, for explain and
    tests) are derived from it on first use, plus failures added later (`extra`, e.g.
    unknown nodes). `per_plugin` holds every plugin's failures (name -> status) when the
    run was asked to evaluate all plugins (explain)."""

    __slots__ = ("per_plugin", "skipped", "error", "verdict", "extra", "_feasible", "_failures", "_statuses")

    def __init__(self) -> None:
        self.per_plugin: dict[str, dict[str, Status]] = {}
        self.skipped: set[str] = set()
        self.error = ""
        self.verdict: verdicts.Verdict | None = None
        self.extra: verdicts.Failures = []
        self._feasible: list[str] | None = []
        self._failures: verdicts.Failures | None = None
        self._statuses: dict[str, Status] | None = None

    @property
    def feasible_names(self) -> list[str]:
        if self._feasible is None:
            self._feasible = self.verdict.feasible_names()
        return self._feasible

    @property
    def failures(self) -> verdicts.Failures:
        if self._failures is None:
            base = self.verdict.failures() if self.verdict is not None else []
            self._failures = base + self.extra
        return self._failures

    @property
    def statuses(self) -> dict[str, Status]:
        if self._statuses is None:
            self._statuses = verdicts.as_map(self.failures)
        return self._statuses

    def any_feasible(self) -> bool:
        """A candidate passes every filter (without building the list of names)."""
        if self._feasible is not None:
            return bool(self._feasible)
        return bool(self.verdict.feasible().any())

    def set_verdict(self, verdict: verdicts.Verdict) -> None:
        self.verdict, self._feasible, self._failures, self._statuses = verdict, None, None, None

    def add_failures(self, status: Status, names: list[str]) -> None:
        """More failing nodes (names not already failing), e.g. unknown ones."""
        if names:
            self.extra.append((status, names))
            self._failures = self._statuses = None


@dataclass(slots=True)
class ScoreOutcome:
    """Normalized scores per plugin aligned with the scored nodes (the candidates, in
    request order); None = skipped. The batch path gives int64 vectors, the reference
    path lists."""

    nodes: Sized = field(default_factory=list)  # the scored candidates (a NodeSet): their number
    scores: dict[str, Sequence[int] | None] = field(default_factory=dict)
    error: str = ""


def _record_evaluations(plugin: str, point: str, profile: str, code: Code, n: int) -> None:
    """Count `n` evaluations into scheduler_plugin_evaluation_total (not inside
    `metrics.quiet()`: explain runs)."""
    if n and metrics.counting():
        metrics.child(metrics.PLUGIN_EVALUATION_TOTAL, plugin, point, profile, str(code)).inc(n)


def _observe(state: CycleState, plugin: str, point: str, status: Code, started: float) -> None:
    if not state.record_plugin_metrics:
        return
    metrics.child(metrics.PLUGIN_EXECUTION_DURATION, plugin, point, str(status)).observe(
        time.perf_counter() - started
    )


def _reference(plugin, state: CycleState, pod: Pod, nodes: NodeSet) -> verdicts.Masks:
    """A plugin's per-node reference Filter over the candidates, as masks."""
    fails = {}
    for node in nodes:
        status = plugin.filter(state, pod, node)
        if not status.is_success:
            fails[node.name] = status
    return verdicts.masks_of(fails, nodes)


def _unsatisfied(plugins: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"node(s) didn't satisfy plugin(s) [{plugins}]",))


class Framework:
    """One scheduling profile: ordered plugins, score weights, and which form of their
    per-node points runs: the batch forms (`fast`) or the per-node reference forms.
    `profile` (its schedulerName) labels the scheduler_* metrics of its runs.

    Registration checks each plugin's contract (`interface.points_of`: a plugin
    claiming a point without all its methods is refused) and builds the per-point
    lists, in profile order, once."""

    def __init__(self, plugins: Sequence, weights: dict[str, int], fast: bool = True,
                 profile: str = "default-scheduler") -> None:
        self.plugins = list(plugins)
        self.weights = weights
        self.fast = fast
        self.profile = profile
        points = {p.name: points_of(p) for p in self.plugins}
        self.pre_filters = [p for p in self.plugins if "PreFilter" in points[p.name]]
        self.filters = frozenset(p.name for p in self.plugins if "Filter" in points[p.name])
        # the plugins a run_filter may report on: a PreFilter rejection counts as its Filter's
        self.filtering = [p for p in self.plugins if {"PreFilter", "Filter"} & set(points[p.name])]
        # scorers with whether their PreScore runs before their Score (a PreScore without
        # a Score would prepare for nothing: it is not run)
        self.scorers = [(p, "PreScore" in points[p.name]) for p in self.plugins if "Score" in points[p.name]]

    def plugin_names(self) -> list[str]:
        return [p.name for p in self.plugins]

    # --- filtering ----------------------------------------------------------------

    def run_filter(
        self, state: CycleState, pod: Pod, nodes: NodeSet, run_all: bool = False
    ) -> FilterOutcome:
        started = time.perf_counter()
        out = FilterOutcome()
        rejected_all: dict[str, Status] = {}
        allowed: frozenset[str] | None = None
        restricting: list[str] = []

        for plugin in self.pre_filters:
            t0 = time.perf_counter()
            result, status = plugin.pre_filter(state, pod, nodes)
            _observe(state, plugin.name, "PreFilter", status.code, t0)
            if status.is_skip:
                out.skipped.add(plugin.name)
                continue
            _record_evaluations(plugin.name, "PreFilter", self.profile, status.code, 1)
            if status.code is Code.ERROR:
                out.error = f"running PreFilter plugin {plugin.name!r}: {status.message()}"
                break
            if status.is_rejection:
                rejected_all[plugin.name] = status
                if not run_all:
                    break
            if isinstance(result, PreFilterResult):
                allowed = result.node_names if allowed is None else allowed & result.node_names
                restricting.append(plugin.name)

        if out.error:
            self.observe_point("Filter", Code.ERROR, started)
            return out
        # Plugin order decides which status a node reports, as upstream's sequential
        # RunFilterPlugins does: each plugin's failures as masks, overlaid.
        per_plugin: list[tuple[str, verdicts.Masks]] = []
        for plugin in self._filter_plugins(out, rejected_all, run_all):
            if plugin.name in rejected_all:
                per_plugin.append((plugin.name, [(rejected_all[plugin.name], np.ones(len(nodes), dtype=bool))]))
                continue
            t0 = time.perf_counter()
            masks = plugin.filter_nodes(state, pod, nodes) if self.fast else _reference(plugin, state, pod, nodes)
            _observe(state, plugin.name, "Filter", Code.SUCCESS, t0)
            passed = len(nodes)
            for status, mask in masks:
                failed = int(np.count_nonzero(mask))
                _record_evaluations(plugin.name, "Filter", self.profile, status.code, failed)
                passed -= failed
            _record_evaluations(plugin.name, "Filter", self.profile, Code.SUCCESS, passed)
            per_plugin.append((plugin.name, masks))
        if allowed is not None:
            outside = nodes.names - allowed
            if outside:  # a PreFilterResult overrides every plugin's verdict
                per_plugin.insert(0, ("PreFilterResult", [(_unsatisfied(", ".join(restricting)), nodes.mask_of(outside))]))
        out.set_verdict(verdicts.overlay([masks for _, masks in per_plugin], nodes))
        if run_all:
            out.per_plugin = {name: verdicts.failing(masks, nodes) for name, masks in per_plugin}
        self.observe_point("Filter", Code.SUCCESS, started)
        return out

    def _filter_plugins(self, out: FilterOutcome, rejected_all: dict[str, Status], run_all: bool):
        """The plugins whose Filter runs (or whose PreFilter rejected every node)."""
        for plugin in self.filtering:
            if plugin.name in rejected_all:
                yield plugin
            elif plugin.name in self.filters and plugin.name not in out.skipped and not (rejected_all and not run_all):
                yield plugin

    # --- scoring ------------------------------------------------------------------

    def run_score(self, state: CycleState, pod: Pod, nodes: NodeSet) -> ScoreOutcome:
        started = time.perf_counter()
        out = ScoreOutcome(nodes=nodes)  # names are not read: a new list's are never built
        active = []
        for plugin, pre_scores in self.scorers:
            if not pre_scores:
                active.append(plugin)
                continue
            t0 = time.perf_counter()
            status = plugin.pre_score(state, pod, nodes)
            _observe(state, plugin.name, "PreScore", status.code, t0)
            if status.is_skip:
                out.scores[plugin.name] = None
                continue
            _record_evaluations(plugin.name, "PreScore", self.profile, status.code, 1)
            if not status.is_success:
                out.error = f"running PreScore plugin {plugin.name!r}: {status.message()}"
                self.observe_point("Score", Code.ERROR, started)
                return out
            active.append(plugin)

        for plugin in active:
            t0 = time.perf_counter()
            if self.fast:
                raw = plugin.score_nodes(state, pod, nodes)
            else:
                raw = []
                for node in nodes:
                    value, status = plugin.score(state, pod, node)
                    if not status.is_success:
                        out.error = f"running Score plugin {plugin.name!r}: {status.message()}"
                        return out
                    raw.append(value)
            _observe(state, plugin.name, "Score", Code.SUCCESS, t0)
            _record_evaluations(plugin.name, "Score", self.profile, Code.SUCCESS, len(raw))
            t0 = time.perf_counter()
            values, status = self._normalize(plugin, state, pod, nodes, raw)
            _observe(state, plugin.name, "ScoreExtensionNormalize", status.code, t0)
            if not status.is_success:
                out.error = f"running Normalize plugin {plugin.name!r}: {status.message()}"
                return out
            vector = np.asarray(values, dtype=np.int64)
            if len(vector) and (vector.min() < 0 or vector.max() > MAX_NODE_SCORE):
                bad = next(int(v) for v in vector if not 0 <= v <= MAX_NODE_SCORE)
                out.error = (
                    f'plugin "{plugin.name}" returns an invalid score {bad}, it should '
                    f"in the range of [0, {MAX_NODE_SCORE}] after normalizing"
                )
                return out
            out.scores[plugin.name] = values
        self.observe_point("Score", Code.SUCCESS, started)
        return out

    def _normalize(self, plugin, state: CycleState, pod: Pod, nodes: NodeSet, raw: list[int]):
        """NormalizeScore: on a vector in the batch path, on NodeScore objects (as
        upstream) in the reference path."""
        if self.fast:
            return plugin.normalize_values(state, pod, nodes, raw), Status()
        scores = [NodeScore(name, s) for name, s in zip(nodes.order, raw, strict=True)]
        status = plugin.normalize_score(state, pod, scores)
        return [s.score for s in scores], status

    def observe_point(self, point: str, code: Code, started: float) -> None:
        if not metrics.counting():
            return
        metrics.child(metrics.EXTENSION_POINT_DURATION, point, str(code), self.profile).observe(
            time.perf_counter() - started
        )
