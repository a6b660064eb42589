"""`extender explain`: why is my pod pending? The same framework run as `/filter` and
`/prioritize`, rendered with every plugin's verdict and score per node.

The JSON shape is a public contract (and our black-box test interface):
{"results": [{"pod", "filter", "prioritize", "nodes": {node: {"plugins": {plugin:
{"code", "reasons", "score"}}}}}]}
"""

from __future__ import annotations

from typing import Any

from extender.api.wire import filter_result
from extender.framework import Code
from extender.model import Pod
from extender.service import Extender, status_dict
from extender.state import ClusterSnapshot, NodeSet, StaticSource


def snapshot_without(snapshot: ClusterSnapshot, pod: Pod) -> ClusterSnapshot:
    """The cluster minus a pod with the explained pod's namespace/name (if any)."""
    pods = [p for p in snapshot.pods if not (p.namespace == pod.namespace and p.name == pod.name)]
    if len(pods) == len(snapshot.pods):
        return snapshot
    return ClusterSnapshot(snapshot.nodes.nodes, pods, snapshot.workloads, snapshot.generation,
                           volumes=snapshot.volume_layer)


def explain_pod(extender: Extender, pod_raw: dict[str, Any], candidates: list[str] | None) -> dict[str, Any]:
    pod = extender.parse_pod(pod_raw)
    snapshot = snapshot_without(extender.source.snapshot(), pod)
    names = candidates if candidates is not None else [n.name for n in snapshot.nodes.nodes]
    cands = extender.resolve(snapshot, names, None)

    wire_state = extender.new_state(snapshot)
    wire = extender.run_filter(wire_state, pod, cands)
    filter_json = (
        filter_result(None, None, {}, wire.error)
        if wire.error
        else filter_result(wire.feasible_names, None, wire.failures)
    )

    detail = extender.run_filter(extender.new_state(snapshot, explain=True), pod, cands, run_all=True)
    feasible = NodeSet([snapshot.nodes.by_name[n] for n in wire.feasible_names], snapshot.nodes)
    score_outcome, totals = extender.run_score(extender.new_state(snapshot), pod, feasible)
    prioritize = [{"Host": n.name, "Score": s} for n, s in zip(feasible.nodes, totals.tolist(), strict=False)]

    position = {n.name: i for i, n in enumerate(feasible.nodes)}
    plugin_names = extender.framework.plugin_names()
    nodes: dict[str, Any] = {}
    for node in cands.nodes:
        plugins: dict[str, Any] = {}
        for name in plugin_names:
            status = detail.per_plugin.get(name, {}).get(node.name)
            score = None
            values = score_outcome.scores.get(name)
            if values is not None and node.name in position:
                score = int(values[position[node.name]])
            plugins[name] = status_dict(status, score)
        restricted = detail.per_plugin.get("PreFilterResult", {}).get(node.name)
        if restricted is not None:
            for name in plugin_names:
                if f"[{name}]" in restricted.message() or f" {name}" in restricted.message():
                    plugins[name] = status_dict(restricted, None)
        nodes[node.name] = {"plugins": plugins}
    for name in cands.unknown:
        nodes[name] = {"plugins": {"ClusterState": status_dict(wire.statuses[name], None)}}
    result = {"pod": pod.key, "filter": filter_json, "prioritize": prioritize, "nodes": nodes}
    if score_outcome.error:
        result["prioritizeError"] = score_outcome.error
    warnings = annotation_warnings(extender, pod_raw)
    if warnings:
        result["annotationWarnings"] = warnings
    return result


def annotation_warnings(extender: Extender, pod_raw: dict[str, Any]) -> list[str]:
    """What the admission webhook would warn about (valid but surprising annotations)."""
    from extender.validation import check_pod

    meta = pod_raw.get("metadata") or {}
    spec = pod_raw.get("spec") or {}
    tolerations = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
    check = check_pod(meta.get("annotations") or {}, tolerations, extender.config.annotation_prefix,
                      extender.config.feature_gates)
    return list(check.warnings)


def explain(extender: Extender, pods: list[dict[str, Any]], candidates: list[str] | None) -> dict[str, Any]:
    return {"results": [explain_pod(extender, p, candidates) for p in pods]}


def render_table(report: dict[str, Any]) -> str:
    """kubectl-style table: one row per node with verdict, reason and score."""
    lines: list[str] = []
    for result in report["results"]:
        scores = {h["Host"]: h["Score"] for h in result["prioritize"]}
        failed = {**(result["filter"]["FailedNodes"] or {}), **(result["filter"]["FailedAndUnresolvableNodes"] or {})}
        rows = [("NODE", "VERDICT", "SCORE", "REASON")]
        for node, info in result["nodes"].items():
            if node in failed:
                codes = [p["code"] for p in info["plugins"].values() if p["code"] != str(Code.SUCCESS)]
                verdict = "Unschedulable" if codes and all(c == "Unschedulable" for c in codes) else "Unresolvable"
                rows.append((node, verdict, "-", failed[node]))
            else:
                rows.append((node, "Feasible", str(scores.get(node, "-")), ""))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines.append(f"POD {result['pod']}")
        lines += [f"WARNING {w}" for w in result.get("annotationWarnings", ())]
        for r in rows:
            lines.append(("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3]).rstrip())
        lines.append("")
    return "\n".join(lines)


def static_extender(config, snapshot: ClusterSnapshot) -> Extender:
    return Extender(config, StaticSource(snapshot))
