"""The text views of an explanation report, for `kubectl extender` and `extender explain
--output table` alike (the server's distribution depends on this one): standard library
only, so that the plugin installs on its own. The report is the JSON of `GET /explain` /
`POST /explain` and of `extender explain` (docs/reference/endpoints.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

SUCCESS = "Success"  # a plugin's code in the report when it passed (framework.Code.SUCCESS)

# Toleration lines that only say a toleration is about another taint: true, and noise
# next to the line that says why the matching toleration did not tolerate. The server's
# events and drift reports filter with extender.matching.tolerations.key_details: the same filter,
# written in both since neither distribution imports the other's code at run time
# (tests/core/test_explain_summary.py keeps them equal).
_UNRELATED = re.compile(r"^\S+\[\d+\] .*: (key does not match|effect \S+ does not match \S+)$")


def key_details(details: Sequence[str]) -> list[str]:
    """The detail lines worth a first look (tables, events): unrelated-toleration lines
    dropped, unless nothing else is left to say."""
    kept = [d for d in details if not _UNRELATED.match(d)]
    return kept or list(details)


def render_summary(report: dict[str, Any]) -> str:
    """The live view's table (`kubectl extender why`): per pod, the state, the
    scheduler-style line, then one row per reason and one per detail group."""
    lines: list[str] = []
    state = report.get("state")
    for result in report["results"]:
        summary = result["summary"]
        lines.append(f"POD       {result['pod']}")
        if state:
            lines.append(f"STATE     {describe_state(state)}")
        lines += [f"WARNING   {w}" for w in result.get("annotationWarnings", ())]
        if "error" in summary:
            lines += [f"ERROR     {summary['error']}", ""]
            continue
        lines.append(f"RESULT    {summary['message']}")
        if summary.get("top"):
            top = ", ".join(t["node"] if t["score"] is None else f"{t['node']} ({t['score']})" for t in summary["top"])
            lines.append(f"FEASIBLE  {summary['feasible']}, best scored: {top}")
        if summary.get("reasons"):
            rows = [("NODES", "PLUGIN", "REASON")]
            for entry in summary["reasons"]:
                rows.append((str(entry["nodes"]), entry["plugin"], entry["reason"]))
                for group in entry["groups"]:
                    lines_of_group = key_details(group["details"])
                    if group["examples"]:
                        more = group["nodes"] - len(group["examples"])
                        lines_of_group.append("e.g. " + ", ".join(group["examples"]) + (f" (+{more} more)" if more else ""))
                    lines_of_group = lines_of_group or [""]
                    rows.append((f"  {group['nodes']}", "", lines_of_group[0]))
                    rows += [("", "", d) for d in lines_of_group[1:]]
                if "moreGroups" in entry:
                    more = entry["moreGroups"]
                    rows.append((f"  {more['nodes']}", "", f"... {more['groups']} more distinct details"))
            lines.append("")
            lines += _columns(rows)
        lines.append("")
    return "\n".join(lines)


def describe_state(state: dict[str, Any]) -> str:
    parts = [state.get("mode", "?")]
    if state.get("resourceVersion"):
        parts.append(f"resourceVersion {state['resourceVersion']}")
    if state.get("ageSeconds") is not None:
        parts.append(f"age {state['ageSeconds']:.1f}s")
    counts = state.get("objects") or {}
    if counts:
        parts.append(f"{counts.get('nodes', 0)} nodes, {counts.get('pods', 0)} pods")
    return ", ".join(parts)


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [("   ".join(r[i].ljust(widths[i]) for i in range(len(widths))) + "   " + r[-1]).rstrip() for r in rows]


def render_table(report: dict[str, Any]) -> str:
    """kubectl-style table: one row per node with verdict, reason and score."""
    lines: list[str] = []
    for result in report["results"]:
        scores = {h["Host"]: h["Score"] for h in result["prioritize"]}
        failed = {**(result["filter"]["FailedNodes"] or {}), **(result["filter"]["FailedAndUnresolvableNodes"] or {})}
        rows = [("NODE", "VERDICT", "SCORE", "REASON")]
        for node, info in result["nodes"].items():
            if node in failed:
                codes = [p["code"] for p in info["plugins"].values() if p["code"] != SUCCESS]
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


# --- YAML out, without a YAML library ------------------------------------------------------

# A string stays plain when YAML cannot read it as anything else: it starts with a letter,
# `_` or `/`, holds no `: ` or ` #`, no trailing blank, and is no YAML 1.1 keyword.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./()'=,+ -]*")
_KEYWORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n"}


def _scalar(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _KEYWORDS and not text.endswith(" "):
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def _nested(value: Any) -> bool:
    return isinstance(value, (dict, list)) and len(value) > 0


def _block(value: Any, indent: int) -> list[str]:
    pad, out = " " * indent, []
    if isinstance(value, dict):
        for key, item in value.items():
            if _nested(item):
                out.append(f"{pad}{_scalar(str(key))}:")
                out += _block(item, indent + 2)
            else:
                out.append(f"{pad}{_scalar(str(key))}: {_inline(item)}")
        return out
    for item in value:
        if _nested(item):
            inner = _block(item, indent + 2)
            out += [f"{pad}- {inner[0].lstrip()}", *inner[1:]]
        else:
            out.append(f"{pad}- {_inline(item)}")
    return out


def to_yaml(value: Any) -> str:
    """Block-style YAML of JSON data (`-o yaml`): what `yaml.safe_load` reads back equal."""
    return "\n".join(_block(value, 0) if _nested(value) else [_inline(value)]) + "\n"
