"""TaintToleration (`pkg/scheduler/framework/plugins/tainttoleration`), with the
extender's operators through the shared `TolerationMatcher`.

Filter rejects on the first NoSchedule/NoExecute taint no toleration tolerates;
Score counts PreferNoSchedule taints tolerated by none of the pod's PreferNoSchedule
(or effect-less) tolerations, normalized in reverse (fewer is better).

For a running pod (the drift report, `drift_judge`): the first untolerated `NoSchedule`
taint is `required` (Filter would reject the node now, and nothing in Kubernetes acts on
it); the first untolerated `NoExecute` taint is `evicting` (the kubelet and the
taint-eviction controller act on it themselves, from `spec.tolerations` with the API's
operators, which is also the only toleration such a taint counts for here); untolerated
`PreferNoSchedule` taints are `preferred` (Score would steer away, nothing more).
"""

from __future__ import annotations

import numpy as np

from extender.caching import ByteLRU
from extender.framework import MAX_NODE_SCORE, CycleState, NodeScore, Status
from extender.framework.drift import EVICTING, PREFERRED, REQUIRED, Judge, Violation
from extender.framework.handle import Handle
from extender.framework.interface import FilterPlugin, PreFilterPlugin, PreScorePlugin, ScorePlugin
from extender.framework.status import error, unschedulable
from extender.framework.verdicts import Masks, masks_of
from extender.matching.tolerations import (
    TolerationMatcher,
    do_not_schedule,
    key_details,
    matcher_for,
)
from extender.model import Node, Pod, Taint
from extender.model.objects import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE
from extender.plugins.helper import (
    default_normalize_score,
    default_normalize_values,
    untolerated_mask,
)
from extender.state.nodeset import NodeSet, Reads

NAME = "TaintToleration"
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"
PRE_SCORE_KEY = "PreScore" + NAME
REJECTED = unschedulable(ERR_REASON_UNTOLERATED)
DRIFT_MEMO = 65536  # (shape, taint tuple) verdicts a drift judge keeps


def _prefer_no_schedule(taint: Taint) -> bool:
    return taint.effect == "PreferNoSchedule"


def untolerated_details(matcher: TolerationMatcher, taint: Taint) -> tuple[str, ...]:
    """What `explain` (and the drift report) says of a taint no toleration tolerates:
    the taint, then why each toleration does not tolerate it."""
    return (f"taint {taint} is not tolerated", *matcher.explain(taint))


