"""The extender's engine: one pod, candidate nodes, cluster state -> verdicts and scores.

One entry point per verb, each `args -> answer` (the JSON bytes kube-scheduler reads):
`filter`, `prioritize`, `preempt`, `bind`. The HTTP server (`extender.server.verbs`)
decodes a request and calls one of them; `extender explain` and preemption run the
same framework through the building blocks below (`run_filter`, `run_score`), so all
of them always agree. Nothing here knows about HTTP; the plugins know nothing of the
wire format (`extender.api` writes it).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from extender import metrics
from extender.api.answers import (
    expect_prioritize,
    filter_answer,
    host_priority_json,
    slim_priority_json,
)
from extender.api.candidates import Candidates, resolve
from extender.api.wire import ExtenderArgs, encode, error_filter_result
from extender.caching import ByteLRU, set_memory_limit
from extender.cel import CelCache
from extender.config import Config
from extender.engine.binding import (
    DEFAULT_BIND_SECONDS,
    BindingArgs,
    Bindings,
    PostBinding,
    binder_for,
    refused,
)
from extender.engine.gate import Gate, StateNotReady
from extender.engine.inflight import InFlight, Unconfirmed, inflight_wait
from extender.engine.preemption import (
    PreemptionArgs,
    meta_victims_json,
    surviving_nodes,
    unresolvable_without_victims,
)
from extender.errors import ScoringError
from extender.framework import CycleState, FilterOutcome, Framework, ScoreOutcome
from extender.framework.handle import SNAPSHOT_KEY, Handle
from extender.framework.scoring import combine_vector
from extender.framework.status import unschedulable
from extender.model import Pod
from extender.model.parse import ModelError
from extender.plugins.registry import records
from extender.request import deadline, lane
from extender.request.deadline import DeadlineExceeded, request_deadline
from extender.schedconfig import Profile
from extender.state import ClusterSnapshot, ClusterSource, NodeSet
from extender.state.store import KINDS
from extender.validation.pod import pod_from_dict

__all__ = ["ERR_UNKNOWN_NODE", "STATE_VERSION_HEADER", "Extender", "ScoringError", "UnknownProfile"]

log = logging.getLogger("extender.engine")

# kube-scheduler sends the same Pod bytes to filter and then prioritize: parsed once.
PARSED_PODS = 256
MAX_PARSED_POD_KEY = 64 << 10  # larger bodies are parsed every time, never held
# A node the state has not seen yet (new node, watch lag) is retryable: Unschedulable,
# not UnschedulableAndUnresolvable, which would exclude it from preemption and delay the
# pod's requeueing.
ERR_UNKNOWN_NODE = "node not seen yet by the extender's cluster state (new node or watch lag)"
UNKNOWN_NODE = unschedulable(ERR_UNKNOWN_NODE, unresolvable=False)
# The answer header naming the cluster state a verdict was computed on: the API
# resourceVersion of each watched kind (`ClusterSnapshot.state_version`).
STATE_VERSION_HEADER = "X-Extender-State-Version"


class Extender:
    def __init__(self, config: Config, source: ClusterSource, cel: Any = None, fast: bool = True,
                 binder: PostBinding | None | bool = True) -> None:
        """`binder`: how `bind` posts bindings (True: through the live source's API
        client; None: no API access, `bind` answers an Error). `fast=False`: every
        plugin runs its per-node reference form (the differential tests' oracle)."""
        set_memory_limit(config.memory_limit_bytes)  # before any cache is created
        if cel is None:
            cel = CelCache(config.cel_program_cache_size, config.cel_result_cache_size)
        self.config = config
        self.source = source
        self.gate = Gate(source)  # no verdict on a partial or stale state (extender.engine.gate)
        self.binder = binder_for(source) if binder is True else binder
        self.cel = cel
        # one Framework per kube-scheduler profile, built here once; a pod's own profile
        # (spec.schedulerName) is found with one dict lookup (`profile_of`)
        self.profiles: dict[str, Profiled] = {
            name: _profiled(profile, config, cel, fast) for name, profile in config.profiles().profiles.items()}
        first = next(iter(self.profiles.values()))
        self.framework = first.framework  # the first profile's (explain, drift: not yet per pod)
        # without --scheduler-config the one profile the old settings describe answers every
        # pod, whatever its schedulerName, as before
        self._any_pod = None if config.scheduler_config else first
        self.handle = first.handle
        # pods answered here and not yet bound / seen bound (extender.engine.inflight)
        self.inflight = InFlight(source, inflight_wait(config, self.binder), self._hard_selectors)
        self.bindings = Bindings(self.inflight, self.binder)  # the bind verb's calls, to their outcome
        self._parsed = ByteLRU("parsed-pods", max_entries=PARSED_PODS)  # request bytes -> Pod
        self._versions = threading.local()  # the state version behind this thread's last verdict
        # --record-events: told of every pod the filter leaves with no node (its `offer`,
        # which explains and records off this path); the server sets it
        self.events: Any = None
        # --drift-*: the drift report's tracker (extender.drift), read by /drift
        self.drift: Any = None

    # --- the verbs -----------------------------------------------------------------------

    def filter(self, args: ExtenderArgs) -> bytes:
        """ExtenderFilterResult. An answer that names a feasible node makes the pods
        after it wait for its bind (`extender.engine.inflight`); invalid arguments, a state
        that cannot give a verdict or whose kinds it reads are not confirmed current
        (`extender.engine.gate`), pods answered before it and still being bound, and the
        deadline answer `Error`."""
        refusal = self.gate.refusal("filter")
        if refusal is not None:
            return encode(error_filter_result(refusal))
        try:
            snapshot, pod, cands = self._inputs(args, refiltered=True)
        except ModelError as exc:
            return encode(error_filter_result(str(exc)))
        except Unconfirmed as exc:  # pods answered before it are still being bound
            return encode(error_filter_result(self.gate.refuse("filter", "inflight", str(exc))))
        except StateNotReady as exc:  # a kind it reads is being rechecked (counted by the gate)
            return encode(error_filter_result(str(exc)))
        with request_deadline(self.config.request_deadline):
            try:
                outcome = self.run_filter(self.new_state(snapshot), pod, cands)
            except DeadlineExceeded as exc:
                log.warning("request deadline exceeded", extra={"error": str(exc)})
                return encode(error_filter_result(str(exc)))
        if outcome.error:
            log.error("filter failed", extra={"pod": pod.key, "error": outcome.error})
            return encode(error_filter_result(outcome.error))
        if outcome.any_feasible():
            self.inflight.answered(pod, snapshot)  # it comes back through bind: the next pod waits
            answer = filter_answer(cands, outcome, slim=self.config.slim_answers)
            expect_prioritize(snapshot, cands, outcome.verdict.feasible(), answer)
            return answer
        if self.events is not None:
            self.events.offer(pod, cands)
        # kube-scheduler may try preemption next: every failing node, with its reason
        return filter_answer(cands, outcome, unresolvable_without_victims(snapshot, pod, outcome.failures))

    def prioritize(self, args: ExtenderArgs) -> bytes:
        """HostPriorityList of the known candidates, in request order. ModelError for
        invalid arguments and ScoringError when scoring itself fails (the server answers
        400; kube-scheduler logs and ignores any prioritize failure); StateNotReady (503)
        when the state cannot give a verdict."""
        self.gate.check("prioritize")
        snapshot, pod, cands = self._inputs(args, strict=False)  # scores only: never refused for it
        with request_deadline(self.config.request_deadline):
            try:
                outcome, scores = self.run_score(self.new_state(snapshot), pod, cands.nodes)
            except DeadlineExceeded as exc:
                raise ScoringError(str(exc)) from None
        if outcome.error:
            raise ScoringError(outcome.error)
        if self.config.slim_answers:
            return slim_priority_json(cands.nodes, scores, signed=self.config.score_mode == "in-tree")
        return host_priority_json(cands.nodes, scores)

    def preempt(self, args: PreemptionArgs) -> bytes:
        """ExtenderPreemptionResult: the candidates where the preemptor then passes our
        filters, with their victims (see extender.engine.preemption). ModelError for a bad pod,
        StateNotReady when the state cannot give a verdict."""
        self.gate.check("preempt")
        pod = self.pending_pod(args.pod)
        try:
            self.inflight.settle(pod)
        except Unconfirmed as exc:  # 503: the preemption attempt fails and is retried
            raise StateNotReady(self.gate.refuse("preempt", "inflight", str(exc))) from None
        self.gate.check_current("preempt", self.reads(pod))
        snapshot = self._used(self.source.snapshot())
        with request_deadline(self.config.request_deadline):
            try:
                kept = surviving_nodes(self, snapshot, pod, args)
            except DeadlineExceeded as exc:  # no partial answer: the scheduler retries
                raise ScoringError(str(exc)) from None
        metrics.PREEMPTION_NODES_TOTAL.labels("kept").inc(len(kept))
        metrics.PREEMPTION_NODES_TOTAL.labels("dropped").inc(len(args.victims) - len(kept))
        return encode(meta_victims_json(kept))

    def bind(self, args: BindingArgs) -> bytes:
        """ExtenderBindingResult for one binding (see extender.engine.binding): the API call
        gets what is left of the request's deadline (`--request-deadline`, counted from
        its arrival; 4 s when that is off)."""
        refusal = self.gate.refusal("bind")
        if refusal is not None:
            return encode(refused(self.inflight, args, refusal))
        with request_deadline(self.config.request_deadline or DEFAULT_BIND_SECONDS):
            left = deadline.remaining()
        return encode(self.bindings.bind(args, left))

    # --- building blocks ---------------------------------------------------------------

    def profile_of(self, pod: Pod, explaining: bool = False) -> Profiled:
        """The pod's own profile (spec.schedulerName); UnknownProfile (a ModelError: the
        filter answers an Error, prioritize 400) for a profile the configuration lacks.
        `explaining` (explain, which no scheduler asked for): the first profile then."""
        found = self.profiles.get(pod.scheduler_name, self._any_pod)
        if found is None and explaining:
            return next(iter(self.profiles.values()))
        if found is None:
            raise UnknownProfile(
                f"pod {pod.key}: spec.schedulerName {pod.scheduler_name!r} is not a profile of the extender's "
                f"scheduler configuration (profiles: {', '.join(self.profiles)}); the extender has no "
                "plugins, weights or arguments for it")
        return found

    def plugins_by_profile(self) -> tuple[list | None, dict[str, list]]:
        """(the plugins answering a pod of a profile the configuration lacks, None when
        such a pod gets an Error; each profile's plugins by schedulerName): what the
        drift report judges running pods with."""
        fallback = self._any_pod.framework.plugins if self._any_pod is not None else None
        return fallback, {name: found.framework.plugins for name, found in self.profiles.items()}

    def _hard_selectors(self, pod: Pod) -> list:
        found = self.profiles.get(pod.scheduler_name, self._any_pod)
        if found is None or not found.inflight_selectors:
            return []
        snapshot = self.source.snapshot()
        return [selector for selectors, plugin in found.inflight_selectors
                for selector in selectors(pod, plugin, snapshot)]

    def reads_other_nodes(self, pod: Pod, snapshot: Any) -> bool:
        """Whether a Filter verdict of the pod's profile (the first one for a pod of none)
        on a node reads other nodes too (`PluginRecord.reads_other_nodes`)."""
        found = self.profile_of(pod, explaining=True)
        return any(reads(pod, plugin, snapshot) for reads, plugin in found.reads_other_nodes)

    def parse_pod(self, raw: dict[str, Any], key: bytes | None = None) -> Pod:
        """The Pod model; with `key` (the request body without its NodeNames), parsed
        once for the filter and prioritize calls kube-scheduler makes for one pod."""
        if key is None or len(key) > MAX_PARSED_POD_KEY:
            return pod_from_dict(raw, self.config.annotation_prefix, gates=self.config.feature_gates)
        return self._parsed.get_or_build(
            key, lambda: pod_from_dict(raw, self.config.annotation_prefix, gates=self.config.feature_gates),
            lambda _: 2048 + 4 * len(key))  # tracemalloc: a Pod model is ~2-3x its JSON

    def pending_pod(self, args_pod: dict[str, Any], key: bytes | None = None) -> Pod:
        """The pod being scheduled: the cluster state's copy when it holds the same pod
        (same UID, not bound), else `ExtenderArgs.Pod`. kube-scheduler re-serializes the
        pod from its own Go types, so a field its version does not know (a toleration's
        `expression` before v1.35) never reaches us in the request; the state's copy is
        what the API server stores. The request's metadata alone finds it: the request
        is parsed only when the state has no such copy."""
        stored = self._stored_copy(args_pod)
        if stored is None:
            return self.parse_pod(args_pod, key)
        # Each watch event brings a new dict, so the copy is parsed once per version,
        # keyed by the dict's identity: the entry holds the dict, so its id cannot be
        # reused while cached (serializing it for a bytes key cost ~0.15 ms a request).
        raw = stored.raw
        if key is None or len(key) > MAX_PARSED_POD_KEY:  # as parse_pod: not cached
            return self.parse_pod(raw)
        _held, parsed = self._parsed.get_or_build(
            ("stored", id(raw)), lambda: (raw, pod_from_dict(raw, self.config.annotation_prefix,
                                                              gates=self.config.feature_gates)),
            lambda _: 2048 + 4 * len(key))  # the request's copy: about the same size
        return parsed

    def _stored_copy(self, args_pod: Any) -> Pod | None:
        """The state's pending copy of the pod `ExtenderArgs.Pod` names (same namespace,
        name and UID), or None (also for metadata that would not parse)."""
        meta = args_pod.get("metadata") if isinstance(args_pod, dict) else None
        if not isinstance(meta, dict):
            return None
        namespace, name, uid = meta.get("namespace") or "default", meta.get("name"), meta.get("uid")
        if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str) and uid):
            return None
        stored = self.source.snapshot().pod_layer.get(namespace, name)
        return stored if stored is not None and stored.raw is not None and stored.uid == uid else None

    def _inputs(self, args: ExtenderArgs, strict: bool = True,
                refiltered: bool = False) -> tuple[ClusterSnapshot, Pod, Candidates]:
        """The snapshot, the pod and the candidates; ModelError for invalid arguments.
        The snapshot is taken once the pods answered before this one are accounted for
        (`strict`: Unconfirmed when some are still not bound; `refiltered`: a filter,
        which ends the pod's own earlier cycle)."""
        pod = self.pending_pod(args.pod, args.pod_key)
        self.profile_of(pod)  # an unknown profile: no verdict
        if refiltered:
            self.inflight.refiltered(pod)
            self._caught_up(args.pod, pod)
        self.inflight.settle(pod, strict)
        self.gate.check_current("filter" if refiltered else "prioritize", self.reads(pod, every=not refiltered))
        snapshot = self._used(self.source.snapshot())
        return snapshot, pod, resolve(snapshot, args.node_names, args.nodes, args.names_key)

    def _caught_up(self, raw: dict[str, Any], pod: Pod) -> None:
        """Wait until our Pod watch has reached the pod as kube-scheduler sent it (its
        resourceVersion): a watch that cannot is suspected (live source's
        `await_version`), and the verdict refused (`check_current`). An event loop
        must not wait: the request moves to a pool thread."""
        meta = raw.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if not isinstance(rv, str) or not self.source.behind("Pod", rv):
            return
        if lane.on_loop():
            raise lane.NeedsCostlierLane(lane.POOL)
        self.source.await_version("Pod", rv, f"pod {pod.key}")

    def reads(self, pod: Pod, every: bool = False) -> tuple[str, ...]:
        """The kinds a filter verdict for `pod` reads (`every`: all of them, as scores
        do): nodes always; pods (and workloads, for default constraints) with topology
        spread; volumes with claims. Only those must be confirmed current."""
        if every:
            return KINDS
        read = {kind for reads, plugin in self.profile_of(pod).readers for kind in reads(pod, plugin)}
        return tuple(kind for kind in KINDS if kind in read)

    def _used(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """Remember `snapshot` as the state behind this thread's verdict."""
        self._versions.last = snapshot.state_version
        return snapshot

    def take_state_version(self) -> str:
        """The state version (`ClusterSnapshot.state_version`) behind the last verdict
        this thread computed, once ("" if none since the last call): the server sends it
        as the `X-Extender-State-Version` header, so a replay can judge each verdict
        against exactly the state it was computed on."""
        version = getattr(self._versions, "last", "")
        self._versions.last = ""
        return version

    def new_state(self, snapshot: ClusterSnapshot, explain: bool = False) -> CycleState:
        state = CycleState(metrics.counting() and metrics.sample_plugin_metrics(), explain)
        state.write(SNAPSHOT_KEY, snapshot)
        return state

    def run_filter(self, state: CycleState, pod: Pod, cands: Candidates, run_all: bool = False,
                   explaining: bool = False) -> FilterOutcome:
        """The pod's profile's filter over the known candidates, plus the unknown and
        unparseable ones (Unschedulable: retryable)."""
        outcome = self.profile_of(pod, explaining).framework.run_filter(state, pod, cands.nodes, run_all=run_all)
        if cands.unknown:
            outcome.add_failures(UNKNOWN_NODE, cands.unknown)
        for name, why in cands.unparseable:
            outcome.add_failures(unschedulable(why, unresolvable=False), [name])
        if metrics.counting() and (cands.unknown or cands.unparseable):
            metrics.UNKNOWN_NODES_TOTAL.inc(len(cands.unknown) + len(cands.unparseable))
        return outcome

    def run_score(self, state: CycleState, pod: Pod, nodes: NodeSet,
                  explaining: bool = False) -> tuple[ScoreOutcome, np.ndarray]:
        """Per-plugin outcome and the combined extender scores (an int64 vector) of the
        pod's profile."""
        framework = self.profile_of(pod, explaining).framework
        outcome = framework.run_score(state, pod, nodes)
        if outcome.error:
            return outcome, np.zeros(0, dtype=np.int64)
        return outcome, combine_vector(outcome, framework.weights, self.config.score_mode)


class UnknownProfile(ModelError):
    """A pod of a profile the scheduler configuration does not have."""


@dataclass(frozen=True, slots=True)
class Profiled:
    """One profile's framework, built once: its plugins (those it delegates to the
    extender), their arguments and weights; `readers`: every registered plugin's
    `reads` with the profile's instance of it (None where it does not run it: a pod's
    own spread constraints and claims are read whichever plugins it runs);
    `inflight_selectors`, `reads_other_nodes`: those records' fields with the profile's
    instance, for the plugins it runs that have them."""

    framework: Framework
    handle: Handle
    readers: tuple[tuple[Any, Any], ...]
    inflight_selectors: tuple[tuple[Any, Any], ...]
    reads_other_nodes: tuple[tuple[Any, Any], ...]


def _profiled(profile: Profile, config: Config, cel: Any, fast: bool) -> Profiled:
    """The Framework of one profile: the plugins it disables in-tree, in upstream's
    order, VolumeNodeAffinity with them (nothing when it delegates none: its pods then
    pass every node with score 0, kube-scheduler's own plugins decide)."""
    handle = Handle(config.feature_gates, cel, profile.plugin_args, config.annotation_prefix)
    running = {r.name: r.factory(handle) for r in records() if r.name in profile.delegated or
               (r.in_tree_points is None and profile.delegated)}
    plugins = list(running.values())
    readers = tuple((r.reads, running.get(r.name)) for r in records())
    selectors = tuple((r.inflight_selectors, running[r.name]) for r in records()
                      if r.inflight_selectors is not None and r.name in running)
    wide = tuple((r.reads_other_nodes, running[r.name]) for r in records()
                 if r.reads_other_nodes is not None and r.name in running)
    return Profiled(Framework(plugins, profile.weights, fast=fast, profile=profile.name), handle, readers,
                    selectors, wide)
