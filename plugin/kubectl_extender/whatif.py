"""`kubectl extender what-if` (and `extender whatif`): changes written as kubectl writes
them, turned into a what-if request, and the answer as tables.

    --taint NODE[,NODE...]|-l SELECTOR KEY=VALUE:EFFECT | KEY:EFFECT- | KEY-
    --label NODE[,NODE...]|-l SELECTOR KEY=VALUE | KEY-
    --cordon NODE[,NODE...]|-l SELECTOR        --uncordon ...        --remove-node ...
    --annotate-volume PV KEY=VALUE | KEY-

Repeat them; they apply in the order given. Nodes are selected by the extender from its
state before any change (`-l` as `kubectl taint -l` reads it). The standard library only.
"""

from __future__ import annotations

from typing import Any

NODE_FLAGS = {"--taint": "taint", "--label": "label", "--cordon": "cordon", "--uncordon": "uncordon",
              "--remove-node": "remove"}
SPEC_FLAGS = ("--taint", "--label")
SELECTOR_FLAGS = ("-l", "--selector")
USAGE = """changes (repeatable, applied in order; nodes by name, comma-separated, or -l SELECTOR):
  --taint NODE|-l SELECTOR KEY=VALUE:EFFECT   set a taint (a new value for the same key and effect)
  --taint NODE|-l SELECTOR KEY:EFFECT- | KEY-  remove a taint (every effect with KEY-)
  --label NODE|-l SELECTOR KEY=VALUE | KEY-    set or remove a label
  --cordon NODE|-l SELECTOR, --uncordon ..., --remove-node ...
  --annotate-volume PV KEY=VALUE | KEY-        set or remove a PersistentVolume's annotation"""


class FlagError(ValueError):
    pass


def add_change_flags(parser: Any) -> None:
    """The change flags in an argparse parser's help (`split_changes` takes them out of
    the command line before the parser sees it: `-l` inside them is not the parser's)."""
    group = parser.add_argument_group("changes (repeatable, applied in order)")
    for flag, metavar in (("--taint", ("NODE|-l SELECTOR", "KEY=VALUE:EFFECT[-]")),
                          ("--label", ("NODE|-l SELECTOR", "KEY=VALUE|KEY-")),
                          ("--cordon", "NODE|-l SELECTOR"), ("--uncordon", "NODE|-l SELECTOR"),
                          ("--remove-node", "NODE|-l SELECTOR"), ("--annotate-volume", ("PV", "KEY=VALUE|KEY-"))):
        group.add_argument(flag, metavar=metavar, nargs=len(metavar) if isinstance(metavar, tuple) else None,
                           action="append", help="see below")


