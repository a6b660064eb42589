"""Which constraints apply to a pod, and which nodes are eligible for each (spec §1).

* `pod_constraints` turns the pod's raw constraints of one phase (DoNotSchedule for
  filtering, ScheduleAnyway for scoring) into `Constraint`s: minDomains nil -> 1,
  nodeAffinityPolicy nil -> Honor, nodeTaintsPolicy nil -> Ignore, matchLabelKeys ANDed
  in (idempotently) when the gate is on;
* `default_constraints` applies the cluster defaults (System or List) with the pod's
  default selector built from Services, ReplicationControllers, ReplicaSets and
  StatefulSets in its namespace (upstream `helper.DefaultSelector`);
* `Inclusion` answers KEP-3094's node inclusion policies with the extender's own
  matchers: the effective required node affinity (spec + annotation, Semver operators)
  and the shared TolerationMatcher (Gt/Lt, Semver, CEL, annotation tolerations), so a
  spot node tolerated only through `Gt` counts as an eligible domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from extender.features import FeatureGates
from extender.matching.nodeselector import RequiredAffinity, required_affinity
from extender.matching.tolerations import TolerationMatcher, do_not_schedule
from extender.model import Node, Pod
from extender.plugins.helper import untolerated_mask
from extender.plugins.podtopologyspread.args import DO_NOT_SCHEDULE, HOSTNAME, SpreadArgs
from extender.plugins.podtopologyspread.selector import (
    EVERYTHING,
    LabelSelector,
    SelectorError,
    equality,
    from_map,
    parse_label_selector,
)
from extender.state.nodeset import NodeIndex, Reads
from extender.state.snapshot import ClusterSnapshot

HONOR = "Honor"


class ConstraintError(ValueError):
    """A constraint the scheduler could not convert (PreFilter/PreScore Error)."""


@dataclass(frozen=True, slots=True)
class Constraint:
    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False

    @property
    def is_hostname(self) -> bool:
        return self.topology_key == HOSTNAME

    def describe(self, i: int) -> str:
        return f"constraint {i} (topologyKey {self.topology_key}, maxSkew {self.max_skew}, selector {self.selector})"


def _int(raw: Mapping[str, Any], name: str, default: int, where: str) -> int:
    value = raw.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConstraintError(f"{where}.{name}: expected an integer, got {value!r}")
    return value


def _match_label_keys(raw: Mapping[str, Any], where: str) -> list[str]:
    keys = raw.get("matchLabelKeys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ConstraintError(f"{where}.matchLabelKeys: expected a list of strings")
    return keys


def convert(
    raws: Iterable[Mapping[str, Any]], action: str, pod_labels: Mapping[str, str], gates: FeatureGates
) -> list[Constraint]:
    """Upstream `filterTopologySpreadConstraints`: keep the phase's constraints, in order."""
    out = []
    for i, raw in enumerate(raws):
        where = f"topologySpreadConstraints[{i}]"
        if raw.get("whenUnsatisfiable") != action:
            continue
        key = raw.get("topologyKey") or ""
        if not isinstance(key, str):
            raise ConstraintError(f"{where}.topologyKey: expected a string")
        try:
            selector = parse_label_selector(raw.get("labelSelector"), f"{where}.labelSelector")
        except SelectorError as exc:
            raise ConstraintError(str(exc)) from None
        if gates.match_label_keys:
            pairs = [equality(k, pod_labels[k]) for k in _match_label_keys(raw, where) if k in pod_labels]
            if pairs:
                selector = selector.add(pairs)
        honor_affinity, honor_taints = True, False
        if gates.node_inclusion_policy:
            if raw.get("nodeAffinityPolicy") is not None:
                honor_affinity = raw.get("nodeAffinityPolicy") == HONOR
            if raw.get("nodeTaintsPolicy") is not None:
                honor_taints = raw.get("nodeTaintsPolicy") == HONOR
        out.append(
            Constraint(
                _int(raw, "maxSkew", 0, where),
                key,
                selector,
                _int(raw, "minDomains", 1, where),
                honor_affinity,
                honor_taints,
            )
        )
    return out


# --- cluster default constraints ---------------------------------------------------------


def _selector_map(obj: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, str] | None:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        return None
    return value


