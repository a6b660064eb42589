"""The PodTopologySpread plugin: upstream's extension points over the extender's state.

Per-node `filter`/`score` are the reference path (plain counting straight from the
snapshot's pods, computed once per CycleState); `filter_nodes`/`score_nodes` are the
fast path (pod label index + set algebra, statuses per distinct label projection).
"""

from __future__ import annotations

import numpy as np

from extender.errors import ConfigError
from extender.framework import CycleState, NodeScore, Status, verdicts
from extender.framework.handle import SNAPSHOT_KEY, Handle
from extender.framework.interface import FilterPlugin, PreFilterPlugin, PreScorePlugin, ScorePlugin
from extender.framework.status import SKIP, error
from extender.framework.verdicts import Masks
from extender.matching.tolerations import matcher_for
from extender.model import Node, Pod
from extender.plugins.podtopologyspread import filtering, scoring
from extender.plugins.podtopologyspread.args import (
    DO_NOT_SCHEDULE,
    SCHEDULE_ANYWAY,
    ArgsError,
    parse_args,
)
from extender.plugins.podtopologyspread.common import (
    ConstraintError,
    EligibleMasks,
    Inclusion,
    constraints_for,
    counts_pods,
)
from extender.plugins.podtopologyspread.index import spread_index
from extender.plugins.podtopologyspread.selector import LabelSelector
from extender.state.nodeset import NodeSet
from extender.state.snapshot import ClusterSnapshot

NAME = "PodTopologySpread"