def split_changes(args: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the what-if changes the change flags make, the other arguments)."""
    changes: list[dict[str, Any]] = []
    rest: list[str] = []
    i = 0

    def take(what: str) -> str:
        nonlocal i
        if i >= len(args) or (args[i].startswith("--") and args[i] != "-"):
            raise FlagError(f"{flag}: expected {what}")
        i += 1
        return args[i - 1]

    while i < len(args):
        flag = args[i]
        i += 1
        if flag == "--annotate-volume":
            volume = take("a PersistentVolume's name")
            changes.append({"volume": volume, "annotation": take("KEY=VALUE or KEY-")})
        elif flag in NODE_FLAGS:
            if i < len(args) and args[i] in SELECTOR_FLAGS:
                i += 1
                where: dict[str, Any] = {"selector": take("a label selector after -l")}
            else:
                where = {"nodes": [n for n in take("NODE[,NODE...] or -l SELECTOR").split(",") if n]}
            op = NODE_FLAGS[flag]
            if flag in SPEC_FLAGS:
                spec = take("KEY=VALUE:EFFECT or KEY-" if op == "taint" else "KEY=VALUE or KEY-")
                changes.append({**where, op: spec})
            elif op in ("cordon", "uncordon"):
                changes.append({**where, "cordon": op == "cordon"})
            else:
                changes.append({**where, "remove": True})
        else:
            rest.append(flag)
    return changes, rest


# --- the answer as text ----------------------------------------------------------------


def _table(head: tuple[str, ...], rows: list[tuple[list[str], list[str]]]) -> list[str]:
    """Columns padded to their widest cell, the last one free; detail lines under a row."""
    widths = [max(len(r[i]) for r in [list(head), *(cells for cells, _ in rows)]) for i in range(len(head) - 1)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        return ("   ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=True)) + "   " + cells[-1]).rstrip()

    indent = " " * (sum(widths) + 3 * len(widths))
    out = [line(head)]
    for cells, details in rows:
        out.append(line(cells))
        out += [indent + d for d in details]
    return out


def _labels(violations: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(v["plugin"], v["reason"], v["severity"]): v for v in violations}


def running_rows(pods: list[dict[str, Any]]) -> list[tuple[list[str], list[str]]]:
    rows = []
    for pod in pods:
        before, after = _labels(pod["before"]), _labels(pod["after"])
        for label in [*after, *(k for k in before if k not in after)]:
            plugin, reason, severity = label
            would = "violate" if label not in before else "stop violating" if label not in after else "still violate"
            shown = after.get(label) or before[label]
            rows.append(([pod["namespace"], pod["name"], pod["node"], severity, plugin, would, reason],
                         list(shown.get("details") or ())))
    return rows


def render_whatif(answer: dict[str, Any]) -> str:
    changes = "; ".join(f"{c['change']} on {c['selected']} "
                        + ("volume" if "volume" in c else "node(s)") for c in answer.get("changes", ()))
    out = [f"What if: {changes}", ""]
    running = answer.get("running") or {}
    rows = running_rows(running.get("pods") or [])
    if rows:
        out.append(f"Running pods ({running.get('evaluated', 0)} on the touched nodes and volumes):")
        out += _table(("NAMESPACE", "POD", "NODE", "SEVERITY", "PLUGIN", "WOULD", "REASON"), rows)
    else:
        out.append(f"No running pod would start or stop violating a requirement "
                   f"({running.get('evaluated', 0)} evaluated).")
    displaced = running.get("displaced") or []
    if displaced:
        out.append(f"Pods on removed nodes: {', '.join(p['namespace'] + '/' + p['name'] for p in displaced)}")
    pending = answer.get("pending") or {}
    out.append("")
    if pending.get("pods"):
        out.append(f"Pending pods whose feasible nodes change ({pending.get('evaluated', 0)} evaluated):")
        prows = []
        for p in pending["pods"]:
            reasons = p.get("reasons") or []
            first = f"{reasons[0]['nodes']} {reasons[0]['reason']}" if reasons else ""
            details = [f"{r['nodes']} {r['reason']}" for r in reasons[1:]]
            details += [d for r in reasons for g in r.get("groups", ())[:1] for d in g.get("details", ())]
            prows.append(([p["namespace"], p["name"], str(p["feasible"]["before"]), str(p["feasible"]["after"]),
                           str(p["lost"]), str(p["gained"]), first], details))
        out += _table(("NAMESPACE", "POD", "BEFORE", "AFTER", "LOST", "GAINED", "NODES LOST"), prows)
    else:
        out.append(f"No pending pod's feasible nodes change ({pending.get('evaluated', 0)} evaluated).")
    if pending.get("incomplete"):
        out.append(f"... {pending['incomplete']} pending pods not evaluated (time budget)")
    spread = answer.get("spread") or {}
    workloads = spread.get("workloads") or []
    if workloads:
        out.append("")
        out.append("Hard topology spread (skew = most minus fewest matching pods over the eligible domains):")
        srows = [([w["namespace"], w["example"], str(w["pods"]), c["topologyKey"], str(c["maxSkew"]),
                   f"{c['before']['skew']} -> {c['after']['skew']}",
                   f"{c['before']['domains']} -> {c['after']['domains']}"], [])
                 for w in workloads for c in w["constraints"]]
        out += _table(("NAMESPACE", "POD", "PODS", "TOPOLOGYKEY", "MAXSKEW", "SKEW", "DOMAINS"), srows)
    elif not spread.get("enabled"):
        out.append("(hard topology spread not evaluated: the extender runs without --drift-topology-spread)")
    for asked in answer.get("pods") or ():
        out.append("")
        out.append(f"Pod {asked['pod']}:")
        for when in ("before", "after"):
            summary = asked[when]
            text = summary.get("message") or summary.get("error") or ""
            top = ", ".join(t["node"] for t in summary.get("top") or ())
            out.append(f"  {when:6}  {text}" + (f" best: {top}" if top else ""))
    return "\n".join(out) + "\n"
