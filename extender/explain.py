"""Why is my pod pending? The same framework run as `/filter` and `/prioritize`,
rendered with every plugin's verdict and score per node, and a summary that groups the
nodes by reason. Used by `extender explain` (offline, on a cluster file), by the side
listener's `/explain` (live state, `extender.server.explain_routes`) and by the
unschedulable-pod events (`extender.events`).

The JSON shape is a public contract (and our black-box test interface):
{"results": [{"pod", "filter", "prioritize", "nodes": {node: {"plugins": {plugin:
{"code", "reasons", "score"}}}}, "summary"}]}. `summary` (added later, so extend-only)
groups the failing nodes by the reason kube-scheduler's event counts them under, then
by the extender's detail, with counts and a few example nodes: a 5,000-node answer
stays readable. `trim` cuts `filter`, `prioritize` and `nodes` down to the summary's
example nodes for the live endpoint's default view (same shape, a true subset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender import metrics
from extender.api.candidates import Candidates, resolve
from extender.api.wire import filter_result
from extender.engine import Extender
from extender.framework import FilterOutcome, Status
from extender.matching.tolerations import UNRELATED_LINE
from extender.matching.tolerations import key_details as key_details
from extender.model import Pod
from extender.state import ClusterSnapshot, NodeSet, StaticSource
from extender.state.layers import PodLayerWriter
from extender.validation import check_pod
from extender.validation.rules import SlowExpressionPolicy, admission

EXAMPLES = 3  # example nodes per detail group (and top feasible nodes)
MAX_EXAMPLES = 50
MAX_GROUPS = 10  # detail groups shown per reason; the rest are counted
MAX_DETAIL_CHARS = 1000  # per detail line in the summary (CEL errors can be long)
CLUSTER_STATE = "ClusterState"  # the "plugin" of nodes the state does not know
# The filter of detail lines the drift report, events and summaries share, here where the
# kubectl plugin's copy of it (`kubectl_extender.render`) is compared with it.
_UNRELATED = UNRELATED_LINE

def snapshot_without(snapshot: ClusterSnapshot, pod: Pod) -> ClusterSnapshot:
    """The cluster minus a pod with the explained pod's namespace/name (if any): a new
    pod layer that copies only that namespace, on the same node layer (and its memos)."""
    if snapshot.pod_layer.get(pod.namespace, pod.name) is None:
        return snapshot
    writer = PodLayerWriter(snapshot.pod_layer)
    writer.remove(pod.namespace, pod.name)
    return snapshot.with_pods(writer.publish())


@dataclass(slots=True)
class Diagnosis:
    """The filter's answer (`wire`, what kube-scheduler reads) and every plugin's
    verdict with details (`detail`), for one pod on one snapshot."""

    pod: Pod
    snapshot: ClusterSnapshot
    cands: Candidates
    wire: FilterOutcome
    detail: FilterOutcome
    plugin_names: list[str]

    @property
    def names(self) -> list[str]:
        """Every candidate: known nodes in request order, then unknown/unparseable."""
        return [*self.cands.nodes.order, *self.cands.unknown, *(n for n, _ in self.cands.unparseable)]

    def deciding(self, node: str) -> tuple[str, Status | None]:
        """(plugin, detailed status) of the plugin whose verdict the wire reports for
        `node`: a PreFilterResult first, then the first failing plugin in profile
        order, as upstream's RunFilterPlugins stops there."""
        restricted = self.detail.per_plugin.get("PreFilterResult", {}).get(node)
        if restricted is not None:
            return "PreFilterResult", restricted
        for name in self.plugin_names:
            status = self.detail.per_plugin.get(name, {}).get(node)
            if status is not None:
                return name, status
        return CLUSTER_STATE, None


def status_dict(status: Status | None, score: int | None) -> dict[str, Any]:
    if status is None:
        return {"code": "Success", "reasons": [], "score": score}
    reasons = list(status.reasons) + list(status.details)
    return {"code": str(status.code), "reasons": reasons, "score": score}


def diagnose(extender: Extender, pod: Pod, snapshot: ClusterSnapshot, cands: Candidates) -> Diagnosis:
    """Run the filter twice: as the verb does, and with every plugin and its details."""
    with metrics.quiet():
        wire = extender.run_filter(extender.new_state(snapshot), pod, cands, explaining=True)
        detail = extender.run_filter(extender.new_state(snapshot, explain=True), pod, cands, run_all=True,
                                     explaining=True)
    return Diagnosis(pod, snapshot, cands, wire, detail,
                     extender.profile_of(pod, explaining=True).framework.plugin_names())


