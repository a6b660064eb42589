"""VolumeNodeAffinity: a pod runs only where every PersistentVolume it uses may be
attached, with the extended operators (KEP-5721 "Persistent Volumes NodeAffinity").

kube-scheduler's VolumeBinding (which stays enabled: it binds the volumes) checks a
volume's `spec.nodeAffinity` with the upstream operators only. This plugin checks what
it cannot read: the volume's `<prefix>/node-affinity` annotation (a JSON
VolumeNodeAffinity, ANDed with the spec's, as a pod's annotation is with its spec) and
Semver operators in `spec.nodeAffinity` where an API server stores them. Node labels
alone are matched, as upstream's `CheckNodeAffinity` does (so `matchFields` restrict
nothing). A failing node is UnschedulableAndUnresolvable with VolumeBinding's reason.

* **Bound claims** (`spec.volumeName` set): the node must satisfy the volume's whole
  requirement (spec and annotation).
* **Unbound claims** (WaitForFirstConsumer): the in-tree binder picks the volume in its
  own Filter, before the extender is called, and tells nobody which: the smallest
  candidate its view of `spec.nodeAffinity` admits on the node (list order and the
  volumes promised to pods in flight decide the rest). So a node passes only if
  **every** volume the binder could
  pick there (`FindMatchingVolume`'s candidates: class, phase Available, claimRef,
  capacity, volume mode, access modes, the claim's selector; or the volume pre-bound
  to the claim) satisfies its annotation there. Claims being provisioned
  (`volume.kubernetes.io/selected-node`) get a new volume with no annotation.

PreFilter resolves a pod's claims (each claim's checks once per volume layer: binds and
other pod events keep them); Filter is set algebra over the label index, memoized on the
node layer per set of checks; volumes with equal requirements make one check.

For a running pod (the drift report, `drift_judge`): each volume a claim of the pod is
bound to that no longer admits its node is `required`. Unbound or missing claims and
volumes the state does not hold are not a question of where the pod runs: no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from extender.caching import OnFirstUse, memoized
from extender.cel.lib.quantity import QuantityError, parse_quantity
from extender.framework import CycleState, Status
from extender.framework.drift import REQUIRED, Judge, Violation
from extender.framework.handle import SNAPSHOT_KEY, Handle
from extender.framework.interface import FilterPlugin, PreFilterPlugin
from extender.framework.status import SKIP, SUCCESS, unschedulable
from extender.framework.verdicts import Masks, masks_of
from extender.matching.nodeselector import CompiledSelector, compile_selector, selector_bytes
from extender.model import Node, NodeSelector, Pod
from extender.model.parse import node_selector_term
from extender.model.volumes import PersistentVolume, PersistentVolumeClaim
from extender.plugins.helper import universe_memo
from extender.plugins.podtopologyspread.selector import SelectorError, parse_label_selector
from extender.state.nodeset import NodeSet
from extender.state.volumes import EMPTY_VOLUMES, VolumeLayer
from extender.validation import aggregate
from extender.validation.annotations import VOLUME_NODE_AFFINITY, check_annotation

NAME = "VolumeNodeAffinity"
# upstream VolumeBinding's ConflictReasons (pkg/scheduler/framework/plugins/volumebinding)
ERR_REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
STATE_KEY = "PreFilter" + NAME
REJECTED = unschedulable(ERR_REASON_NODE_CONFLICT)
AVAILABLE = "Available"


@dataclass(frozen=True, slots=True)
class VolumeRequirement:
    """What one PersistentVolume asks of a node, parsed once per distinct volume."""

    spec: CompiledSelector | None  # spec.nodeAffinity.required with our operators
    in_tree: CompiledSelector | None  # the same as VolumeBinding reads it (no Semver)
    annotation: CompiledSelector | None
    error: str | None = None  # the annotation does not decode or validate: fails closed
    annotation_name: str = ""

    @property
    def extended(self) -> bool:
        """The volume has a node-affinity annotation (valid or not)."""
        return self.annotation is not None or self.error is not None

    def allows(self, labels) -> bool:
        """The whole requirement (spec AND annotation) holds for a node's labels."""
        if self.error is not None:
            return False
        return all(s is None or _matches(s, labels) for s in (self.spec, self.annotation))


