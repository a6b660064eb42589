"""NodeAffinity (`pkg/scheduler/framework/plugins/nodeaffinity`), with the extender's
Semver operators and the annotation channel's extra required/preferred terms.

PreFilter parses the required part once (and turns `matchFields metadata.name In`
into a PreFilterResult); Filter matches it; PreScore parses the preferred terms
(a broken term fails the whole set with an Error); Score sums matching weights;
NormalizeScore scales by the maximum.

For a running pod (the drift report, `drift_judge`): the required node affinity it was
placed by (nodeSelector, spec and annotation terms) and the scheduler-enforced
`addedAffinity` are `required`, each failing part named by where the pod says it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from extender.errors import ConfigError
from extender.framework import MAX_NODE_SCORE, CycleState, NodeScore, PreFilterResult, Status
from extender.framework.drift import REQUIRED, Judge, Violation
from extender.framework.handle import Handle
from extender.framework.interface import FilterPlugin, PreFilterPlugin, PreScorePlugin, ScorePlugin
from extender.framework.status import SKIP, error, unschedulable
from extender.framework.verdicts import Masks, masks_of
from extender.matching.nodeselector import (
    NODE_FIELD_NAME,
    CompiledSelector,
    RequiredAffinity,
    RequirementError,
    WeightedTerm,
    compile_term,
    preferred_terms,
    required_affinity,
)
from extender.matching.numeric import go_quote
from extender.model import Node, NodeSelector, Pod
from extender.model.parse import ModelError, node_affinity_from_dict
from extender.plugins.helper import (
    default_normalize_score,
    default_normalize_values,
)
from extender.state.nodeset import NodeSet, Reads

NAME = "NodeAffinity"
ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_CONFLICT = "pod affinity terms conflict"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
PRE_FILTER_KEY = "PreFilter" + NAME
PRE_SCORE_KEY = "PreScore" + NAME
REJECTED = unschedulable(ERR_REASON_POD)
REJECTED_ENFORCED = unschedulable(ERR_REASON_ENFORCED)


@dataclass(frozen=True, slots=True)
class AddedAffinity:
    """NodeAffinityArgs.addedAffinity: applied to every pod, parsed eagerly (a broken
    term fails start-up, as upstream's NewNodeSelector fails plugin construction)."""

    required: CompiledSelector | None = None
    preferred: tuple[WeightedTerm, ...] = ()


def parse_args(args: dict[str, Any], key: str, semver_enabled: bool = True) -> AddedAffinity:
    """Validate NodeAffinityArgs; raise ConfigError naming the key."""

    unknown = set(args) - {"addedAffinity"}
    if unknown:
        raise ConfigError(f"{key}: unknown field(s) {', '.join(sorted(unknown))} (NodeAffinityArgs has addedAffinity)")
    raw = args.get("addedAffinity")
    if raw is None:
        return AddedAffinity()
    where = f"{key}.addedAffinity"
    try:
        required, preferred, _ = node_affinity_from_dict(raw, where)
        compiled = None
        if required is not None:
            if not required.terms:
                raise RequirementError("requiredDuringSchedulingIgnoredDuringExecution: must have at least one node selector term")
            compiled = CompiledSelector(tuple(compile_term(t, semver_enabled) for t in required.terms), ())
        for i, p in enumerate(preferred):
            if not 1 <= p.weight <= 100:
                raise RequirementError(f"preferredDuringSchedulingIgnoredDuringExecution[{i}].weight: must be in the range 1-100")
        return AddedAffinity(compiled, preferred_terms(preferred, semver_enabled))
    except (ModelError, RequirementError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _node_names_of(selector: NodeSelector) -> set[str] | None:
    """Names a selector restricts nodes to via `matchFields metadata.name In`, or None
    when some term does not restrict or there are no terms (upstream `getPodNodeNames`)."""
    if not selector.terms:
        return None
    union: set[str] = set()
    for term in selector.terms:
        names: set[str] | None = None
        for req in term.match_fields:
            if req.key == NODE_FIELD_NAME and req.operator == "In":
                values = set(req.values)
                names = values if names is None else names & values
        if names is None:
            return None
        union |= names
    return union


class NodeAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.added = parse_args(
            handle.plugin_args.get(NAME, {}), f"pluginConfig[{NAME}].args", handle.gates.semver_operators
        )

    def _required(self, pod: Pod) -> RequiredAffinity:
        semver = self.handle.gates.semver_operators
        return required_affinity(pod.node_selector, pod.affinity.required, semver)

    def pre_filter(self, state: CycleState, pod: Pod, nodes: NodeSet):
        if pod.affinity_error:
            return None, unschedulable(pod.affinity_error)
        if not pod.has_required_affinity and not pod.has_node_selector and self.added.required is None:
            return None, SKIP
        state.write(PRE_FILTER_KEY, self._required(pod))
        allowed: set[str] | None = None
        for selector in pod.affinity.required:
            names = _node_names_of(selector)
            if names is not None:
                allowed = names if allowed is None else allowed & names
        if allowed is None:
            return None, Status()
        if not allowed:
            return None, unschedulable(ERR_REASON_CONFLICT)
        return PreFilterResult(frozenset(allowed)), Status()

    def _state(self, state: CycleState, pod: Pod) -> RequiredAffinity:
        required = state.get(PRE_FILTER_KEY)
        return required if required is not None else self._required(pod)

    def filter(self, state: CycleState, pod: Pod, node: Node) -> Status:
        if self.added.required is not None and not self.added.required.matches(node):
            return REJECTED_ENFORCED
        required = self._state(state, pod)
        if required.matches(node):
            return Status()
        if state.explain and required.errors:
            return unschedulable(ERR_REASON_POD, *(f"invalid requirement never matches: {e}" for e in required.errors))
        return REJECTED

    def filter_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Masks:
        """The candidates the scheduler-enforced affinity (first) and the pod's own
        reject: masks gathered from universe masks (memoized per node layer and
        affinity), each requirement judged once per distinct label value; node by node
        in an explain run (a status per node with its details)."""
        required = self._state(state, pod)
        universe = nodes.universe

        def rejected() -> list[tuple[Status, np.ndarray]]:
            enforced = ~self.added.required.matching_mask(universe) if self.added.required is not None else None
            failing = ~required.matching_mask(universe)
            if enforced is not None:
                failing &= ~enforced
            masks = [(REJECTED, failing), (REJECTED_ENFORCED, enforced)]
            return [(status, mask) for status, mask in masks if mask is not None and mask.any()]

        masks = [(status, nodes.gather(mask)) for status, mask in
                 nodes.memo((NAME, "Filter masks", required, self.added.required), rejected, Reads.NODES)]
        if state.explain:  # the failing candidates' statuses with their details
            failing = np.logical_or.reduce([mask for _, mask in masks]) if masks else np.zeros(len(nodes), bool)
            by_name = universe.by_name
            return masks_of({name: self.filter(state, pod, by_name[name]) for name in nodes.names_where(failing)},
                            nodes)
        return masks

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Status:
        if not pod.has_preferred_affinity and not self.added.preferred:
            return SKIP
        try:
            terms = self._parse_terms(pod)
        except RequirementError as exc:
            return error(f"parsing preferred node affinity: {exc}")
        state.write(PRE_SCORE_KEY, terms)
        return Status()

    def _parse_terms(self, pod: Pod) -> tuple[WeightedTerm, ...]:
        """The pod's preferred terms plus the scheduler-added ones."""
        return preferred_terms(pod.affinity.preferred, self.handle.gates.semver_operators) + self.added.preferred

    def _terms(self, state: CycleState, pod: Pod) -> tuple[WeightedTerm, ...]:
        terms = state.get(PRE_SCORE_KEY)
        return terms if terms is not None else self._parse_terms(pod)

    def score(self, state: CycleState, pod: Pod, node: Node) -> tuple[int, Status]:
        return sum(t.weight for t in self._terms(state, pod) if t.term.matches(node)), Status()

    def score_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> np.ndarray:
        """The weights of the matching preferred terms per candidate, gathered from a
        universe vector (memoized per node layer and terms)."""
        terms = self._terms(state, pod)
        universe = nodes.universe

        def weights() -> np.ndarray:
            total = np.zeros(len(universe.nodes), dtype=np.int64)
            for t in terms:
                total += t.weight * t.term.matching_mask(universe)
            return total

        return nodes.gather(nodes.memo((NAME, "Score", terms), weights, Reads.NODES))

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        return default_normalize_score(MAX_NODE_SCORE, False, scores)

    def normalize_values(self, state: CycleState, pod: Pod, nodes: NodeSet, raw: np.ndarray) -> np.ndarray:
        return default_normalize_values(MAX_NODE_SCORE, False, raw)


def _label(labels: Mapping[str, str], key: str) -> str:
    value = labels.get(key)
    return "the node has no such label" if value is None else f"the node's value is {go_quote(value)}"


def affinity_details(required: RequiredAffinity, sources: tuple[str, ...], node: Node) -> tuple[str, ...]:
    """Which part of a pod's required affinity the node fails, each named by where the
    pod says it (nodeSelector, spec affinity, the annotation)."""
    labels = node.labels
    out = [f"nodeSelector {key}={value}: {_label(labels, key)}"
           for key, value in required.node_selector if labels.get(key) != value]
    for where, selector in zip(sources, required.selectors, strict=False):
        if not selector.matches(node):
            out.append(f"{where}: {selector.why_not(labels)}")
    return tuple(out)


def drift_judge(plugin: NodeAffinity) -> Judge:
    """A running pod's verdict on its node's labels (see the module docstring), from the
    required affinity its shape keeps compiled (`shape.required`, `shape.sources`)."""

    def judge(shape, node: Node, namespace: str, claims: tuple, volumes, name: str = "") -> tuple[Violation, ...]:
        if shape.pod.affinity_error:  # PreFilter rejects every node
            return (Violation(NAME, REQUIRED, shape.pod.affinity_error),)
        added = plugin.added.required
        if added is not None and not added.matches(node):
            return (Violation(NAME, REQUIRED, ERR_REASON_ENFORCED,
                              (f"scheduler-enforced addedAffinity: {added.why_not(node.labels)}",)),)
        if shape.required.matches(node):
            return ()
        details = affinity_details(shape.required, shape.sources, node)
        details += tuple(f"invalid requirement never matches: {e}" for e in shape.required.errors)
        return (Violation(NAME, REQUIRED, ERR_REASON_POD, details),)

    return judge