def explain_pod(
    extender: Extender, pod_raw: dict[str, Any], candidates: list[str] | None,
    snapshot: ClusterSnapshot | None = None, examples: int = EXAMPLES, every_node: bool = True,
) -> dict[str, Any]:
    """One result of the contract, `summary` included; `snapshot` defaults to the
    source's current one. `every_node=False`: the summary view (`trim`), with the
    per-node verdicts built only for the example nodes (most of the work at 5,000)."""
    pod = extender.parse_pod(pod_raw)
    snapshot = snapshot_without(snapshot or extender.source.snapshot(), pod)
    names = candidates if candidates is not None else [n.name for n in snapshot.nodes.nodes]
    cands = resolve(snapshot, names)
    diag = diagnose(extender, pod, snapshot, cands)
    wire = diag.wire
    filter_json = (
        filter_result(None, None, {}, wire.error)
        if wire.error
        else filter_result(wire.feasible_names, None, wire.failures)
    )

    feasible = NodeSet([snapshot.nodes.by_name[n] for n in wire.feasible_names], snapshot.nodes)
    with metrics.quiet():
        score_outcome, totals = extender.run_score(extender.new_state(snapshot), pod, feasible, explaining=True)
    prioritize = [{"Host": n.name, "Score": s} for n, s in zip(feasible.nodes, totals.tolist(), strict=False)]
    summary = summarize(diag, prioritize, examples)
    keep = None if every_node else example_nodes(summary)
    nodes = node_verdicts(diag, score_outcome, feasible, keep)
    result = {"pod": pod.key, "filter": filter_json, "prioritize": prioritize, "nodes": nodes}
    if score_outcome.error:
        result["prioritizeError"] = score_outcome.error
    warnings = annotation_warnings(extender, pod_raw)
    if warnings:
        result["annotationWarnings"] = warnings
    result["summary"] = summary
    if keep is not None:
        result = trim(result, len(diag.names))
    return result


def node_verdicts(diag: Diagnosis, score_outcome: Any, feasible: NodeSet, keep: set[str] | None) -> dict[str, Any]:
    """Every plugin's verdict and score per node (of `keep` only, when given)."""
    detail, plugin_names = diag.detail, diag.plugin_names
    position = {n.name: i for i, n in enumerate(feasible.nodes)}
    restricted_all = detail.per_plugin.get("PreFilterResult", {})
    nodes: dict[str, Any] = {}
    for node in diag.cands.nodes:
        if keep is not None and node.name not in keep:
            continue
        plugins: dict[str, Any] = {}
        for name in plugin_names:
            status = detail.per_plugin.get(name, {}).get(node.name)
            score = None
            values = score_outcome.scores.get(name)
            if values is not None and node.name in position:
                score = int(values[position[node.name]])
            plugins[name] = status_dict(status, score)
        restricted = restricted_all.get(node.name)
        if restricted is not None:
            for name in plugin_names:
                if f"[{name}]" in restricted.message() or f" {name}" in restricted.message():
                    plugins[name] = status_dict(restricted, None)
        nodes[node.name] = {"plugins": plugins}
    for name in diag.cands.unknown:
        if keep is None or name in keep:
            nodes[name] = {"plugins": {CLUSTER_STATE: status_dict(diag.wire.statuses[name], None)}}
    return nodes


def annotation_warnings(extender: Extender, pod_raw: dict[str, Any]) -> list[str]:
    """What the admission webhook would warn about (valid but surprising annotations, and
    the slow-expression rule with this configuration's request deadline: the same text
    the webhook and `extender validate` give)."""
    meta = pod_raw.get("metadata") or {}
    spec = pod_raw.get("spec") or {}
    tolerations = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
    with admission(SlowExpressionPolicy(extender.config.request_deadline, deny=False)):
        check = check_pod(meta.get("annotations") or {}, tolerations,
                          extender.config.annotation_prefix, extender.config.feature_gates)
    return list(check.warnings)


def explain(extender: Extender, pods: list[dict[str, Any]], candidates: list[str] | None) -> dict[str, Any]:
    return {"results": [explain_pod(extender, p, candidates) for p in pods]}


# --- the summary: nodes grouped by reason ----------------------------------------------