def _matches(selector: CompiledSelector, labels) -> bool:
    """A labels-only selector against a node's labels (terms ORed)."""
    return any(all(r.matches(labels) for r in t.expressions) for t in selector.terms)


def _names(selector: CompiledSelector | None, nodes: NodeSet) -> frozenset[str] | set[str]:
    """Universe nodes a labels-only selector admits (None: every node)."""
    universe = nodes.universe.names
    return universe if selector is None else selector.matching_names(nodes.label_index(), universe)


@dataclass(frozen=True, slots=True)
class VolumeCheck:
    """One volume one of the pod's claims uses (bound) or may be given (a candidate)."""

    claim: str
    volume: str
    bound: bool
    requirement: VolumeRequirement
    status: Status = REJECTED  # of a node that fails the check

    def __post_init__(self) -> None:
        if self.requirement.error is not None:
            object.__setattr__(self, "status", unschedulable(
                f'PersistentVolume "{self.volume}" is invalid: {self.requirement.error}'))

    @property
    def key(self) -> tuple:
        """Checks with equal keys fail on the same nodes with the same message."""
        return (self.bound, self.requirement, self.volume if self.requirement.error is not None else "")

    def fails(self, labels) -> bool:
        req = self.requirement
        if self.bound:
            return not req.allows(labels)
        chosen_here = req.in_tree is None or _matches(req.in_tree, labels)
        return chosen_here and (req.error is not None or not _matches(req.annotation, labels))

    def failing_names(self, nodes: NodeSet) -> frozenset[str] | set[str]:
        """Universe nodes where the check fails (set algebra over the label index)."""
        req, universe = self.requirement, nodes.universe.names
        if self.bound:
            if req.error is not None:
                return universe
            return universe - (_names(req.spec, nodes) & _names(req.annotation, nodes))
        chosen_here = _names(req.in_tree, nodes)
        return chosen_here if req.error is not None else chosen_here - _names(req.annotation, nodes)

    def explain(self, labels) -> str:
        """Which volume and which requirement failed, for `extender explain`."""
        req = self.requirement
        if self.bound:
            head = f'claim "{self.claim}" is bound to PersistentVolume "{self.volume}"'
        else:
            head = (f'claim "{self.claim}" is not bound yet and the in-tree binder may choose '
                    f'PersistentVolume "{self.volume}" on this node (its spec.nodeAffinity admits it)')
        if req.error is not None:
            return f"{head}, whose {req.annotation_name} annotation is invalid: {req.error}"
        for where, selector in (("spec.nodeAffinity.required", req.spec if self.bound else None),
                                (f"metadata.annotations[{req.annotation_name}].required", req.annotation)):
            if selector is not None and not _matches(selector, labels):
                return f"{head}: {where}: {selector.why_not(labels)}"
        return head


# --- volumes' requirements, parsed once ---------------------------------------------------

# per (spec affinity, annotation text, prefix, gates); counted (and its memory share read,
# on first use) as a node-selectors cache, which is what it holds
volume_requirements = OnFirstUse("node-selectors", max_entries=4096)


def _compiled(selector: NodeSelector | None, semver: bool) -> CompiledSelector | None:
    return None if selector is None else compile_selector(selector, semver).labels_only()


def requirement(pv: PersistentVolume, prefix: str, gates) -> VolumeRequirement:
    """A volume's requirement, cached per (spec affinity, annotation text, prefix, gates)."""
    cache = volume_requirements()
    name = f"{prefix}/node-affinity"
    text = pv.annotations.get(name)
    key = (pv.node_affinity, text, name, gates)
    hit = cache.get(key)
    if hit is None:
        hit = _build_requirement(pv.node_affinity, text, name, gates)
        size = 2 * len(text or "") + (selector_bytes(pv.node_affinity) if pv.node_affinity else 0) + 1024
        cache.put(key, hit, size)
    return hit


