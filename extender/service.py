"""The extender's engine: one pod, candidate nodes, cluster state -> verdicts and scores.

Shared by the HTTP server and `extender explain`, so both always agree. Nothing here
knows about HTTP; nothing in the plugins knows about the wire format.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from extender import metrics
from extender.api.templates import (
    MAX_REMEMBERED_ANSWER,
    filter_json,
    host_priority_json,
)
from extender.api.wire import (
    ExtenderArgs,
    encode,
    error_filter_result,
    feasible_in,
    filter_result,
    host_priority_list,
    none_feasible_in,
)
from extender.binding import DEFAULT_BIND_SECONDS, BindingArgs, PostBinding, binder_for, refused
from extender.binding import bind as bind_pod
from extender.caching import ByteLRU, budget, set_memory_limit
from extender.cel import deadline
from extender.cel.deadline import DeadlineExceeded, request_deadline
from extender.config import Config
from extender.errors import ScoringError
from extender.events import recorder_for
from extender.framework import CycleState, FilterOutcome, Framework, ScoreOutcome, Status
from extender.framework.handle import SNAPSHOT_KEY, Handle
from extender.framework.runner import evaluation_counters
from extender.framework.shape import pod_shape
from extender.framework.status import Code, unschedulable
from extender.gate import Gate
from extender.inflight import InFlight
from extender.model import Node, Pod
from extender.model.parse import ModelError, node_from_dict, pod_from_dict
from extender.plugins.nodeaffinity import NodeAffinity
from extender.plugins.nodeunschedulable import NodeUnschedulable
from extender.plugins.podtopologyspread import PodTopologySpread
from extender.plugins.tainttoleration import TaintToleration
from extender.plugins.volumenodeaffinity import VolumeNodeAffinity
from extender.preemption import (
    PreemptionArgs,
    meta_victims_json,
    surviving_nodes,
    unresolvable_without_victims,
)
from extender.scoring import combine_vector
from extender.state import ClusterSnapshot, ClusterSource, NodeSet
from extender.state.nodeset import new_templates, template_budget

log = logging.getLogger("extender.service")

# Answers per (candidate list, verb, pod shape), per snapshot (see remembered_answer).
SHAPE_ANSWERS = "shape-answers"
# kube-scheduler sends the same Pod bytes to filter and then prioritize: parsed once.
PARSED_PODS = 256
MAX_PARSED_POD_KEY = 64 << 10  # larger bodies are parsed every time, never held
# A node the state has not seen yet (new node, watch lag) is retryable: Unschedulable,
# not UnschedulableAndUnresolvable, which would exclude it from preemption and delay the
# pod's requeueing.
ERR_UNKNOWN_NODE = "node not seen yet by the extender's cluster state (new node or watch lag)"
UNKNOWN_NODE = unschedulable(ERR_UNKNOWN_NODE, unresolvable=False)
ERR_UNPARSEABLE_NODE = "node object could not be read by the extender"


def build_plugins(handle: Handle) -> list:
    """Plugins in upstream's default multiPoint order (VolumeNodeAffinity where
    VolumeBinding is)."""
    return [NodeUnschedulable(handle), TaintToleration(handle), NodeAffinity(handle),
            VolumeNodeAffinity(handle), PodTopologySpread(handle)]


@dataclass(slots=True)
class Candidates:
    """The request's nodes resolved against cluster state (or taken from the request)."""

    nodes: NodeSet
    unknown: list[str] = field(default_factory=list)
    unparseable: list[tuple[str, str]] = field(default_factory=list)  # Nodes mode: (name, why)
    raw_by_name: dict[str, dict[str, Any]] | None = None  # Nodes mode: echo the objects


def inflight_wait(config: Config, binder: PostBinding | None) -> float:
    """`--inflight-wait`, or 0 without API access (file mode): nothing can ever show a
    pending pod bound there (`bind` answers an Error, a file is re-read every few
    seconds), so every pod would wait the full `--inflight-wait` for the one before."""
    if binder is None and config.inflight_wait > 0:
        log.debug("in-flight accounting off: no API access to bind pods or watch binds",
                 extra={"inflight_wait": config.inflight_wait})
        return 0.0
    return config.inflight_wait