def _clip(text: str) -> str:
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def scheduler_message(feasible: int, total: int, histogram: dict[str, int]) -> str:
    """kube-scheduler's FitError text for these failures: `0/N nodes are available:`
    then `count reason` sorted as strings (Go's sort.Strings), `, `-joined. With
    feasible nodes the scheduler says nothing; we say `F/N` in the same form."""
    text = f"{feasible}/{total} nodes are available"
    if histogram:
        text += ": " + ", ".join(sorted(f"{n} {reason}" for reason, n in histogram.items())) + "."
    return text


def summarize(diag: Diagnosis, prioritize: list[dict[str, Any]], examples: int = EXAMPLES) -> dict[str, Any]:
    """Failing nodes grouped by wire reason (what kube-scheduler's event counts), then by
    the deciding plugin's detail, with counts and `examples` node names per group; the
    best-scored feasible nodes; the scheduler-style message. Bounded: at most
    MAX_GROUPS detail groups per reason, `examples` names per group."""
    examples = max(0, min(examples, MAX_EXAMPLES))
    names = diag.names
    summary: dict[str, Any] = {"candidates": len(names), "feasible": len(diag.wire.feasible_names)}
    if diag.wire.error:
        summary["error"] = diag.wire.error
        return summary
    statuses = diag.wire.statuses
    reasons: dict[str, dict[str, Any]] = {}
    for name in names:
        status = statuses.get(name)
        if status is None:
            continue
        reason = status.msg
        plugin, detailed = diag.deciding(name)
        if detailed is None:
            detailed = status
        entry = reasons.get(reason)
        if entry is None:
            entry = reasons[reason] = {"reason": reason, "plugin": plugin, "code": str(status.code),
                                       "nodes": 0, "_groups": {}}
        entry["nodes"] += 1
        details = tuple(detailed.details) if detailed.msg == reason else (*detailed.reasons, *detailed.details)
        group = entry["_groups"].get(details)
        if group is None:
            group = entry["_groups"][details] = {"details": [_clip(d) for d in details], "nodes": 0, "examples": []}
        group["nodes"] += 1
        if len(group["examples"]) < examples:
            group["examples"].append(name)
    histogram = {reason: entry["nodes"] for reason, entry in reasons.items()}
    summary["message"] = scheduler_message(summary["feasible"], len(names), histogram)
    out = []
    for entry in sorted(reasons.values(), key=lambda e: -e["nodes"]):
        groups = sorted(entry.pop("_groups").values(), key=lambda g: -g["nodes"])
        entry["groups"] = groups[:MAX_GROUPS]
        if len(groups) > MAX_GROUPS:
            entry["moreGroups"] = {"groups": len(groups) - MAX_GROUPS,
                                   "nodes": sum(g["nodes"] for g in groups[MAX_GROUPS:])}
        out.append(entry)
    summary["reasons"] = out
    best = sorted(range(len(prioritize)), key=lambda i: -prioritize[i]["Score"])[:examples]
    summary["top"] = [{"node": prioritize[i]["Host"], "score": prioritize[i]["Score"]} for i in best]
    if not prioritize and diag.wire.feasible_names:  # scoring failed: still name some
        summary["top"] = [{"node": n, "score": None} for n in diag.wire.feasible_names[:examples]]
    return summary


def example_nodes(summary: dict[str, Any]) -> set[str]:
    names = {t["node"] for t in summary.get("top", ())}
    for entry in summary.get("reasons", ()):
        for group in entry["groups"]:
            names.update(group["examples"])
    return names


def trim(result: dict[str, Any], total: int | None = None) -> dict[str, Any]:
    """The result with `filter`, `prioritize` and `nodes` cut down to the summary's
    example nodes (same shape, every value true), and `omittedNodes` saying how many
    of the `total` nodes (default: those in `nodes`) were left out: the endpoint's
    default view."""
    keep = example_nodes(result["summary"])
    wire = result["filter"]
    cut = {**result}
    cut["filter"] = {
        **wire,
        "NodeNames": None if wire["NodeNames"] is None else [n for n in wire["NodeNames"] if n in keep],
        "FailedNodes": {n: r for n, r in (wire["FailedNodes"] or {}).items() if n in keep},
        "FailedAndUnresolvableNodes": {n: r for n, r in (wire["FailedAndUnresolvableNodes"] or {}).items()
                                       if n in keep},
    }
    cut["prioritize"] = [h for h in result["prioritize"] if h["Host"] in keep]
    cut["nodes"] = {n: v for n, v in result["nodes"].items() if n in keep}
    cut["omittedNodes"] = (len(result["nodes"]) if total is None else total) - len(cut["nodes"])
    return cut


def static_extender(config, snapshot: ClusterSnapshot) -> Extender:
    return Extender(config, StaticSource(snapshot))