class TaintToleration(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def _matcher(self, state: CycleState, pod: Pod) -> TolerationMatcher:
        return matcher_for(state, pod, self.handle.gates, self.handle.cel)

    def _reject(self, state: CycleState, matcher: TolerationMatcher, taint: Taint) -> Status:
        if not state.explain:
            return REJECTED  # one shared status: the wire message names no taint
        return unschedulable(ERR_REASON_UNTOLERATED, *untolerated_details(matcher, taint))

    def pre_filter(self, state: CycleState, pod: Pod, nodes: NodeSet):
        """A malformed tolerations annotation rejects every node before any Filter runs
        (upstream master also has a PreFilter here, for deferred-resize pods)."""
        if pod.tolerations_error:
            return None, unschedulable(pod.tolerations_error)
        return None, Status()

    def filter(self, state: CycleState, pod: Pod, node: Node) -> Status:
        if pod.tolerations_error:
            return unschedulable(pod.tolerations_error)
        matcher = self._matcher(state, pod)
        taint = matcher.first_untolerated(node.taints, do_not_schedule)
        return Status() if taint is None else self._reject(state, matcher, taint)

    def filter_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Masks:
        """A mask over the candidates gathered from a universe mask (memoized per node
        layer and toleration set, each distinct taint checked once); per distinct taint
        tuple in an explain run (a status naming the taint)."""
        if pod.tolerations_error:
            return [(unschedulable(pod.tolerations_error), np.ones(len(nodes), dtype=bool))]
        matcher = self._matcher(state, pod)
        if state.explain:
            return masks_of(self._fails(state, pod, nodes.taint_groups()), nodes)
        mask = untolerated_mask(nodes.universe, pod, matcher, self.handle.gates)
        return [(REJECTED, nodes.gather(mask))]

    def _fails(self, state: CycleState, pod: Pod, groups) -> dict[str, Status]:
        """Failures per distinct taint tuple: one verdict per group of nodes."""
        matcher = self._matcher(state, pod)
        fails: dict[str, Status] = {}
        for taints, group in groups.items():
            taint = matcher.first_untolerated(taints, do_not_schedule)
            if taint is not None:
                fails.update(dict.fromkeys([n.name for n in group], self._reject(state, matcher, taint)))
        return fails

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Status:
        prefer = [t for t in pod.tolerations if not t.effect or t.effect == "PreferNoSchedule"]
        state.write(PRE_SCORE_KEY, TolerationMatcher(prefer, self.handle.gates, self.handle.cel))
        return Status()

    @staticmethod
    def _count_intolerable(matcher: TolerationMatcher, taints: tuple[Taint, ...]) -> int:
        return sum(1 for t in taints if _prefer_no_schedule(t) and not matcher.tolerated(t))

    def score(self, state: CycleState, pod: Pod, node: Node) -> tuple[int, Status]:
        matcher = state.get(PRE_SCORE_KEY)
        if matcher is None:
            return 0, error(f"reading {PRE_SCORE_KEY!r} from cycleState: not found")
        return self._count_intolerable(matcher, node.taints), Status()

    def score_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> np.ndarray:
        """Intolerable PreferNoSchedule taints per candidate, gathered from a universe
        vector (memoized per node layer and toleration set): each distinct taint is
        checked once and counted per node by its taint tuple."""
        matcher = state.read(PRE_SCORE_KEY)
        universe = nodes.universe

        def counts() -> np.ndarray:
            table = universe.taint_table()
            vector = table.count_per_node(table.flags(lambda t: _prefer_no_schedule(t) and not matcher.tolerated(t)))
            vector.flags.writeable = False
            return vector

        key = (NAME, "Score", matcher.tolerations, self.handle.gates)
        return nodes.gather(nodes.memo(key, counts, Reads.TAINTS))

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        return default_normalize_score(MAX_NODE_SCORE, True, scores)

    def normalize_values(self, state: CycleState, pod: Pod, nodes: NodeSet, raw: np.ndarray) -> np.ndarray:
        return default_normalize_values(MAX_NODE_SCORE, True, raw)


def drift_judge(plugin: TaintToleration) -> Judge:
    """A running pod's verdicts on its node's taints (see the module docstring): once
    per distinct taint tuple and pod shape (memoised), in explain's words."""
    gates, cel = plugin.handle.gates, plugin.handle.cel
    memo = ByteLRU.counted("drift-taints", DRIFT_MEMO)  # (shape, taints) -> violations

    def verdicts(pod: Pod, taints: tuple[Taint, ...]) -> tuple[Violation, ...]:
        matcher = TolerationMatcher(pod.tolerations, gates, cel)
        out = []
        for effect, severity in ((NO_SCHEDULE, REQUIRED), (NO_EXECUTE, EVICTING)):
            taint = matcher.first_untolerated(taints, lambda t, e=effect: t.effect == e)
            if taint is not None:
                details = tuple(key_details(untolerated_details(matcher, taint)))
                out.append(Violation(NAME, severity, ERR_REASON_UNTOLERATED, details))
        # Score's PreferNoSchedule taints no toleration tolerates (tolerations with
        # another effect never tolerate them, so the whole matcher answers as Score's
        # PreferNoSchedule-only one does)
        preferred = [t for t in taints if t.effect == PREFER_NO_SCHEDULE and not matcher.tolerated(t)]
        if preferred:
            details = tuple(line for t in preferred for line in key_details(untolerated_details(matcher, t)))
            out.append(Violation(NAME, PREFERRED, ERR_REASON_UNTOLERATED, details))
        return tuple(out)

    def judge(shape, node: Node, namespace: str, claims: tuple, volumes, name: str = "") -> tuple[Violation, ...]:
        pod = shape.pod
        if pod.tolerations_error:  # PreFilter rejects every node
            return (Violation(NAME, REQUIRED, pod.tolerations_error),)
        if not node.taints:
            return ()
        return memo.get_or_build((shape, node.taints), lambda: verdicts(pod, node.taints))

    return judge
