"""PreFilter counting and the Filter skew check (spec §2, §3).

Counting covers the whole cluster snapshot, not only the candidate nodes. Two
implementations produce the same `Counts`:

* `indexed_counts` (fast path): eligible nodes as masks over the node layer, matching
  pods per node from the pod index's per-selector counts, summed per label code: a few
  numpy passes over the nodes per request;
* `reference_counts` (reference path): plain loops over every node and every pod,
  written to be obviously right; differential tests compare the two.

The minimum is exact (upstream keeps two "critical paths", which over-estimates after
AddPod). Nominated pods with priority >= the incoming pod's are added to their node's
domain (AddPod semantics, where an Empty selector *does* match), and such a node must
pass both with and without them (`RunFilterPluginsWithNominatedPods`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from extender.framework.status import Code, Status
from extender.model import Node, Pod
from extender.plugins.podtopologyspread.common import (
    Constraint,
    EligibleMasks,
    Inclusion,
    counts_pods,
    has_keys,
    self_match,
)
from extender.plugins.podtopologyspread.index import SpreadIndex
from extender.state.nodeset import NodeIndex
from extender.state.snapshot import ClusterSnapshot

PRE_FILTER_KEY = "PreFilterPodTopologySpread"
ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
MAX_INT32 = 2**31 - 1
SUCCESS = Status()
# Shared across nodes (the wire encoder works per distinct status object).
UNSCHEDULABLE = Status(Code.UNSCHEDULABLE, (ERR_REASON_CONSTRAINTS_NOT_MATCH,))
UNRESOLVABLE = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_NODE_LABEL_NOT_MATCH,))


class Counts:
    """Per constraint: domain -> matching pods, the eligible domain number, the
    minimum Filter uses (0 while fewer domains than minDomains).

    The fast path counts as vectors over a node layer's label codes (`per_code`: per
    constraint, matching pods per code of the topology key, and which codes are
    eligible domains); the domain -> count maps are built from them only when a node
    is checked one by one (nominated pods, explain)."""

    __slots__ = ("domains", "minimum", "layer", "keys", "per_code", "_per_domain")

    def __init__(self, per_domain: list[dict[str, int]] | None, domains: list[int], minimum: list[int],
                 layer: NodeIndex | None = None, keys: Sequence[str] = (),
                 per_code: list[tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        self._per_domain = per_domain
        self.domains = domains
        self.minimum = minimum
        self.layer = layer  # the node layer `per_code` is over, with the constraints' `keys`
        self.keys = keys
        self.per_code = per_code  # per constraint: (matching pods per code, eligible domain per code)

    @property
    def per_domain(self) -> list[dict[str, int]]:
        if self._per_domain is None:
            self._per_domain = []
            for (counts, present), key in zip(self.per_code, self.keys, strict=True):
                values = self.layer.codes(key)[1]
                codes = np.flatnonzero(present)
                self._per_domain.append(dict(zip([values[k] for k in codes.tolist()], counts[codes].tolist(),
                                                 strict=True)))
        return self._per_domain

    def code_counts(self, i: int, universe: NodeIndex, key: str) -> np.ndarray:
        """Constraint i's matching pods per label code of `key` in `universe`, with a
        last slot (0) for code -1: the vector itself over the counting layer, mapped by
        value from `per_domain` over another (a Nodes-mode request's nodes)."""
        values = universe.codes(key)[1]
        if self.per_code is not None and universe is self.layer:
            return np.append(self.per_code[i][0], 0)
        out = np.zeros(len(values) + 1, dtype=np.int64)
        code_of = universe.code_of(key)
        domain = self.per_domain[i]
        out[np.fromiter(map(code_of.get, domain, repeat(-1)), dtype=np.intp, count=len(domain))] = \
            np.fromiter(domain.values(), dtype=np.int64, count=len(domain))
        out[-1] = 0
        return out


def finish(per_domain: list[dict[str, int]], constraints: Sequence[Constraint]) -> Counts:
    domains = [len(c) for c in per_domain]
    minimum = []
    for counts, c in zip(per_domain, constraints, strict=True):
        global_min = min(counts.values()) if counts else MAX_INT32
        minimum.append(0 if len(counts) < c.min_domains else global_min)
    return Counts(per_domain, domains, minimum)


def topology_keys(constraints: Iterable[Constraint]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.topology_key for c in constraints))


def indexed_counts(index: SpreadIndex, pod: Pod, constraints: Sequence[Constraint], masks: EligibleMasks) -> Counts:
    """The counts as vectors over the snapshot's node layer: per constraint, the eligible
    nodes (carrying every constraint's key, admitted by its inclusion policies) give the
    domains (the codes of the key among them) and their matching pods (`own_counts`,
    summed per code): a few numpy passes over the nodes, no Python loop over them."""
    layer = index.nodes
    keys = topology_keys(constraints)
    per_code, domains, minimum = [], [], []
    for c in constraints:
        codes, values = layer.codes(c.topology_key)
        eligible = masks.eligible(c, keys)
        domain_codes = codes[eligible]
        present = np.bincount(domain_codes, minlength=len(values)) > 0
        if counts_pods(c):
            own = index.own_counts(pod.namespace, c.selector)[eligible]
            counts = np.bincount(domain_codes, weights=own, minlength=len(values)).astype(np.int64)
        else:
            counts = np.zeros(len(values), dtype=np.int64)
        per_code.append((counts, present))
        number = int(np.count_nonzero(present))
        domains.append(number)
        global_min = int(counts[present].min()) if number else MAX_INT32
        minimum.append(0 if number < c.min_domains else global_min)
    return Counts(None, domains, minimum, layer, [c.topology_key for c in constraints], per_code)


