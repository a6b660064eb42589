"""The `preempt` verb: which of kube-scheduler's preemption candidates can really take
the preemptor once their victims are gone.

kube-scheduler's DefaultPreemption picks victims per node by re-running only its
in-tree filters (`framework/preemption/preemption.go`), then hands the candidates to
each extender (`ExtenderPreemptionArgs`) and keeps only the nodes an extender returns
(`callExtenders`; a node left out is dropped). A node the in-tree NodeResourcesFit
rejected never reached our `filter`, so without this verb the scheduler would evict
pods on a node whose taints or affinity still exclude the preemptor.

Per candidate node, with that node's victims removed from the cluster:
* taints, node affinity and `unschedulable` do not change by eviction, so one filter
  run over all candidates decides them (UnschedulableAndUnresolvable: drop);
* PodTopologySpread is recomputed without the victims, node by node (each candidate
  is judged with only its own victims gone, as upstream evaluates each candidate);
* the victims of the nodes that remain are returned unchanged (`NodeNameToMetaVictims`).

Which nodes reach the dry run at all is decided by our `filter` (`unresolvable_without_victims`).
kube-scheduler runs DefaultPreemption on every node whose status is not
UnschedulableAndUnresolvable, re-running only its in-tree filters: a node our filter
rejected for skew passed all of those, so the dry run reprieves every pod there, finds
zero victims and (v1.30 `DryRunPreemption`) records the Error "expected at least one
victim pod on node"; with no other candidate the whole preemption attempt fails with
it, logged as an error at every retry. In-tree PodTopologySpread would have evicted
lower-priority matching pods there; through the extender protocol no node reaches
`preempt` without in-tree victims, so that cannot be had. What can: when our filter
finds no feasible node, each node it rejects as Unschedulable (preemption might help)
that hosts a pod of lower priority than the preemptor (the dry run's potential
victims) is answered in FailedAndUnresolvableNodes instead, with the same reason: the
dry run skips it, preemption on the nodes the in-tree filters rejected (capacity)
still happens, and the pod's event says "Preemption is not helpful for scheduling"
for those nodes instead of an error. Nodes without such pods stay Unschedulable (the
dry run answers "No preemption victims found" there, no error), as do all nodes of a
pod that never preempts (`preemptionPolicy: Never`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender import metrics
from extender.api.candidates import resolve
from extender.api.wire import WireError, go_fields
from extender.errors import ScoringError
from extender.framework.status import Code, Status
from extender.framework.verdicts import Failures
from extender.model import Pod
from extender.plugins.registry import records
from extender.state import ClusterSnapshot, Reads
from extender.state.layers import PodLayerWriter

LOWEST_PRIORITY = "lowest priority per node"  # snapshot memo key
TERMINAL_PHASES = ("Succeeded", "Failed")  # kube-scheduler's informer never sees these


@dataclass(frozen=True, slots=True)
class Victims:
    """One candidate node's victims: pod identities and the PDB violation count."""

    uids: tuple[str, ...]
    keys: tuple[tuple[str, str], ...]  # (namespace, name) when the full pods were sent
    num_pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: dict[str, Any]
    victims: dict[str, Victims]


def _int64(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 63) <= value < 1 << 63:
        raise WireError(f"{where} must be an int64")
    return value


def _pods(fields: dict[str, Any], where: str) -> list[Any]:
    """`Pods` ([]*MetaPod / []*v1.Pod): null or a list, as encoding/json decodes it."""
    pods = fields.get("Pods")
    if pods is None:
        return []
    if not isinstance(pods, list):
        raise WireError(f"{where}.Pods must be a list")
    return pods


def _meta_victims(raw: Any, where: str) -> Victims:
    if raw is None:
        return Victims((), (), 0)
    if not isinstance(raw, dict):
        raise WireError(f"{where} must be a MetaVictims object")
    fields = go_fields(raw, ("Pods", "NumPDBViolations"))
    uids = []
    for i, pod in enumerate(_pods(fields, where)):
        if not isinstance(pod, dict):
            raise WireError(f"{where}.Pods[{i}] must be a MetaPod object")
        uid = go_fields(pod, ("UID",)).get("UID") or ""
        if not isinstance(uid, str) or not uid:
            raise WireError(f"{where}.Pods[{i}].UID must be a non-empty string")
        uids.append(uid)
    return Victims(tuple(uids), (), _int64(fields.get("NumPDBViolations"), f"{where}.NumPDBViolations"))


def _full_victims(raw: Any, where: str) -> Victims:
    if raw is None:
        return Victims((), (), 0)
    if not isinstance(raw, dict):
        raise WireError(f"{where} must be a Victims object")
    fields = go_fields(raw, ("Pods", "NumPDBViolations"))
    uids, keys = [], []
    for i, pod in enumerate(_pods(fields, where)):
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        if not isinstance(meta, dict):
            raise WireError(f"{where}.Pods[{i}] must be a Pod with metadata")
        uids.append(str(meta.get("uid") or ""))
        keys.append((str(meta.get("namespace") or "default"), str(meta.get("name") or "")))
    return Victims(tuple(uids), tuple(keys), _int64(fields.get("NumPDBViolations"), f"{where}.NumPDBViolations"))