def _build_requirement(spec: NodeSelector | None, text: str | None, name: str, gates) -> VolumeRequirement:
    semver = gates.semver_operators
    annotation = error = None
    if text is not None:
        checked = check_annotation(VOLUME_NODE_AFFINITY, text, f"metadata.annotations[{name}]", gates)
        if checked.errors:
            error = aggregate(checked.errors)
        else:
            terms = (checked.value.get("required") or {}).get("nodeSelectorTerms") or []
            selector = NodeSelector(tuple(node_selector_term(t, "") for t in terms))
            annotation = _compiled(selector, semver)
    return VolumeRequirement(_compiled(spec, semver), _compiled(spec, False), annotation, error, name)


# --- the claims of one pod ------------------------------------------------------------------

@memoized()  # capacities and requests repeat across volumes and claims
def _quantity(text: str) -> Decimal | None:
    """`resource.Quantity` of a capacity or request ("" = zero); None if it does not parse."""
    if not text:
        return Decimal(0)
    try:
        return parse_quantity(text)
    except QuantityError:
        return None


def _claim_selector(claim: PersistentVolumeClaim):
    if claim.selector is None:
        return None
    try:
        return parse_label_selector(claim.selector)
    except SelectorError:
        return None  # API validation forbids it; checking more candidates is the safe side


