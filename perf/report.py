"""The report: `report.json`, PNG plots and a Markdown summary (for the README).

Raw latency samples travel under `_samples` keys during the run (the plots need them)
and are stripped before the JSON is written, which keeps the report small and
diffable between runs.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
from pathlib import Path
from typing import Any

import orjson

REQUIRED_KEYS = ("meta", "mode", "sizes", "cel", "bar", "notes")
SIZE_KEYS = ("nodes", "pods", "inprocess", "reference", "http", "simulation")

BAR = {
    "pair_p50_ms": 2.5,
    "pair_p99_ms": 10.0,
    "speedup": 10.0,
    "rss_mb": 500.0,
    "cold_start_s": 3.0,
}


def machine() -> dict[str, Any]:
    """Where the numbers came from (the README must quote it with them)."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        mem_gb = round(psutil.virtual_memory().total / 1e9, 1)
    except Exception:
        mem_gb = None
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gb": mem_gb,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def strip_samples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_samples(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [strip_samples(v) for v in value]
    return value


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def evaluate_bar(size: dict[str, Any]) -> dict[str, Any]:
    """Measured vs target at one size; `ok` is None where nothing was measured."""
    pair = _get(size, "http", "names_seq", "pair") or {}
    distinct = _get(size, "http", "names_seq_distinct", "pair") or {}
    first = _get(size, "http", "names_seq", "warmup_pair") or {}
    rss = _get(size, "http", "server", "rss_mb", "worker_mb")
    cold = _get(size, "http", "server", "cold_start_s")
    speed = _get(size, "reference", "speedup", "pair", "speedup")
    mism = _get(size, "reference", "mismatches")
    viol = _get(size, "simulation", "violations")

    def row(measured: Any, target: Any, ok: bool | None, unit: str = "") -> dict[str, Any]:
        return {"measured": measured, "target": target, "ok": ok, "unit": unit}

    def le(x: Any, t: float) -> bool | None:
        return None if x is None else x <= t

    return {
        "size": f"{size.get('nodes')} nodes / {size.get('pods')} pods",
        "pair_p50_ms": row(pair.get("p50_ms"), BAR["pair_p50_ms"], le(pair.get("p50_ms"), BAR["pair_p50_ms"]), "ms"),
        "pair_p99_ms": row(pair.get("p99_ms"), BAR["pair_p99_ms"], le(pair.get("p99_ms"), BAR["pair_p99_ms"]), "ms"),
        "distinct_p50_ms": row(distinct.get("p50_ms"), BAR["pair_p50_ms"],
                               le(distinct.get("p50_ms"), BAR["pair_p50_ms"]), "ms"),
        "distinct_p99_ms": row(distinct.get("p99_ms"), BAR["pair_p99_ms"],
                               le(distinct.get("p99_ms"), BAR["pair_p99_ms"]), "ms"),
        "first_p50_ms": row(first.get("p50_ms"), None, None, "ms"),
        "first_max_ms": row(first.get("max_ms"), None, None, "ms"),
        "speedup": row(speed, BAR["speedup"], None if speed is None else speed >= BAR["speedup"], "x"),
        "identical_answers": row(None if mism is None else mism == 0, True,
                                 None if mism is None else mism == 0),
        "rss_mb": row(rss, BAR["rss_mb"], le(rss, BAR["rss_mb"]), "MB"),
        "cold_start_s": row(cold, BAR["cold_start_s"], le(cold, BAR["cold_start_s"]), "s"),
        "sim_violations": row(viol, 0, None if viol is None else viol == 0),
    }


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _pp(stats: dict[str, Any] | None) -> str:
    if not stats or not stats.get("n"):
        return "-"
    return f"{stats['p50_ms']:.2f} / {stats['p99_ms']:.2f}"


def _cel_columns(cel: dict[str, Any]) -> list[str]:
    columns: list[str] = []
    for values in cel["expressions"].values():
        if isinstance(values, dict):
            columns.extend(k for k in values if k not in columns)
    return columns