def _name(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def _controller(pod: Pod) -> Mapping[str, Any] | None:
    for ref in pod.owner_references:
        if ref.get("controller") is True:
            return ref
    return None


def default_selector(pod: Pod, snapshot: ClusterSnapshot) -> LabelSelector:
    """Upstream `helper.DefaultSelector`: Services matching the pod (selector maps
    merged), then the pod's controller: an RC's map is merged, a ReplicaSet's or
    StatefulSet's label selector requirements are ANDed; other owners are ignored."""
    merged: dict[str, str] = {}
    for svc in snapshot.workloads_in("Service", pod.namespace):
        sel = _selector_map(svc, ("spec", "selector"))
        if sel is not None and all(pod.labels.get(k) == v for k, v in sel.items()):
            merged.update(sel)
    selector = from_map(merged)
    owner = _controller(pod)
    if owner is None:
        return selector
    kind, api = owner.get("kind"), owner.get("apiVersion")
    name = owner.get("name")
    if kind == "ReplicationController" and api == "v1":
        for rc in snapshot.workloads_in("ReplicationController", pod.namespace):
            sel = _selector_map(rc, ("spec", "selector"))
            if _name(rc) == name and sel is not None:
                return from_map({**merged, **sel})
    elif kind in ("ReplicaSet", "StatefulSet") and api == "apps/v1":
        for wl in snapshot.workloads_in(kind, pod.namespace):
            if _name(wl) != name:
                continue
            try:
                other = parse_label_selector((wl.get("spec") or {}).get("selector"))
            except SelectorError:
                return selector
            return selector if other.nothing else selector.add(other.requirements)
    return selector


def default_constraints(
    pod: Pod, action: str, args: SpreadArgs, snapshot: ClusterSnapshot, gates: FeatureGates
) -> list[Constraint]:
    """Upstream `buildDefaultConstraints`: no selector requirements -> no constraints."""
    constraints = convert(args.defaults, action, pod.labels, gates)
    if not constraints:
        return []
    selector = default_selector(pod, snapshot)
    if selector.empty:
        return []
    return [
        Constraint(c.max_skew, c.topology_key, selector, c.min_domains, c.honor_affinity, c.honor_taints)
        for c in constraints
    ]


def constraints_for(
    pod: Pod, action: str, args: SpreadArgs, snapshot: ClusterSnapshot, gates: FeatureGates
) -> tuple[list[Constraint], bool]:
    """(constraints, from_pod). Raises ConstraintError with upstream's wording."""
    kind = "hard" if action == DO_NOT_SCHEDULE else "soft"
    if pod.topology_spread_constraints:
        try:
            return convert(pod.topology_spread_constraints, action, pod.labels, gates), True
        except ConstraintError as exc:
            raise ConstraintError(f"obtaining pod's {kind} topology spread constraints: {exc}") from None
    try:
        return default_constraints(pod, action, args, snapshot, gates), False
    except ConstraintError as exc:
        raise ConstraintError(f"setting default {kind} topology spread constraints: {exc}") from None


# --- node inclusion policies ---------------------------------------------------------------


class Inclusion:
    """Node eligibility for one pod and request (spec §1.5), memoized per taint tuple."""

    __slots__ = ("pod", "gates", "affinity", "matcher", "_by_taints", "_affinity_free")

    def __init__(self, pod: Pod, matcher: TolerationMatcher, gates: FeatureGates) -> None:
        self.pod = pod
        self.gates = gates
        self.affinity: RequiredAffinity = required_affinity(
            pod.node_selector, pod.affinity.required, gates.semver_operators
        )
        self._affinity_free = not pod.node_selector and not pod.affinity.required
        self.matcher = matcher
        self._by_taints: dict[tuple, bool] = {}

    @property
    def affinity_free(self) -> bool:
        """True when required affinity matches every node (nothing to check)."""
        return self._affinity_free

    def taints_ok(self, taints: tuple) -> bool:
        """No untolerated NoSchedule/NoExecute taint (PreferNoSchedule never excludes)."""
        hit = self._by_taints.get(taints)
        if hit is None:
            hit = self.matcher.first_untolerated(taints, do_not_schedule) is None
            self._by_taints[taints] = hit
        return hit

    def eligible(self, node: Node, c: Constraint) -> bool:
        if c.honor_affinity and not self._affinity_free and not self.affinity.matches(node):
            return False
        return not c.honor_taints or self.taints_ok(node.taints)


class EligibleMasks:
    """The fast path's view of `Inclusion`: the eligible nodes of a node layer as a bool
    vector over it (label codes for the topology keys and the required affinity, the
    untolerated mask TaintToleration's Filter shares), memoized per node layer: pods of
    one workload get the same vector back, and no Python loop runs over nodes."""

    __slots__ = ("inclusion", "layer")

    def __init__(self, inclusion: Inclusion, layer: NodeIndex) -> None:
        self.inclusion = inclusion
        self.layer = layer

    def eligible(self, c: Constraint, keys: tuple[str, ...]) -> np.ndarray:
        """Nodes carrying every one of `keys` that `c`'s inclusion policies admit
        (read-only: shared)."""
        inclusion, layer = self.inclusion, self.layer
        by_affinity = c.honor_affinity and not inclusion.affinity_free
        key = ("PTS eligible", keys, inclusion.affinity if by_affinity else None,
               (inclusion.pod.tolerations, inclusion.gates) if c.honor_taints else None)

        def compute() -> np.ndarray:
            mask = with_keys(layer, keys).copy()
            if by_affinity:
                mask &= inclusion.affinity.matching_mask(layer)
            if c.honor_taints:
                mask &= ~untolerated_mask(layer, inclusion.pod, inclusion.matcher, inclusion.gates)
            mask.flags.writeable = False
            return mask

        return layer.memo(key, compute, Reads.NODES)


def with_keys(layer: NodeIndex, keys: tuple[str, ...]) -> np.ndarray:
    """The nodes of `layer` carrying every one of `keys` (read-only; node-layer memo)."""

    def compute() -> np.ndarray:
        mask = np.ones(len(layer.nodes), dtype=bool)
        for key in keys:
            mask &= layer.codes(key)[0] >= 0
        mask.flags.writeable = False
        return mask

    return layer.memo(("PTS with keys", keys), compute, Reads.NODES)


def has_keys(node: Node, keys: Iterable[str]) -> bool:
    labels = node.labels
    return all(k in labels for k in keys)


def self_match(c: Constraint, pod: Pod) -> int:
    return 1 if c.selector.matches(pod.labels) else 0


def counts_pods(c: Constraint) -> bool:
    """`countPodsMatchSelector` short-cuts an Empty selector (and NOTHING matches none)."""
    return not c.selector.empty and not c.selector.nothing


__all__ = ["EVERYTHING", "Constraint", "ConstraintError", "Inclusion", "constraints_for"]