class PodTopologySpread(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        try:
            self.args = parse_args(handle.plugin_args.get(NAME, {}), f"pluginConfig[{NAME}].args")
        except ArgsError as exc:

            raise ConfigError(str(exc)) from None
        # cluster-level default constraints with a hard one: a pod without its own then
        # reads pods and workloads in its filter
        self.hard_defaults = any(c.get("whenUnsatisfiable") == DO_NOT_SCHEDULE for c in self.args.defaults)

    def _inclusion(self, state: CycleState, pod: Pod) -> Inclusion:
        matcher = matcher_for(state, pod, self.handle.gates, self.handle.cel)
        return Inclusion(pod, matcher, self.handle.gates)

    def hard_selectors(self, pod: Pod, snapshot: ClusterSnapshot) -> list[LabelSelector]:
        """The selectors of `pod`'s DoNotSchedule constraints that count pods (its own,
        or the cluster defaults where they apply; `matchLabelKeys` merged): a pod of its
        namespace can change its Filter verdict only if one of them selects it
        (`extender.engine.inflight`). Empty when the constraints do not convert: the filter
        answers an Error then, whatever is in flight."""
        try:
            constraints, _ = constraints_for(pod, DO_NOT_SCHEDULE, self.args, snapshot, self.handle.gates)
        except ConstraintError:
            return []
        return [c.selector for c in constraints if counts_pods(c)]

    def has_hard_constraints(self, pod: Pod, snapshot: ClusterSnapshot) -> bool:
        """Whether `pod` has DoNotSchedule constraints (its own, or the cluster defaults
        where they apply), or constraints that do not convert (the filter answers an
        Error then): its verdict on a node then reads every node's labels and pods."""
        try:
            constraints, _ = constraints_for(pod, DO_NOT_SCHEDULE, self.args, snapshot, self.handle.gates)
        except ConstraintError:
            return True
        return bool(constraints)

    # --- PreFilter / Filter ------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, nodes: NodeSet):
        snapshot: ClusterSnapshot = state.read(SNAPSHOT_KEY)
        try:
            constraints, _ = constraints_for(pod, DO_NOT_SCHEDULE, self.args, snapshot, self.handle.gates)
        except ConstraintError as exc:
            return None, error(f"get constraints from pod: {exc}")
        if not constraints:
            return None, SKIP
        state.write(filtering.PRE_FILTER_KEY, filtering.new_state(pod, constraints, self._inclusion(state, pod)))
        return None, Status()

    def _pre_filter_state(self, state: CycleState) -> filtering.PreFilterState | None:
        return state.get(filtering.PRE_FILTER_KEY)

    def filter(self, state: CycleState, pod: Pod, node: Node) -> Status:
        st = self._pre_filter_state(state)
        if st is None:
            return error(f'reading "{filtering.PRE_FILTER_KEY}" from cycleState: not found')
        if st.reference is None:
            snapshot = state.read(SNAPSHOT_KEY)
            st.reference = (
                filtering.reference_counts(snapshot, pod, st.constraints, st.inclusion),
                filtering.reference_nominated(snapshot, pod),
            )
        counts, nominated_on = st.reference
        return filtering.check_with_nominated(st, counts, nominated_on, node, state.explain)

    def _counted(self, state: CycleState, pod: Pod) -> filtering.PreFilterState | None:
        """The PreFilter state with the fast path's counts filled in (once per cycle)."""
        st = self._pre_filter_state(state)
        if st is not None and st.counts is None:
            index = spread_index(state.read(SNAPSHOT_KEY))
            st.counts = filtering.indexed_counts(index, pod, st.constraints, EligibleMasks(st.inclusion, index.nodes))
            st.nominated = filtering.indexed_nominated(index, pod)
        return st

    def filter_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Masks:
        """The skew check for all candidates at once (`_masks`); in an explain run node
        by node, once per projection of the constraints' keys, with the details."""
        st = self._counted(state, pod)
        if st is None:
            status = error(f'reading "{filtering.PRE_FILTER_KEY}" from cycleState: not found')
            return [(status, np.ones(len(nodes), dtype=bool))]
        if not state.explain:
            return self._masks(st, nodes)
        keys = [c.topology_key for c in st.constraints]
        by_projection: dict[tuple, Status] = {}
        fails: dict[str, Status] = {}
        for node in nodes:
            if node.name in st.nominated:
                status = filtering.check_with_nominated(st, st.counts, st.nominated, node, True)
            else:
                labels = node.labels
                projection = tuple(labels.get(k) for k in keys)
                status = by_projection.get(projection)
                if status is None:
                    status = by_projection[projection] = filtering.check(st, st.counts, node, True)
            if not status.is_success:
                fails[node.name] = status
        return verdicts.masks_of(fails, nodes)

    @staticmethod
    def _masks(st: filtering.PreFilterState, nodes: NodeSet) -> Masks:
        """The skew check for all candidates at once: for constraint i a node fails iff
        it lacks the key (unresolvable) or its domain's count exceeds maxSkew + minimum -
        selfMatch; constraints in order, the first failure wins. Nodes with nominated
        pods are checked one by one (with and without them)."""
        counts = st.counts
        undecided = np.ones(len(nodes), dtype=bool)
        # the few nominated nodes looked up in the candidates (`keys() & frozenset` would
        # walk every candidate: CPython reuses set intersection only for an exact set)
        nominated = [name for name in st.nominated if name in nodes.names]
        if nominated:
            undecided[nodes.mask_of(nominated)] = False
        unresolvable = np.zeros(len(nodes), dtype=bool)
        unschedulable = np.zeros(len(nodes), dtype=bool)
        for i, c in enumerate(st.constraints):
            codes, values = nodes.universe.codes(c.topology_key)
            node_codes = codes[nodes.uidx]
            missing = undecided & (node_codes < 0)
            unresolvable |= missing
            undecided &= ~missing
            # Matching pods per label code (last slot: no label, or a value no node has).
            per_code = counts.code_counts(i, nodes.universe, c.topology_key)
            threshold = c.max_skew + counts.minimum[i] - st.self_match[i]
            crowded = undecided & (per_code[node_codes] > threshold)
            unschedulable |= crowded
            undecided &= ~crowded
        masks = [(filtering.UNRESOLVABLE, unresolvable), (filtering.UNSCHEDULABLE, unschedulable)]
        by_node = nodes.universe.by_name
        one_by_one = {}
        for name in nominated:
            status = filtering.check_with_nominated(st, counts, st.nominated, by_node[name], False)
            if not status.is_success:
                one_by_one[name] = status
        return masks + verdicts.masks_of(one_by_one, nodes)

    # --- PreScore / Score / NormalizeScore -----------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Status:
        snapshot: ClusterSnapshot = state.read(SNAPSHOT_KEY)
        try:
            constraints, from_pod = constraints_for(pod, SCHEDULE_ANYWAY, self.args, snapshot, self.handle.gates)
        except ConstraintError as exc:
            return error(f"calculating preScoreState: {exc}")
        if not constraints or not snapshot.nodes.nodes:
            return SKIP
        require_all = from_pod or not self.args.system_defaulted
        st = scoring.new_state(constraints, require_all, nodes, self._inclusion(state, pod))
        state.write(scoring.PRE_SCORE_KEY, st)
        return Status()

    def score(self, state: CycleState, pod: Pod, node: Node) -> tuple[int, Status]:
        st: scoring.PreScoreState | None = state.get(scoring.PRE_SCORE_KEY)
        if st is None:
            return 0, error(f'reading "{scoring.PRE_SCORE_KEY}" from cycleState: not found')
        if st.reference is None:
            st.reference = scoring.reference_counts(state.read(SNAPSHOT_KEY), pod, st)
        counts, pods_on = st.reference
        own = {
            i: sum(1 for p in pods_on.get(node.name, ()) if c.selector.matches(p.labels))
            for i, c in enumerate(st.constraints)
            if c.is_hostname and scoring.counts_pods(c)
        }
        return scoring.raw_score(st, counts, node, own), Status()

    def score_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> np.ndarray:
        st: scoring.PreScoreState = state.read(scoring.PRE_SCORE_KEY)
        snapshot = state.read(SNAPSHOT_KEY)
        index = spread_index(snapshot)
        if st.counts is None:
            st.counts = scoring.indexed_counts(index, pod, st, EligibleMasks(st.inclusion, index.nodes))
            st.layer = index.nodes
        own = {}
        for i, c in enumerate(st.constraints):
            if c.is_hostname and scoring.counts_pods(c):
                own[i] = (index.own_counts(pod.namespace, c.selector) if nodes.universe is index.nodes
                          else index.own_vector(pod.namespace, c.selector, nodes.universe))
        return scoring.raw_vector(st, nodes, st.counts, own)

    def normalize_values(self, state: CycleState, pod: Pod, nodes: NodeSet, raw: np.ndarray) -> np.ndarray:
        return scoring.normalize_values(state.read(scoring.PRE_SCORE_KEY), raw)

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        st = state.get(scoring.PRE_SCORE_KEY)
        if st is None:
            return error(f'reading "{scoring.PRE_SCORE_KEY}" from cycleState: not found')
        scoring.normalize(st, scores)
        return Status()