def _bound_to(pv: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
    """`IsVolumeBoundToClaim`: claimRef names the claim (and its uid, when set)."""
    ref = pv.claim_ref
    return ref is not None and ref[:2] == (claim.namespace, claim.name) and (not ref[2] or ref[2] == claim.uid)


def _fits(pv: PersistentVolume, claim: PersistentVolumeClaim, requested: Decimal | None) -> bool:
    """`FindMatchingVolume`'s node-independent checks that come before the pre-bound test."""
    capacity = _quantity(pv.capacity)
    if capacity is not None and requested is not None and capacity < requested:
        return False
    return pv.volume_mode == claim.volume_mode and not pv.deleting


def binder_candidates(layer: VolumeLayer, claim: PersistentVolumeClaim) -> list[PersistentVolume]:
    """Every volume the in-tree binder could pick for an unbound claim on some node: the
    volume pre-bound to the claim if there is one, else every available, unclaimed
    volume of its class that fits it (node affinity aside, which is per node)."""
    requested = _quantity(claim.request)
    volumes = layer.by_class().get(claim.storage_class, ())
    prebound = [pv for pv in volumes if _bound_to(pv, claim) and _fits(pv, claim, requested)]
    if prebound:
        return prebound
    selector = _claim_selector(claim)
    wanted = set(claim.access_modes)
    return [pv for pv in volumes
            if pv.claim_ref is None and pv.phase == AVAILABLE and _fits(pv, claim, requested)
            and (selector is None or selector.matches(pv.labels)) and wanted <= set(pv.access_modes)]


def _volumes(state: CycleState) -> VolumeLayer:
    snapshot = state.get(SNAPSHOT_KEY)
    return snapshot.volume_layer if snapshot is not None else EMPTY_VOLUMES


class VolumeNodeAffinity(PreFilterPlugin, FilterPlugin):
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.prefix = handle.annotation_prefix

    def _requirement(self, pv: PersistentVolume) -> VolumeRequirement:
        return requirement(pv, self.prefix, self.handle.gates)

    def claim_checks(self, layer: VolumeLayer, namespace: str, claim_name: str, ephemeral: bool
                     ) -> tuple[VolumeCheck, ...] | Status:
        """One claim's checks, or a status rejecting every node (a claim or a bound volume
        the cluster state does not hold: nothing can be verified). Once per volume layer:
        a claim's candidates only change with volumes and claims, not with pods."""
        claim = layer.claim(namespace, claim_name)
        if claim is None:
            if ephemeral:
                return unschedulable(
                    f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{claim_name}"')
            return unschedulable(f'persistentvolumeclaim "{claim_name}" not found')
        if claim.volume_name:
            pv = layer.volumes.get(claim.volume_name)
            if pv is None:
                return unschedulable(ERR_REASON_PV_NOT_EXIST, f'claim "{claim_name}" is bound to PersistentVolume '
                                     f'"{claim.volume_name}", which the cluster state does not hold')
            return (VolumeCheck(claim_name, pv.name, True, self._requirement(pv)),)
        if claim.selected_node:
            return ()
        checks: dict[tuple, VolumeCheck] = {}
        for pv in binder_candidates(layer, claim):
            req = self._requirement(pv)
            if req.extended:  # volumes with equal requirements fail on the same nodes: one check
                check = VolumeCheck(claim_name, pv.name, False, req)
                checks.setdefault(check.key, check)
        return tuple(checks.values())

    def checks(self, pod: Pod, layer: VolumeLayer) -> tuple[tuple[VolumeCheck, ...], Status]:
        """The volume checks of a pod (once per claim and volume layer), or a rejection."""
        out: dict[tuple, VolumeCheck] = {}
        gates = self.handle.gates
        for claim_name, ephemeral in pod.volume_claims:
            key = (NAME, pod.namespace, claim_name, ephemeral, self.prefix, gates)
            found = layer.memo(key, lambda c=claim_name, e=ephemeral: self.claim_checks(
                layer, pod.namespace, c, e))
            if isinstance(found, Status):
                return (), found
            for check in found:
                out.setdefault(check.key, check)
        return tuple(out.values()), SUCCESS

    def pre_filter(self, state: CycleState, pod: Pod, nodes: NodeSet):
        if not pod.volume_claims:
            return None, SKIP
        checks, status = self.checks(pod, _volumes(state))
        if not status.is_success:
            return None, status
        if not checks:
            return None, SKIP
        state.write(STATE_KEY, checks)
        return None, SUCCESS

    def _checks(self, state: CycleState, pod: Pod) -> tuple[VolumeCheck, ...]:
        checks = state.get(STATE_KEY)
        if checks is None:
            checks, _ = self.checks(pod, _volumes(state))
        return checks

    def filter(self, state: CycleState, pod: Pod, node: Node) -> Status:
        for check in self._checks(state, pod):
            if check.fails(node.labels):
                if state.explain:
                    return unschedulable(check.status.reasons[0], check.explain(node.labels))
                return check.status
        return SUCCESS

    @staticmethod
    def _universe_failures(checks: tuple[VolumeCheck, ...], nodes: NodeSet) -> list[tuple[Status, frozenset[str]]]:
        """(status, universe nodes) per check, each node under the first check it fails."""
        taken: set[str] = set()
        out = []
        for check in checks:
            failing = frozenset(check.failing_names(nodes)) - taken
            if failing:
                out.append((check.status, failing))
                taken |= failing
        return out

    def filter_nodes(self, state: CycleState, pod: Pod, nodes: NodeSet) -> Masks:
        """Masks over the candidates, from universe masks memoized on the node layer per
        set of checks (pods sharing volumes or requirements share them); per candidate in
        an explain run (a status with the label that fails), over the candidates' own
        nodes in Nodes mode."""
        if state.explain:
            return masks_of({n.name: s for n in nodes if not (s := self.filter(state, pod, n)).is_success}, nodes)
        checks = self._checks(state, pod)

        def universe_masks() -> Masks:
            return [(status, nodes.universe.mask_of(failing))
                    for status, failing in self._universe_failures(checks, nodes)]

        masks = universe_memo(state, nodes, (NAME, tuple(c.key for c in checks)), universe_masks)
        if masks is None:
            return [(status, nodes.mask_of(failing & nodes.names))
                    for status, failing in self._universe_failures(checks, nodes)]
        return [(status, nodes.gather(mask)) for status, mask in masks]


def drift_judge(plugin: VolumeNodeAffinity) -> Judge:
    """A running pod's verdicts on its bound volumes' node affinity (see the module
    docstring), by the checks Filter runs."""

    def judge(shape, node: Node, namespace: str, claims: tuple, volumes: VolumeLayer,
              name: str = "") -> tuple[Violation, ...]:
        if not claims:
            return ()
        checks, status = plugin.checks(Pod(namespace, name, volume_claims=claims), volumes)
        if not status.is_success:
            return ()  # a claim or volume the state does not hold: nothing to say about the node
        return tuple(Violation(NAME, REQUIRED, check.status.reasons[0], (check.explain(node.labels),))
                     for check in checks if check.bound and check.fails(node.labels))

    return judge