def decode_preemption_args(data: Any) -> PreemptionArgs:
    """`ExtenderPreemptionArgs` (Go field names, matched as encoding/json does):
    `NodeNameToMetaVictims` when the extender is nodeCacheCapable, else
    `NodeNameToVictims` with full pods."""
    if not isinstance(data, dict):
        raise WireError("ExtenderPreemptionArgs must be a JSON object")
    fields = go_fields(data, ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims"))
    pod = fields.get("Pod")
    if not isinstance(pod, dict):
        raise WireError("ExtenderPreemptionArgs.Pod is missing or not an object")
    meta, full = fields.get("NodeNameToMetaVictims"), fields.get("NodeNameToVictims")
    victims: dict[str, Victims] = {}
    for field_name, raw, parse in (("NodeNameToVictims", full, _full_victims),
                                   ("NodeNameToMetaVictims", meta, _meta_victims)):
        if raw is None:
            continue
        if not isinstance(raw, dict):
            raise WireError(f"ExtenderPreemptionArgs.{field_name} must be an object")
        for node, value in raw.items():
            victims[node] = parse(value, f"{field_name}[{node!r}]")
    return PreemptionArgs(pod, victims)


def meta_victims_json(victims: dict[str, Victims]) -> dict[str, Any]:
    """`ExtenderPreemptionResult`: every kept node's victims as MetaVictims."""
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in v.uids], "NumPDBViolations": v.num_pdb_violations}
        for node, v in victims.items()}}


def without(snapshot: ClusterSnapshot, victims: Victims) -> ClusterSnapshot:
    """The snapshot minus the victims (matched by UID, or namespace/name when the pod
    carried no UID): a new pod layer sharing every untouched namespace, the same node
    and workload layers."""
    uids = {u for u in victims.uids if u}
    keys = set(victims.keys)
    gone = [p for p in snapshot.pods if p.uid in uids or (p.namespace, p.name) in keys]
    if not gone:
        return snapshot
    writer = PodLayerWriter(snapshot.pod_layer)
    for p in gone:
        writer.remove(p.namespace, p.name)
    return snapshot.with_pods(writer.publish())


def surviving_nodes(engine, snapshot: ClusterSnapshot, pod: Pod, args: PreemptionArgs) -> dict[str, Victims]:
    """The candidates where the preemptor passes our filters once its victims are gone.

    `engine` is the `Extender` (its new_state/run_filter). Nodes not in our
    state are dropped: we cannot vouch for them. A plugin failing on the preemptor (a
    malformed spread constraint fails PreFilter) raises ScoringError: the request is at
    fault, and kube-scheduler treats any failed `preempt` call as an error."""
    names = [n for n in args.victims if n in snapshot.nodes.by_name]
    if not names:
        return {}
    outcome = engine.run_filter(engine.new_state(snapshot), pod, resolve(snapshot, names))
    if outcome.error:
        raise ScoringError(outcome.error)
    statuses = outcome.statuses
    kept: dict[str, Victims] = {}
    # a plugin whose verdict eviction can change (the registry's `eviction_matters`)
    eviction_matters = any(r.eviction_matters(pod) for r in records() if r.eviction_matters is not None)
    for name in names:
        status = statuses.get(name)
        if status is not None and status.code is not Code.UNSCHEDULABLE:
            continue  # taints, affinity, cordon, a missing topology label: eviction cannot help
        if status is None and not eviction_matters:
            kept[name] = args.victims[name]
            continue
        # eviction may help (only such a plugin answers Unschedulable): judge again without the victims
        reduced = without(snapshot, args.victims[name])
        again = engine.run_filter(engine.new_state(reduced), pod, resolve(reduced, [name]))
        if again.error:
            raise ScoringError(again.error)
        if again.feasible_names == [name]:
            kept[name] = args.victims[name]
    return kept


def lowest_priorities(snapshot: ClusterSnapshot) -> dict[str, int]:
    """Node name -> the lowest priority of the pods on it (once per snapshot)."""

    def compute() -> dict[str, int]:
        lowest: dict[str, int] = {}
        for p in snapshot.pods:
            if p.node_name and p.phase not in TERMINAL_PHASES:
                seen = lowest.get(p.node_name)
                if seen is None or p.priority < seen:
                    lowest[p.node_name] = p.priority
        return lowest

    return snapshot.memo(LOWEST_PRIORITY, compute, Reads.PODS)


def unresolvable_without_victims(snapshot: ClusterSnapshot, pod: Pod, failures: Failures) -> Failures:
    """`failures` (of a filter answer with no feasible node) with each Unschedulable
    node that hosts a pod of lower priority than `pod` made UnschedulableAndUnresolvable,
    same reasons: kube-scheduler's dry run would find no victim there and fail the
    preemption attempt (see the module docstring)."""
    if not pod.preempts or not any(status.code is Code.UNSCHEDULABLE for status, _ in failures):
        return failures
    lowest = lowest_priorities(snapshot)
    out: Failures = []
    moved = 0
    for status, names in failures:
        if status.code is not Code.UNSCHEDULABLE:
            out.append((status, names))
            continue
        stay = [n for n in names if lowest.get(n, pod.priority) >= pod.priority]
        move = [n for n in names if lowest.get(n, pod.priority) < pod.priority]
        if stay:
            out.append((status, stay))
        if move:
            out.append((Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, status.reasons, status.details), move))
            moved += len(move)
    if moved:
        metrics.UNRESOLVABLE_FOR_PREEMPTION_TOTAL.inc(moved)
    return out