def plain_counted(p: Pod) -> bool:
    """The reference path's own rule (kept apart from the index's, so the differential
    tests compare two implementations): assigned, not terminating, not terminal."""
    return p.node_name != "" and not p.terminating and p.phase not in ("Succeeded", "Failed")


def reference_counts(
    snapshot: ClusterSnapshot, pod: Pod, constraints: Sequence[Constraint], inclusion: Inclusion
) -> Counts:
    pods_on: dict[str, list[Pod]] = {}
    for p in snapshot.pods:
        if plain_counted(p) and p.namespace == pod.namespace:
            pods_on.setdefault(p.node_name, []).append(p)
    keys = topology_keys(constraints)
    per_domain: list[dict[str, int]] = [{} for _ in constraints]
    for node in snapshot.nodes.nodes:
        if not has_keys(node, keys):
            continue
        for i, c in enumerate(constraints):
            if not inclusion.eligible(node, c):
                continue
            value = node.labels[c.topology_key]
            matching = 0
            if counts_pods(c):
                matching = sum(1 for p in pods_on.get(node.name, ()) if c.selector.matches(p.labels))
            per_domain[i][value] = per_domain[i].get(value, 0) + matching
    return finish(per_domain, constraints)


def is_self(p: Pod, pod: Pod) -> bool:
    if p.uid and pod.uid:
        return p.uid == pod.uid
    return p.namespace == pod.namespace and p.name == pod.name


def nominated_by_node(candidates: Iterable[Pod], pod: Pod) -> dict[str, list[Pod]]:
    """Nominated pods of the pod's namespace (others never change counts) with
    priority >= the incoming pod's, grouped by nominated node."""
    out: dict[str, list[Pod]] = {}
    for p in candidates:
        if p.namespace == pod.namespace and p.priority >= pod.priority and not is_self(p, pod):
            out.setdefault(p.nominated_node_name, []).append(p)
    return out


def indexed_nominated(index: SpreadIndex, pod: Pod) -> dict[str, list[Pod]]:
    return nominated_by_node(index.namespace(pod.namespace).nominated, pod)


def reference_nominated(snapshot: ClusterSnapshot, pod: Pod) -> dict[str, list[Pod]]:
    waiting = (
        p for p in snapshot.pods
        if p.node_name == "" and p.nominated_node_name != "" and p.phase not in ("Succeeded", "Failed")
    )
    return nominated_by_node(waiting, pod)


@dataclass(slots=True)
class PreFilterState:
    constraints: list[Constraint]
    keys: tuple[str, ...]
    self_match: list[int]
    inclusion: Inclusion
    counts: Counts | None = None
    nominated: dict[str, list[Pod]] = field(default_factory=dict)
    reference: tuple[Counts, dict[str, list[Pod]]] | None = None


def _with_nominated(st: PreFilterState, counts: Counts, node: Node, pods: list[Pod]) -> Counts | None:
    """The counts as node `node` sees them after AddPod of its nominated pods, or None
    when no constraint changes (then the single evaluation suffices)."""
    if not has_keys(node, st.keys):
        return None
    per_domain, minimum, changed = list(counts.per_domain), list(counts.minimum), False
    for i, c in enumerate(st.constraints):
        added = sum(1 for p in pods if c.selector.matches(p.labels))
        if not added or not st.inclusion.eligible(node, c):
            continue
        value = node.labels[c.topology_key]
        domain = dict(per_domain[i])
        domain[value] = domain.get(value, 0) + added
        per_domain[i] = domain
        changed = True
        if counts.domains[i] >= c.min_domains:
            minimum[i] = min(domain.values())
    return Counts(per_domain, counts.domains, minimum) if changed else None


def check(st: PreFilterState, counts: Counts, node: Node, explain: bool, note: str = "") -> Status:
    """Upstream Filter for one node: constraints in order, first failure wins."""
    details: list[str] = []
    for i, c in enumerate(st.constraints):
        value = node.labels.get(c.topology_key)
        if value is None:
            if not explain:
                return UNRESOLVABLE
            details.append(f"{c.describe(i)}: node has no label {c.topology_key!r}")
            return Status(UNRESOLVABLE.code, UNRESOLVABLE.reasons, tuple(details))
        match = counts.per_domain[i].get(value, 0)
        minimum = counts.minimum[i]
        skew = match + st.self_match[i] - minimum
        if explain:
            text = (
                f"{c.describe(i)}: domain {c.topology_key}={value}: count {match} + self "
                f"{st.self_match[i]} - minimum {minimum} = skew {skew}"
                f" {'>' if skew > c.max_skew else '<='} maxSkew {c.max_skew}"
            )
            if counts.domains[i] < c.min_domains:
                text += f" (eligible domains {counts.domains[i]} < minDomains {c.min_domains}: minimum is 0)"
            details.append(text + note)
        if skew > c.max_skew:
            if not explain:
                return UNSCHEDULABLE
            return Status(UNSCHEDULABLE.code, UNSCHEDULABLE.reasons, tuple(details))
    return SUCCESS


def check_with_nominated(
    st: PreFilterState, counts: Counts, nominated_on: dict[str, list[Pod]], node: Node, explain: bool
) -> Status:
    pods = nominated_on.get(node.name)
    if pods:
        added = _with_nominated(st, counts, node, pods)
        if added is not None:
            status = check(st, added, node, explain, f" (with {len(pods)} nominated pod(s))")
            if not status.is_success:
                return status
    return check(st, counts, node, explain)


def new_state(pod: Pod, constraints: list[Constraint], inclusion: Inclusion) -> PreFilterState:
    return PreFilterState(
        constraints, topology_keys(constraints), [self_match(c, pod) for c in constraints], inclusion
    )