class Extender:
    def __init__(
        self, config: Config, source: ClusterSource, cel: Any = None, fast: bool = True,
        remember_answers: bool | None = None, binder: PostBinding | None | bool = True,
    ) -> None:
        """`binder`: how `bind` posts bindings (True: through the live source's API
        client; None: no API access, `bind` answers an Error)."""
        set_memory_limit(config.memory_limit_bytes)  # before any cache is created
        if cel is None:
            from extender.cel import CelCache

            cel = CelCache(config.cel_program_cache_size, config.cel_result_cache_size)
        self.config = config
        # pods answered here and not yet bound / seen bound (extender.inflight)
        self.source = source
        self.gate = Gate(source)  # no verdict on a partial or stale state (extender.gate)
        self.binder = binder_for(source) if binder is True else binder
        self.cel = cel
        metrics.set_profile(config.scheduler_profile)  # one profile per process
        self.handle = Handle(config.feature_gates, cel, config.plugin_args, config.annotation_prefix)
        plugins = build_plugins(self.handle)
        self.framework = Framework(plugins, config.weights, fast=fast)
        spread = next(p for p in plugins if isinstance(p, PodTopologySpread))
        self.inflight = InFlight(source, inflight_wait(config, self.binder),
                                 lambda pod: spread.hard_selectors(pod, source.snapshot()))
        # request bytes -> Pod (frozen)
        self._parsed = ByteLRU("parsed-pods", max_entries=PARSED_PODS)
        # per pod shape (see remembered_answer); the config decides unless told here
        remember = config.remember_answers if remember_answers is None else remember_answers
        self.remember_answers = remember and fast
        # --record-events: pods the filter leaves with no node get an Event (off the path)
        self.events = recorder_for(self)

    # --- building blocks -----------------------------------------------------------

    def parse_pod(self, raw: dict[str, Any], key: bytes | None = None) -> Pod:
        """The Pod model; with `key` (the request body without its NodeNames), parsed
        once for the filter and prioritize calls kube-scheduler makes for one pod."""
        if key is None or len(key) > MAX_PARSED_POD_KEY:
            return pod_from_dict(raw, self.config.annotation_prefix, gates=self.config.feature_gates)
        return self._parsed.get_or_build(
            key, lambda: pod_from_dict(raw, self.config.annotation_prefix, gates=self.config.feature_gates),
            lambda _: 2048 + 4 * len(key))  # tracemalloc: a Pod model is ~2-3x its JSON

    def resolve(
        self, snapshot: ClusterSnapshot, names: list[str] | None, nodes: list[dict] | None,
        names_key: bytes | None = None,
    ) -> Candidates:
        """`names_key` (the NodeNames array's JSON text) lets a repeated list be
        resolved once per snapshot; the answer is shared, so it is never mutated."""
        if nodes is None and names_key is not None and len(names or ()) <= len(snapshot.nodes.nodes):
            # a list longer than the cluster has repeats or unknown names: not remembered
            return snapshot.nodes.candidates(names_key, lambda: self._shared(snapshot, names),
                                             lambda c: 2 * len(names_key) + 150 * len(c.nodes)
                                             + c.nodes.templates.maxsize)
        if nodes is not None:
            parsed: list[Node] = []
            raw_by_name: dict[str, dict[str, Any]] = {}
            unparseable: list[tuple[str, str]] = []
            for i, raw in enumerate(nodes):
                try:
                    node = node_from_dict(raw)
                except ModelError as exc:
                    name = _node_name(raw)
                    if not name:  # nothing to answer for: the request itself is invalid
                        raise ModelError(f"Nodes.items[{i}]: {exc}") from exc
                    unparseable.append((name, f"{ERR_UNPARSEABLE_NODE}: {exc}"))
                    continue
                parsed.append(node)
                raw_by_name[node.name] = raw
            return Candidates(NodeSet(parsed), raw_by_name=raw_by_name, unparseable=unparseable)
        universe = snapshot.nodes
        names = names or []
        nodes = NodeSet(None, universe, names)
        if nodes.names <= universe.names:
            return Candidates(nodes)
        unknown = [n for n in names if n not in universe.by_name]
        known = [n for n in names if n in universe.by_name]
        return Candidates(NodeSet(None, universe, known), unknown)

    def _shared(self, snapshot: ClusterSnapshot, names: list[str] | None) -> Candidates:
        cands = self.resolve(snapshot, names, None)
        # reused by many requests: worth templates, within what the cache is charged
        cands.nodes.templates = new_templates(template_budget(len(cands.nodes), cands.nodes.is_full))
        return cands

    def new_state(self, snapshot: ClusterSnapshot, explain: bool = False) -> CycleState:
        state = CycleState(record_plugin_metrics=metrics.counting() and metrics.sample_plugin_metrics())
        state.write(SNAPSHOT_KEY, snapshot)
        if explain:
            state.write("explain", True)
        return state

    def run_filter(self, state: CycleState, pod: Pod, cands: Candidates, run_all: bool = False) -> FilterOutcome:
        outcome = self.framework.run_filter(state, pod, cands.nodes, run_all=run_all)
        if cands.unknown:
            outcome.add_failures(UNKNOWN_NODE, cands.unknown)
        for name, why in cands.unparseable:
            outcome.add_failures(unschedulable(why, unresolvable=False), [name])
        if metrics.counting() and (cands.unknown or cands.unparseable):
            metrics.UNKNOWN_NODES_TOTAL.inc(len(cands.unknown) + len(cands.unparseable))
        return outcome

    def run_score(self, state: CycleState, pod: Pod, nodes: NodeSet) -> tuple[ScoreOutcome, np.ndarray]:
        """Per-plugin outcome and the combined extender scores (an int64 vector)."""
        outcome = self.framework.run_score(state, pod, nodes)
        if outcome.error:
            return outcome, np.zeros(0, dtype=np.int64)
        return outcome, combine_vector(outcome, self.config.weights, self.config.score_mode)

    # --- the two verbs ---------------------------------------------------------------

    def pending_pod(self, args_pod: dict[str, Any], key: bytes | None = None) -> Pod:
        """The pod being scheduled: the cluster state's copy when it holds the same pod
        (same UID, not bound), else `ExtenderArgs.Pod`. kube-scheduler re-serializes the
        pod from its own Go types, so a field its version does not know (a toleration's
        `expression` before v1.35) never reaches us in the request; the state's copy is
        what the API server stores."""
        pod = self.parse_pod(args_pod, key)
        stored = self.source.snapshot().pod_layer.get(pod.namespace, pod.name)
        if stored is None or stored.raw is None or not pod.uid or stored.uid != pod.uid:
            return pod
        return self.parse_pod(stored.raw, orjson.dumps(stored.raw))

    def _inputs(self, args: ExtenderArgs) -> tuple[ClusterSnapshot, Pod, Candidates]:
        """The snapshot, the pod and the candidates; ModelError for invalid arguments.
        The snapshot is taken once the pods answered before this one are accounted for."""
        pod = self.pending_pod(args.pod, args.pod_key)
        self.inflight.settle(pod)
        snapshot = self.source.snapshot()
        return snapshot, pod, self.resolve(snapshot, args.node_names, args.nodes, args.names_key)

    def _filtered(
        self, args: ExtenderArgs,
    ) -> tuple[Candidates, FilterOutcome, ClusterSnapshot, Pod] | dict[str, Any]:
        """The filter outcome, or an ExtenderFilterResult carrying the error."""
        refusal = self.gate.refusal("filter")
        if refusal is not None:
            return error_filter_result(refusal)
        try:
            snapshot, pod, cands = self._inputs(args)
        except ModelError as exc:
            return error_filter_result(str(exc))
        outcome = self.run_filter(self.new_state(snapshot), pod, cands)
        if outcome.error:
            log.error("filter failed", extra={"pod": pod.key, "error": outcome.error})
            return error_filter_result(outcome.error)
        return cands, outcome, snapshot, pod

    @staticmethod
    def _filter_result(cands: Candidates, outcome: FilterOutcome, snapshot: ClusterSnapshot,
                       pod: Pod) -> dict[str, Any]:
        failures = outcome.failures
        if not outcome.feasible_names:  # kube-scheduler may try preemption next
            failures = unresolvable_without_victims(snapshot, pod, failures)
        if cands.raw_by_name is not None:
            items = [cands.raw_by_name[name] for name in outcome.feasible_names]
            return filter_result(None, items, failures)
        return filter_result(outcome.feasible_names, None, failures)

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """The ExtenderFilterResult as Python objects (explain, tests, embedding)."""
        with request_deadline(self.config.request_deadline):
            try:
                answer = self._filtered(args)
                if isinstance(answer, dict):
                    return answer
                result = self._filter_result(*answer)
            except DeadlineExceeded as exc:
                return self._out_of_time(exc)
        if answer[1].feasible_names:
            self.inflight.answered(answer[3], answer[2])
        return result

    @staticmethod
    def _out_of_time(exc: DeadlineExceeded) -> dict[str, Any]:
        """A request past `--request-deadline` answers an Error, never a verdict."""
        log.warning("request deadline exceeded", extra={"error": str(exc)})
        return error_filter_result(str(exc))

    def prioritize_vector(self, args: ExtenderArgs) -> tuple[NodeSet, np.ndarray]:
        """The scored candidates (request order, unknown names left out) and their
        extender scores.

        Raises ModelError for invalid arguments and ScoringError when scoring itself
        fails (the server answers 400 / 500; kube-scheduler logs and ignores any
        prioritize failure); StateNotReady (503) when the state cannot give a verdict."""
        self.gate.check("prioritize")
        snapshot, pod, cands = self._inputs(args)
        with request_deadline(self.config.request_deadline):
            try:
                outcome, scores = self.run_score(self.new_state(snapshot), pod, cands.nodes)
            except DeadlineExceeded as exc:
                raise ScoringError(str(exc)) from None
        if outcome.error:
            raise ScoringError(outcome.error)
        return cands.nodes, scores

    def prioritize_scores(self, args: ExtenderArgs) -> tuple[list[str], list[int]]:
        nodes, scores = self.prioritize_vector(args)
        return nodes.order, scores.tolist()

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """The HostPriorityList as Python objects (explain, tests, embedding)."""
        return host_priority_list(*self.prioritize_scores(args))

    def filter_bytes(self, args: ExtenderArgs) -> bytes:
        """`filter`'s ExtenderFilterResult as JSON (the HTTP server's entry point); a
        batch verdict over a candidate set that serves many requests is written from
        the set's pre-encoded names, without a dict per node, once per pod shape."""
        refusal = self.gate.refusal("filter")
        if refusal is not None:
            return encode(error_filter_result(refusal))
        try:
            snapshot, pod, cands = self._inputs(args)
        except ModelError as exc:
            return encode(error_filter_result(str(exc)))
        with request_deadline(self.config.request_deadline):
            try:
                answer = self.remembered_answer("Filter", snapshot, pod, cands, self._filter_bytes)
            except DeadlineExceeded as exc:
                return encode(self._out_of_time(exc))
        if feasible_in(answer):
            self.inflight.answered(pod, snapshot)  # it comes back through bind: the next pod waits
        elif self.events is not None and none_feasible_in(answer):
            self.events.offer(pod, cands)  # explained and recorded off this path
        return answer

    def _filter_bytes(self, state: CycleState, pod: Pod, cands: Candidates) -> tuple[bytes, bool]:
        outcome = self.run_filter(state, pod, cands)
        if outcome.error:
            log.error("filter failed", extra={"pod": pod.key, "error": outcome.error})
            return encode(error_filter_result(outcome.error)), False
        verdict = outcome.verdict
        if verdict is not None and cands.nodes.templates is not None and (verdict.status_of < 0).any():
            return filter_json(verdict, outcome.extra), True
        return encode(self._filter_result(cands, outcome, state.read(SNAPSHOT_KEY), pod)), True

    def prioritize_bytes(self, args: ExtenderArgs) -> bytes:
        """`prioritize`'s HostPriorityList as JSON (the HTTP server's entry point),
        written into a per-candidate-list template without a dict per host, once per
        pod shape."""
        self.gate.check("prioritize")
        snapshot, pod, cands = self._inputs(args)
        with request_deadline(self.config.request_deadline):
            try:
                return self.remembered_answer("Score", snapshot, pod, cands, self._prioritize_bytes)
            except DeadlineExceeded as exc:
                raise ScoringError(str(exc)) from None

    def _prioritize_bytes(self, state: CycleState, pod: Pod, cands: Candidates) -> tuple[bytes, bool]:
        outcome, scores = self.run_score(state, pod, cands.nodes)
        if outcome.error:
            raise ScoringError(outcome.error)
        return host_priority_json(cands.nodes, scores), True

    # --- inside kube-scheduler: bind and preempt ----------------------------------------

    def bind(self, args: BindingArgs) -> dict[str, str]:
        """`ExtenderBindingResult` for one binding (see extender.binding): the API call
        gets what is left of the request's deadline (`--request-deadline`, counted from
        its arrival; 4 s when that is off)."""
        refusal = self.gate.refusal("bind")
        if refusal is not None:
            return refused(self.inflight, args, refusal)
        with request_deadline(self.config.request_deadline or DEFAULT_BIND_SECONDS):
            left = deadline.remaining()
        return bind_pod(self.inflight, self.binder, args, left)

    def preempt(self, args: PreemptionArgs) -> dict[str, Any]:
        """`ExtenderPreemptionResult`: the candidates where the preemptor then passes our
        filters, with their victims (see extender.preemption). ModelError for a bad pod,
        StateNotReady when the state cannot give a verdict."""
        self.gate.check("preempt")
        pod = self.pending_pod(args.pod)
        self.inflight.settle(pod)
        with request_deadline(self.config.request_deadline):
            try:
                kept = surviving_nodes(self, self.source.snapshot(), pod, args)
            except DeadlineExceeded as exc:  # no partial answer: the scheduler retries
                raise ScoringError(str(exc)) from None
        metrics.PREEMPTION_NODES_TOTAL.labels("kept").inc(len(kept))
        metrics.PREEMPTION_NODES_TOTAL.labels("dropped").inc(len(args.victims) - len(kept))
        return meta_victims_json(kept)

    def remembered_answer(
        self, point: str, snapshot: ClusterSnapshot, pod: Pod, cands: Candidates,
        write: Callable[[CycleState, Pod, Candidates], tuple[bytes, bool]],
    ) -> bytes:
        """`write`'s answer, computed once per pod shape (`framework.shape`), snapshot
        and candidate list many requests share (error answers, which `write` flags,
        never). Reuse counts the first answer's plugin evaluations again, so
        scheduler_plugin_evaluation_total still counts what was answered."""
        state = self.new_state(snapshot)
        if cands.nodes.templates is None or not self.remember_answers:
            return write(state, pod, cands)[0]
        started = time.perf_counter()
        try:
            shape = pod_shape(pod, snapshot)
        except TypeError:  # e.g. unknown fields nested deeper than orjson goes: no reuse
            return write(state, pod, cands)[0]
        answers = snapshot.memo(SHAPE_ANSWERS, _shape_answers)
        key = (cands.nodes, point, shape)
        hit = answers.get(key)
        if hit is not None:
            for counter, n in hit[1]:
                counter.inc(n)
            self.framework.observe_point(point, Code.SUCCESS, started)
            return hit[0]
        answer, keepable = write(state, pod, cands)
        if keepable and len(answer) <= MAX_REMEMBERED_ANSWER:
            charge = len(answer) + 100 * len(cands.nodes) + 1024  # the key holds the candidate set
            answers.put(key, (answer, evaluation_counters(state.evaluations)), charge)
        return answer


def _node_name(raw: Any) -> str:
    """The name of a node object that failed to parse, if it has a usable one."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _shape_answers() -> ByteLRU:
    return ByteLRU("answers", max_item_bytes=budget("answers") // 8)


def status_dict(status: Status | None, score: int | None) -> dict[str, Any]:
    if status is None:
        return {"code": "Success", "reasons": [], "score": score}
    reasons = list(status.reasons) + list(status.details)
    return {"code": str(status.code), "reasons": reasons, "score": score}