def render_churn(churn: list[dict[str, Any]]) -> list[str]:
    """The churn table (perf/churn.py): the bar of issue 13."""
    if not churn:
        return []
    lines = ["**Under churn** (the bar): `extender serve --kubeconfig` fed by the API-server double, "
             "mixed workload, HTTP `NodeNames`, a bind between every two pods (visible before the "
             "next filter), a node relabel per 100 pods; latencies in ms, p50 / p99. The last row of "
             "a size: the same with no two pods alike (labels, selectors, thresholds and CEL expressions of "
             "their own, `perf.workloads.no_two_alike`).", "",
             "| nodes / pods | answer reuse | filter | prioritize | pair | bar (pair) | met "
             "| initial sync s | worker RSS MB synced → after | 1-min load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for size in churn:
        bar = size.get("bar") or {}
        for label, r in (size.get("runs") or {}).items():
            target = (f"≤ {_fmt(bar.get('p50_ms'), 1)} / ≤ {_fmt(bar.get('p99_ms'), 0)}"
                      + (f", RSS ≤ {_fmt(bar.get('rss_mb'), 0)}" if bar.get("rss_mb") else "")
                      + (f", sync ≤ {_fmt(bar.get('initial_sync_s'), 0)} s" if bar.get("initial_sync_s") else "")
                      if bar and label == "off" else "-")
            met = "-" if not bar or label != "off" else ("yes" if bar.get("met") else "**NO**")
            lines.append(
                f"| {size['nodes']:,} / {size['pods']:,} | {label} | {_pp(r.get('filter'))} "
                f"| {_pp(r.get('prioritize'))} | {_pp(r.get('pair'))} | {target} | {met} "
                f"| {_fmt(r.get('initial_sync_s'), 1)} "
                f"| {_fmt(_get(r, 'rss_synced', 'worker_mb'), 0)} → {_fmt(_get(r, 'rss_after', 'worker_mb'), 0)} "
                f"| {_fmt(r.get('loadavg_after'), 1)} |")
    lines.append("")
    return lines


def render_scheduler_e2e(e2e: dict[str, Any] | None) -> list[str]:
    """The end-to-end table (perf/scheduler_e2e.py): pods/s through the real
    kube-scheduler with the extender, next to the same kube-scheduler running its
    in-tree plugins (the ratio is the headline) and to its own thresholds, and where
    the time, the CPU and the bytes go."""
    if not e2e:
        return []
    if e2e.get("error"):
        return [f"End to end through the real kube-scheduler: failed ({e2e['error'][:300]}).", ""]
    modes = e2e.get("modes") or {}
    base = (modes.get("in-tree") or {}).get("workloads") or {}
    ext = (modes.get("extender") or {}).get("workloads") or {}
    rounds = e2e.get("rounds", 1)
    lines = [f"**End to end through the real kube-scheduler ({e2e.get('kube_scheduler', 'v1.30.6')}), "
             f"{e2e['nodes']:,} nodes** ({e2e['cluster_pods']:,} pods running, {e2e['pods_per_workload']:,} "
             f"pods created pending per workload, timed from the first create to the last bind; {rounds} "
             "run(s) of each mode, alternated, pods/s the mean). extender: "
             "`extender serve` and kube-scheduler configured as shipped (manifests/base); in-tree: the same "
             "kube-scheduler and configuration without the extender, its four plugins enabled again, on "
             "the same pods, in the same run. Per pod (ms): algorithm = kube-scheduler's filter + score "
             "(extender calls included); extender calls = the algorithm minus the in-tree plugins (HTTP, "
             "JSON on both sides, our handler); handler = our server's own time for filter + prioritize; "
             "wait = in-flight wait inside filter; bind = our bind handler (its API call included, beside "
             "the next cycles); CPU = CPU ms per pod of kube-scheduler (in-tree / extender mode) and of "
             "`extender serve`; bytes = per pod, what kube-scheduler sent / what we answered, filter + "
             "prioritize.", "",
             "| workload | in-tree pods/s | extender pods/s | **ratio** (per round) | kube-scheduler threshold "
             "| algorithm in-tree / extender | extender calls | handler | wait | bind "
             "| CPU kube-scheduler in-tree / extender, extender | bytes sent / answered "
             "| problems / wrongly unschedulable (both modes) | 1-min load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ext or base:
        b, w = base.get(name) or {}, ext.get(name) or {}
        handler = w.get("extender_handler_mean_ms") or {}
        served = (handler.get("filter") or 0) + (handler.get("prioritize") or 0) if handler else None
        checks = (f"{sum(x.get('problems') or 0 for x in (b, w))} / "
                  f"{sum(x.get('wrongly_unschedulable') or 0 for x in (b, w))}")
        threshold = w.get("kube_scheduler_threshold_pods_per_s") or b.get("kube_scheduler_threshold_pods_per_s")
        per_round = ", ".join(_fmt(r.get(name)) for r in e2e.get("ratio_per_round") or [])
        cpu_b, cpu_w = b.get("cpu_ms_per_pod") or {}, w.get("cpu_ms_per_pod") or {}
        wire = w.get("wire_bytes_per_pod") or {}
        sent = sum(wire.get(f"{v} request") or 0 for v in ("filter", "prioritize"))
        answered = sum(wire.get(f"{v} answer") or 0 for v in ("filter", "prioritize"))
        lines.append(
            f"| {name} | {_fmt(b.get('pods_per_s'), 0)} | {_fmt(w.get('pods_per_s'), 0)} "
            f"| **{_fmt((e2e.get('ratio') or {}).get(name))}**{f' ({per_round})' if per_round else ''} "
            f"| {_fmt(threshold, 0)} "
            f"| {_fmt(b.get('algorithm_ms_per_pod'))} / {_fmt(w.get('algorithm_ms_per_pod'))} "
            f"| {_fmt(w.get('extender_calls_ms_per_pod'))} | {_fmt(served)} "
            f"| {_fmt(w.get('inflight_wait_ms_per_pod'))} | {_fmt(handler.get('bind'))} "
            f"| {_fmt(cpu_b.get('kube_scheduler'))} / {_fmt(cpu_w.get('kube_scheduler'))}, "
            f"{_fmt(cpu_w.get('extender'))} "
            f"| {f'{sent / 1024:.1f} / {answered / 1024:.1f} KB' if wire else '-'} "
            f"| {checks} | {_fmt(w.get('loadavg') or b.get('loadavg'), 1)} |")
    lines.append("")
    return lines + _render_ceiling(e2e, base)


def _render_ceiling(e2e: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """The `replay` mode's table, when it ran: kube-scheduler in extender mode with the
    extender's answers replayed at ~0 CPU, the most any extender could reach here."""
    ceiling = ((e2e.get("modes") or {}).get("replay") or {}).get("workloads") or {}
    if not ceiling:
        return []
    lines = ["**The ceiling** (`--modes ...,replay`, perf/replay.py): kube-scheduler configured as in "
             "extender mode, binding pods itself, the extender's filter and prioritize answers replayed "
             "from memory (the real answer for an earlier pod of the workload, refreshed every 50), so "
             "the extender's work costs ~0 CPU; placements not checked. Per pod (ms).", "",
             "| workload | in-tree pods/s | ceiling pods/s | **ceiling ratio** | algorithm in-tree / ceiling "
             "| extender calls | CPU kube-scheduler in-tree / ceiling, replay + extender |",
             "|---|---|---|---|---|---|---|"]
    for name, c in ceiling.items():
        b = base.get(name) or {}
        cpu_b, cpu_c = b.get("cpu_ms_per_pod") or {}, c.get("cpu_ms_per_pod") or {}
        front = (cpu_c.get("replay") or 0) + (cpu_c.get("extender") or 0)
        lines.append(
            f"| {name} | {_fmt(b.get('pods_per_s'), 0)} | {_fmt(c.get('pods_per_s'), 0)} "
            f"| **{_fmt((e2e.get('ratio_ceiling') or {}).get(name))}** "
            f"| {_fmt(b.get('algorithm_ms_per_pod'))} / {_fmt(c.get('algorithm_ms_per_pod'))} "
            f"| {_fmt(c.get('extender_calls_ms_per_pod'))} "
            f"| {_fmt(cpu_b.get('kube_scheduler'))} / {_fmt(cpu_c.get('kube_scheduler'))}, {_fmt(front)} |")
    return [*lines, ""]


def render_summary(report: dict[str, Any]) -> str:
    """Markdown tables for the README's performance section."""
    meta = report["meta"]
    lines = [f"### Extender performance ({report['mode']} run)", ""]
    lines.append(f"Machine: {meta.get('cpu')} ({meta.get('cpus')} CPUs, {meta.get('memory_gb')} GB), "
                 f"{meta.get('platform')}, Python {meta.get('python')}; {meta.get('date_utc')}. "
                 "One gunicorn worker (`ExtenderWorker`, 4 pool threads), loopback HTTP, keep-alive client.")
    lines.append("")
    lines += render_churn(report.get("churn") or [])
    lines += render_scheduler_e2e(report.get("scheduler_e2e"))
    if report.get("churn"):
        lines += ["The frozen-snapshot benchmark (no churn, the previous bar) follows.", ""]
    bar = report.get("bar") or {}
    if bar:
        lines += [f"**The bar** at {bar.get('size')} (mixed workload, HTTP with `NodeNames`):", "",
                  "| metric | target | measured | met |", "|---|---|---|---|"]
        labels = {"pair_p50_ms": "filter+prioritize p50", "pair_p99_ms": "filter+prioritize p99",
                  "distinct_p50_ms": "(for comparison) p50 when no two pods share a shape",
                  "distinct_p99_ms": "(for comparison) p99 when no two pods share a shape",
                  "first_p50_ms": "(for comparison) first pod of each shape on a fresh server, p50",
                  "first_max_ms": "(for comparison) first pod of each shape on a fresh server, max",
                  "speedup": "speed-up vs reference (in-process pair p50)",
                  "identical_answers": "same answers as the reference (as kube-scheduler reads them)", "rss_mb": "worker RSS",
                  "cold_start_s": "cold start (spawn to /readyz 200)",
                  "sim_violations": "simulation hard-constraint violations"}
        for key, label in labels.items():
            r = bar.get(key) or {}
            target = r.get("target")
            op = "" if target is None else "≤ " if key.endswith(("_ms", "rss_mb", "cold_start_s")) else (
                "≥ " if key == "speedup" else "")
            lines.append(f"| {label} | {op}{_fmt(target)} {r.get('unit', '') if target is not None else ''} | "
                         f"{_fmt(r.get('measured'))} {r.get('unit', '') if r.get('measured') is not None else ''} | "
                         f"{'-' if r.get('ok') is None else ('yes' if r['ok'] else '**NO**')} |")
        lines.append("")
    lines += [
        "Latencies in ms, p50 / p99. In-process = the engine computing every answer; HTTP = "
        "client round trip to the server as shipped (every answer computed); distinct shapes = the same pods, each with a unique label; no-op floor = the same gunicorn (ExtenderWorker) + orjson stack answering "
        "all-feasible (no engine).",
        "",
        "| nodes | pods | in-proc filter | in-proc prioritize | HTTP filter | HTTP prioritize "
        "| HTTP pair | HTTP pair, distinct shapes | HTTP pair c=4 (pairs/s) | full-Nodes pair "
        "| speed-up | identical | no-op floor pair | sim pods/s | violations | worker RSS MB "
        "| cold start s |",
        "|" + "---|" * 17,
    ]
    for s in report["sizes"]:
        ip = _get(s, "inprocess", "mixed") or {}
        http = s.get("http") or {}
        c4 = http.get("names_c4") or {}
        ref = s.get("reference") or {}
        sim = s.get("simulation") or {}
        srv = http.get("server") or {}
        lines.append(
            f"| {s['nodes']} | {s['pods']} | {_pp(ip.get('filter'))} | {_pp(ip.get('prioritize'))} "
            f"| {_pp(_get(http, 'names_seq', 'filter'))} | {_pp(_get(http, 'names_seq', 'prioritize'))} "
            f"| {_pp(_get(http, 'names_seq', 'pair'))} "
            f"| {_pp(_get(http, 'names_seq_distinct', 'pair'))} "
            f"| {_pp(c4.get('pair'))} ({_fmt(c4.get('pairs_per_s'), 0)}) "
            f"| {_pp(_get(http, 'nodes_seq', 'pair'))} "
            f"| {_fmt(_get(ref, 'speedup', 'pair', 'speedup'), 1)}x "
            f"| {_fmt(None if ref.get('mismatches') is None else ref['mismatches'] == 0)} "
            f"| {_pp(_get(http, 'noop_floor', 'pair'))} "
            f"| {_fmt(sim.get('pods_per_s'), 0)} | {_fmt(sim.get('violations'))} "
            f"| {_fmt(_get(srv, 'rss_mb', 'worker_mb'), 0)} | {_fmt(srv.get('cold_start_s'))} |")
    lines.append("")
    lines += ["Where HTTP time goes (sequential NodeNames, ms): client p50 vs the server's own "
              "handler time (mean of `extender_http_request_duration_seconds`: decode, engine, "
              "encode) vs in-process p50 (computing every answer) and the no-op stack's p50.", "",
              "| nodes | verb | HTTP p50 | handler mean | in-process p50 | no-op floor p50 |",
              "|---|---|---|---|---|---|"]
    for s in report["sizes"]:
        for verb in ("filter", "prioritize"):
            lines.append(
                f"| {s['nodes']} | {verb} "
                f"| {_fmt(_get(s, 'http', 'names_seq', verb, 'p50_ms'))} "
                f"| {_fmt(_get(s, 'http', 'names_seq', 'server_handler_mean_ms', verb))} "
                f"| {_fmt(_get(s, 'inprocess', 'mixed', verb, 'p50_ms'))} "
                f"| {_fmt(_get(s, 'http', 'noop_floor', verb, 'p50_ms'))} |")
    lines.append("")
    largest = report["sizes"][-1] if report["sizes"] else None
    workloads = _get(largest, "inprocess", "workloads") or {}
    if workloads:
        lines += [f"Per workload, in-process at {largest['nodes']} nodes (p50 / p99 ms; "
                  "speed-up = reference p50 / fast p50 for the pair):", "",
                  "| workload | filter | prioritize | feasible nodes | speed-up | identical |",
                  "|---|---|---|---|---|---|"]
        for name, w in workloads.items():
            lines.append(f"| {name} | {_pp(w.get('filter'))} | {_pp(w.get('prioritize'))} "
                         f"| {_fmt(w.get('feasible_mean'), 0)} "
                         f"| {_fmt(_get(w, 'speedup', 'pair', 'speedup'), 1)}x "
                         f"| {_fmt(None if w.get('mismatches') is None else w['mismatches'] == 0)} |")
        lines.append("")
    plugins = _get(largest, "inprocess", "mixed", "plugins") or {}
    if plugins:
        lines += [f"Per plugin and extension point (mixed, {largest['nodes']} nodes, mean µs per call; "
                  "calls = the 10% of requests whose plugin durations are sampled, as upstream):",
                  "", "| plugin / point | sampled calls | mean µs |", "|---|---|---|"]
        for key, v in plugins.items():
            lines.append(f"| {key} | {v['calls']} | {v['mean_us']} |")
        lines.append("")
    sp = _get(largest, "scheduler_perf") or {}
    if sp:
        lines += [f"scheduler_perf-like workloads at {largest['nodes']} nodes, simulated in process "
                  "(filter -> prioritize -> bind -> next pod, a new snapshot per bind; the engine "
                  "alone, no HTTP and no kube-scheduler), next to kube-scheduler's own thresholds "
                  "for its scheduler_perf workloads at 5,000 nodes:", "",
                  "| workload | what | extender pods/s | kube-scheduler threshold pods/s "
                  "| filter / prioritize / bind mean ms | violations |",
                  "|---|---|---|---|---|---|"]
        for name, w in sp.items():
            m = w.get("mean_ms") or {}
            lines.append(f"| {name} | {w.get('description')} | {_fmt(w.get('pods_per_s'), 0)} "
                         f"| {_fmt(w.get('kube_scheduler_threshold_pods_per_s'), 0)} "
                         f"| {_fmt(m.get('filter'))} / {_fmt(m.get('prioritize'))} / {_fmt(m.get('bind'))} "
                         f"| {_fmt(w.get('violations'))} |")
        lines.append("")
    cel = report.get("cel") or {}
    if isinstance(cel.get("expressions"), dict):
        lines += ["CEL costs per expression (from `perf/cel_bench.py`, µs):", "",
                  "| expression | " + " | ".join(_cel_columns(cel)) + " |",
                  "|---|" + "---|" * len(_cel_columns(cel))]
        for name, values in cel["expressions"].items():
            cells = [_fmt(values.get(c)) if isinstance(values, dict) else "-"
                     for c in _cel_columns(cel)]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    elif cel:
        lines += ["CEL costs: see `cel` in `perf/out/report.json`.", ""]
    if isinstance(cel.get("at_limit"), dict):
        lines += [f"CEL at the cost limit (cel-go: {_fmt(cel.get('cel_go_units_per_second'), 0)} "
                  "units/s, the KEP's 1,000,000 units ≈ 0.1 s):", "",
                  "| expression | estimate | units used | ms | units/s |", "|---|---|---|---|---|"]
        for name, row in cel["at_limit"].items():
            lines.append(f"| {name} | {_fmt(row.get('estimated_cost'), 0)} "
                         f"| {_fmt(row.get('units_used'), 0)} | {_fmt(row.get('ms_per_evaluation'))} "
                         f"| {_fmt(row.get('units_per_second'), 0)} |")
        lines.append("")
    for note in report.get("notes") or []:
        lines.append(f"- Note: {note}")
    return "\n".join(lines).rstrip() + "\n"


def plot(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """latency-vs-nodes.png and latency-cdf.png (matplotlib, Agg: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    sizes = report["sizes"]
    xs = [s["nodes"] for s in sizes]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, verb in zip(axes, ("filter", "prioritize", "pair"), strict=True):
        series = [
            ("HTTP NodeNames p50", ("http", "names_seq", verb, "p50_ms"), "-o"),
            ("HTTP NodeNames p99", ("http", "names_seq", verb, "p99_ms"), "--o"),
            ("HTTP full Nodes p50", ("http", "nodes_seq", verb, "p50_ms"), "-s"),
            ("no-op server p50 (floor)", ("http", "noop_floor", verb, "p50_ms"), "-.+"),
            ("in-process p50", ("inprocess", "mixed", verb, "p50_ms"), ":^"),
            ("reference p50", ("reference", "latency", verb, "p50_ms"), "-.x"),
        ]
        for label, path, style in series:
            ys = [_get(s, *path) for s in sizes]
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
        if verb == "pair":
            ax.axhline(BAR["pair_p50_ms"], color="grey", lw=0.8, ls=":", label="bar p50 2.5 ms")
            ax.axhline(BAR["pair_p99_ms"], color="red", lw=0.8, ls=":", label="bar p99 10 ms")
        ax.set_title(f"{verb} latency vs nodes")
        ax.set_xlabel("nodes")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    churn = report.get("churn") or []
    for label, style in (("off", "-"), ("on", "-.")):
        for q, marker in (("p50_ms", "D"), ("p99_ms", "v")):
            pts = [(c["nodes"], _get(c, "runs", label, "pair", q)) for c in churn]
            pts = [p for p in pts if p[1]]
            if pts:
                axes[2].plot([p[0] for p in pts], [p[1] for p in pts], style + marker,
                             label=f"churn, reuse {label}, {q[:3]}")
    for c in churn:
        bar = c.get("bar") or {}
        if bar:
            axes[2].plot([c["nodes"]] * 2, [bar["p50_ms"], bar["p99_ms"]], "k_", ms=14)
    axes[0].set_ylabel("ms (log)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    p = out_dir / "latency-vs-nodes.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    fig, ax = plt.subplots(figsize=(8, 5))
    for s in sizes:
        for key, label in (("names_seq", "HTTP NodeNames"), ("names_c4", "HTTP NodeNames c=4")):
            samples = _get(s, "http", key, "_samples", "pair")
            if samples:
                values = sorted(v * 1000 for v in samples)
                ys = [(i + 1) / len(values) for i in range(len(values))]
                ax.plot(values, ys, label=f"{s['nodes']} nodes, {label}")
        samples = _get(s, "inprocess", "mixed", "_samples", "pair")
        if samples:
            values = sorted(v * 1000 for v in samples)
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], ":",
                    label=f"{s['nodes']} nodes, in-process")
    ax.axvline(BAR["pair_p50_ms"], color="grey", lw=0.8, ls=":")
    ax.axvline(BAR["pair_p99_ms"], color="red", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("filter + prioritize latency, ms (log)")
    ax.set_ylabel("fraction of pods")
    ax.set_title("Latency CDF (filter + prioritize pair)")
    paths.append(_save(fig, ax, out_dir / "latency-cdf.png"))
    return paths


def _save(fig, ax, path: Path) -> Path:
    """Grid and legend on `ax`, then the figure written to `path` and closed."""
    import matplotlib.pyplot as plt

    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_churn(churn: list[dict[str, Any]], out_dir: Path) -> Path | None:
    """churn-latency-vs-nodes.png: the bar's own plot (perf/churn.py): filter+prioritize
    p50 and p99 under churn vs nodes, per reuse setting, with the bar at each size."""
    runs = [(c["nodes"], label, c["runs"][label]) for c in churn for label in ("off", "on")
            if label in (c.get("runs") or {})]
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, style in (("off", "-"), ("on", "--")):
        for q, marker in (("p50_ms", "o"), ("p99_ms", "v")):
            pts = sorted((nodes, _get(run, "pair", q)) for nodes, lab, run in runs if lab == label)
            pts = [p for p in pts if p[1]]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style + marker,
                        label=f"reuse {label}, pair {q[:3]}")
    for c in churn:
        bar = c.get("bar") or {}
        if bar:
            ax.plot([c["nodes"]] * 2, [bar["p50_ms"], bar["p99_ms"]], "k_", ms=16)
            ax.annotate(f"bar {bar['p50_ms']:g} / {bar['p99_ms']:g} ms", (c["nodes"], bar["p99_ms"]),
                        textcoords="offset points", xytext=(6, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("nodes (log)")
    ax.set_ylabel("filter + prioritize, ms (log)")
    ax.set_title("Under churn: a bind between every two pods (perf/churn.py)")
    return _save(fig, ax, out_dir / "churn-latency-vs-nodes.png")


def write_report(report: dict[str, Any], out_dir: Path, plots: bool = True) -> dict[str, Path]:
    """Write report.json, summary.md and (optionally) the plots, plus `-<mode>` copies of
    each (report-full.json, summary-quick.md, ...); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if plots and report.get("sizes"):
        for p in plot(report, out_dir):
            paths[p.stem] = p
    churn_plot = plot_churn(report.get("churn") or [], out_dir) if plots else None
    if churn_plot is not None:
        paths[churn_plot.stem] = churn_plot
    clean = strip_samples(report)
    clean["files"] = {k: str(v) for k, v in paths.items()}
    summary = render_summary(clean)
    paths["json"] = out_dir / "report.json"
    paths["json"].write_bytes(orjson.dumps(clean, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    paths["summary"] = out_dir / "summary.md"
    paths["summary"].write_text(summary)
    # Mode-suffixed copies, so a quick run does not overwrite the last full table.
    mode = str(report.get("mode") or "run")
    for key, path in list(paths.items()):
        copy = path.with_name(f"{path.stem}-{mode}{path.suffix}")
        shutil.copyfile(path, copy)
        paths[f"{key}-{mode}"] = copy
    return paths
