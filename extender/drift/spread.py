"""Hard topology spread drift (opt-in: `--drift-topology-spread`): running pods that
`/filter` would not place where they are now, by their own `DoNotSchedule` constraints.

Counting is cluster-wide (any pod of the namespace, any node's labels can change a
pod's skew), so this report is not kept pod by pod: it is recomputed as a whole on the
tracker's thread while the state changes, at most every `SPREAD_INTERVAL` seconds and
at most `1 / SPREAD_DUTY` of the time (a run of 1.7 s, 150,000 pods, waits 17 s before
the next), so that it never takes the verbs' CPU (`SpreadDrift.maybe_run`). Per running pod with hard constraints (its own, or the
cluster defaults when `pluginConfig` makes them `DoNotSchedule`): the question
PodTopologySpread's Filter answers for the pod's own node, with the pod itself taken
out of the counts (it is counted where it runs; a pending copy would not be).
Counts come from PodTopologySpread's index, once per (namespace, shape, constraints);
taking the pod out is arithmetic on the domain minimum (`without_self`), so a hostname
constraint over 15,000 domains costs no copy per pod. Nominated pods are left out:
they wait for a place, they do not change where running pods fit.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

from extender.drift.evaluate import REQUIRED, Violation
from extender.drift.shapes import Key, Running
from extender.matching.tolerations import TolerationMatcher
from extender.plugins.podtopologyspread import filtering
from extender.plugins.podtopologyspread.args import DO_NOT_SCHEDULE
from extender.plugins.podtopologyspread.common import (
    ConstraintError,
    EligibleMasks,
    Inclusion,
    constraints_for,
    counts_pods,
    has_keys,
)
from extender.plugins.podtopologyspread.index import spread_index

NAME = "PodTopologySpread"
REASONS = (filtering.ERR_REASON_CONSTRAINTS_NOT_MATCH, filtering.ERR_REASON_NODE_LABEL_NOT_MATCH)
SPREAD_INTERVAL = 5.0  # seconds between two whole-cluster evaluations while the state changes
SPREAD_DUTY = 10  # ... and at least this many times the last run's duration
BIG = 2**62


def hard_defaults(plugin: Any) -> bool:
    """Whether the plugin's default constraints (its profile's pluginConfig) include a
    DoNotSchedule one: pods without constraints of their own are then checked too."""
    return any(c.get("whenUnsatisfiable") == DO_NOT_SCHEDULE for c in plugin.args.defaults)


def minimum_stats(per_domain: dict[str, int]) -> tuple[int, int, int]:
    """(smallest count, how many domains have it, second smallest; BIG when none)."""
    first, ties, second = BIG, 0, BIG
    for n in per_domain.values():
        if n < first:
            first, ties, second = n, 1, first
        elif n == first:
            ties += 1
        elif n < second:
            second = n
    return first, ties, second


def without_self(counts: filtering.Counts, stats: list[tuple[int, int, int]], st: filtering.PreFilterState,
                 node: Any) -> filtering.Counts:
    """The counts as a pending copy of the pod would see them: the pod itself taken out
    of its node's domain where it is counted there (its node eligible, its labels
    selected). Only the pod's own domain is kept per constraint: `filtering.check`
    reads nothing else of `per_domain`."""
    per_domain, minimum = [], []
    for i, c in enumerate(st.constraints):
        value = node.labels.get(c.topology_key)
        count = counts.per_domain[i].get(value, 0) if value is not None else 0
        low = counts.minimum[i]
        counted = (value is not None and counts_pods(c) and st.self_match[i]
                   and has_keys(node, st.keys) and st.inclusion.eligible(node, c))
        if counted:
            count -= 1
            if counts.domains[i] >= c.min_domains:
                first, ties, second = stats[i]
                others = first if (count + 1 != first or ties > 1) else second
                low = min(others, count)
        per_domain.append({value: count} if value is not None else {})
        minimum.append(low)
    return filtering.Counts(per_domain, counts.domains, minimum)


class SpreadDrift:
    """The spread report of the last run (`drifted`), recomputed by `maybe_run`."""

    def __init__(self, plugin: Any, profiles: Mapping[str, Any] | None = None) -> None:
        """`plugin`: the PodTopologySpread that judges a pod of a profile `profiles`
        lacks (None: such a pod is not checked); `profiles`: schedulerName -> that
        profile's PodTopologySpread (its defaultConstraints), None where the profile
        runs the plugin in-tree."""
        self.plugin = plugin
        self.profiles = dict(profiles or {})
        some = next(p for p in (plugin, *self.profiles.values()) if p is not None)
        self.gates = some.handle.gates  # the configuration's: the same in every profile
        self.cel = some.handle.cel
        self.drifted: dict[Key, tuple[str, tuple[Violation, ...]]] = {}  # pod -> (node, violations)
        self.versions: tuple | None = None  # the snapshot versions of the last run
        self.ran_at = 0.0
        self.seconds = 0.0  # how long the last run took

    def plugin_of(self, running: Running) -> Any:
        """The PodTopologySpread of the pod's own profile, or None."""
        return self.profiles.get(running.shape.pod.scheduler_name, self.plugin)

    def wanted(self, running: Running) -> bool:
        plugin = self.plugin_of(running)
        if plugin is None:
            return False
        pod = running.shape.pod
        return bool(pod.topology_spread_constraints) or (hard_defaults(plugin) and bool(pod.owner_references))

    def maybe_run(self, snapshot: Any, pods: Iterable[tuple[Key, Running]], interval: float = SPREAD_INTERVAL) -> bool:
        """Run when the state changed since the last run and `interval` (or
        `SPREAD_DUTY` times the last run's duration, if longer) has passed."""
        wait = max(interval, SPREAD_DUTY * self.seconds) if interval else 0.0
        if snapshot.versions == self.versions or time.monotonic() - self.ran_at < wait:
            return False
        self.run(snapshot, pods)
        return True

    def run(self, snapshot: Any, pods: Iterable[tuple[Key, Running]]) -> dict[Key, tuple[str, tuple[Violation, ...]]]:
        started = time.monotonic()
        index = spread_index(snapshot)
        groups: dict[tuple, tuple] = {}
        out: dict[Key, tuple[str, tuple[Violation, ...]]] = {}
        for key, running in pods:
            if not self.wanted(running):
                continue
            violations = self._check(snapshot, index, groups, key, running)
            if violations:
                out[key] = (running.node, violations)
        self.drifted = out
        self.versions = snapshot.versions
        self.ran_at = time.monotonic()
        self.seconds = self.ran_at - started
        return out

    def _check(self, snapshot: Any, index: Any, groups: dict, key: Key, running: Running) -> tuple[Violation, ...]:
        node = snapshot.nodes.by_name.get(running.node)
        slim = snapshot.pod_layer.get(*key)
        if node is None or slim is None or slim.node_name != running.node:
            return ()  # the state is between two events of this pod: the next run decides
        shape = running.shape
        pod = dataclasses.replace(shape.pod, namespace=key[0], name=key[1], uid=running.uid, labels=slim.labels,
                                  node_name=running.node)
        try:
            constraints, _ = constraints_for(pod, DO_NOT_SCHEDULE, self.plugin_of(running).args, snapshot, self.gates)
        except ConstraintError:
            return ()  # /filter answers an Error for such a pod: not a question of its node
        if not constraints:
            return ()
        group = (key[0], shape, tuple(constraints))
        found = groups.get(group)
        if found is None:
            inclusion = Inclusion(pod, TolerationMatcher(pod.tolerations, self.gates, self.cel), self.gates)
            counts = filtering.indexed_counts(index, pod, constraints, EligibleMasks(inclusion, index.nodes))
            found = groups[group] = (inclusion, counts, [minimum_stats(d) for d in counts.per_domain])
        inclusion, counts, stats = found
        st = filtering.new_state(pod, constraints, inclusion)
        status = filtering.check(st, without_self(counts, stats, st, node), node, explain=True)
        if status.is_success:
            return ()
        return (Violation(NAME, REQUIRED, status.reasons[0], status.details),)
