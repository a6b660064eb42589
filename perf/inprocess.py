"""Driver 1 (in-process) and 3 (scheduling simulation), plus the reference comparison.

In-process numbers isolate the engine from HTTP: `Extender.filter/prioritize` are
called with ready-made `ExtenderArgs`, exactly what the server passes after decoding.
The wire codec (`decode_args` + `encode`) is timed separately on the same requests so
the HTTP overhead can be split into codec vs server (gunicorn + WSGI) time.

Each pod is asked as kube-scheduler asks with `nodeCacheCapable: true`: `filter` with
every node name, then `prioritize` with the names that passed (skipped, as upstream
skips it, when fewer than two nodes are feasible).
"""

from __future__ import annotations

import random
import time
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender import metrics
from extender.api.wire import ExtenderArgs, decode_args, encode
from extender.engine import Extender
from extender.model.parse import existing_pod_from_dict
from perf.engine import MutableSource, extend_snapshot, fork_snapshot
from perf.stats import summarize
from perf.workloads import workload_of
from testing.check import Checker
from testing.scores import best_hosts


@dataclass
class Answer:
    """One pod's answers and timings (seconds)."""

    pod: dict[str, Any]
    filter_s: float
    filter_result: dict[str, Any]
    prioritize_s: float | None = None
    prioritize_result: list[dict[str, Any]] | None = None


@dataclass
class Samples:
    filter: list[float] = field(default_factory=list)
    prioritize: list[float] = field(default_factory=list)
    pair: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"filter": summarize(self.filter), "prioritize": summarize(self.prioritize),
                "pair": summarize(self.pair)}


def wire_body(pod: dict[str, Any], names: list[str]) -> bytes:
    """ExtenderArgs as kube-scheduler's json.Marshal writes it (compact, field order)."""
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})


def ask(ext: Extender, pod: dict[str, Any], names: list[str]) -> Answer:
    """filter with every name, then prioritize the feasible ones (if there is a choice).
    Timed as the server runs it, request bytes to response bytes, minus HTTP."""
    body = wire_body(pod, names)
    t0 = time.perf_counter()
    encoded = ext.filter(decode_args(body))
    t1 = time.perf_counter()
    fres = orjson.loads(encoded)
    answer = Answer(pod, t1 - t0, fres)
    feasible = fres.get("NodeNames") or []
    if len(feasible) >= 2:
        body = wire_body(pod, feasible)
        t2 = time.perf_counter()
        encoded = ext.prioritize(decode_args(body))
        answer.prioritize_s = time.perf_counter() - t2
        answer.prioritize_result = orjson.loads(encoded)
    return answer


def collect(answers: Sequence[Answer]) -> Samples:
    s = Samples()
    for a in answers:
        s.filter.append(a.filter_s)
        if a.prioritize_s is not None:
            s.prioritize.append(a.prioritize_s)
        s.pair.append(a.filter_s + (a.prioritize_s or 0.0))
    return s


def plugin_totals() -> dict[tuple[str, str], list[float]]:
    """(plugin, extension point) -> [seconds, observations], from the prometheus
    histogram the framework already fills (so per-plugin timing costs us nothing)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for metric in metrics.PLUGIN_EXECUTION_DURATION.collect():
        for sample in metric.samples:
            key = (sample.labels.get("plugin", ""), sample.labels.get("extension_point", ""))
            if sample.name.endswith("_sum"):
                out[key][0] += sample.value
            elif sample.name.endswith("_count"):
                out[key][1] += sample.value
    return out


def plugin_delta(before: dict, after: dict) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key, (total, count) in after.items():
        b_total, b_count = before.get(key, (0.0, 0.0))
        n = count - b_count
        if n > 0:
            out[f"{key[0]}/{key[1]}"] = {"calls": int(n),
                                         "mean_us": round((total - b_total) / n * 1e6, 1)}
    return dict(sorted(out.items()))


def run_inprocess(ext: Extender, pods: Sequence[dict[str, Any]], names: list[str],
                  warmup: int = 3) -> tuple[list[Answer], dict[str, Any]]:
    """Time every pod; returns the answers and a summary with per-plugin means."""
    for pod in pods[:warmup]:
        ask(ext, pod, names)
    before = plugin_totals()
    answers = [ask(ext, pod, names) for pod in pods]
    after = plugin_totals()
    summary = collect(answers).summary()
    summary["plugins"] = plugin_delta(before, after)
    summary["feasible_mean"] = round(
        sum(len(a.filter_result.get("NodeNames") or []) for a in answers) / max(len(answers), 1), 1)
    return answers, summary


def codec_costs(answers: Sequence[Answer], names: list[str]) -> dict[str, Any]:
    """Server-side wire cost of the same requests: decode_args(body) and encode(result)."""
    dec_f, enc_f, dec_p, enc_p = [], [], [], []

    def timed(into: list[float], fn, arg) -> None:
        t0 = time.perf_counter()
        fn(arg)
        into.append(time.perf_counter() - t0)

    for a in answers:
        timed(dec_f, decode_args, orjson.dumps({"Pod": a.pod, "Nodes": None, "NodeNames": names}))
        timed(enc_f, encode, a.filter_result)
        if a.prioritize_result is not None:
            feasible = a.filter_result["NodeNames"]
            timed(dec_p, decode_args, orjson.dumps({"Pod": a.pod, "Nodes": None, "NodeNames": feasible}))
            timed(enc_p, encode, a.prioritize_result)
    return {"filter_decode": summarize(dec_f), "filter_encode": summarize(enc_f),
            "prioritize_decode": summarize(dec_p), "prioritize_encode": summarize(enc_p)}


def compare_reference(fast: Sequence[Answer], ref_ext: Extender, names: list[str],
                      max_mismatches: int = 10) -> tuple[list[Answer], dict[str, Any]]:
    """Answer the same pods with the reference path; count and describe differences.

    The reference is asked exactly what the fast path was asked (including the same
    prioritize candidate list), and the two answers are compared as kube-scheduler reads
    them (`as_scheduler_reads`), so any difference is a real divergence."""
    ref_answers: list[Answer] = []
    mismatches: list[dict[str, Any]] = []
    count = 0
    for a in fast:
        t0 = time.perf_counter()
        fres = orjson.loads(ref_ext.filter(ExtenderArgs(a.pod, None, names)))
        r = Answer(a.pod, time.perf_counter() - t0, fres)
        candidates = a.filter_result.get("NodeNames") or []
        if a.prioritize_result is not None:
            t0 = time.perf_counter()
            r.prioritize_result = orjson.loads(ref_ext.prioritize(ExtenderArgs(a.pod, None, candidates)))
            r.prioritize_s = time.perf_counter() - t0
        ref_answers.append(r)
        for verb, mine, theirs in (("filter", a.filter_result, r.filter_result),
                                   ("prioritize", a.prioritize_result, r.prioritize_result)):
            mine, theirs = as_scheduler_reads(verb, mine, candidates), as_scheduler_reads(verb, theirs, candidates)
            if mine != theirs:
                count += 1
                if len(mismatches) < max_mismatches:
                    mismatches.append({"pod": a.pod["metadata"]["name"], "verb": verb,
                                       "diff": describe_diff(mine, theirs)})
    return ref_answers, {"compared": len(fast), "mismatches": count, "examples": mismatches}


FAILURE_MAPS = ("FailedNodes", "FailedAndUnresolvableNodes")


def as_scheduler_reads(verb: str, answer: Any, candidates: list[str]) -> Any:
    """What kube-scheduler takes from an answer (docs/reference/semantics.md, "Slim
    answers"), so that a slim answer and a full one, or two listing the same hosts in
    another order, compare equal, and nothing it reads can differ unseen.

    filter: the whole answer, but the failure maps only when no node fits (a slim
    answer leaves them out once one does, and kube-scheduler reads them only then).
    prioritize (`candidates`: the NodeNames it was asked about): each candidate's
    extender score, listed entries of a host added up as `prioritizeNodes` adds them and
    an unlisted host 0, minus the lowest of them (a uniform shift changes no total's
    order or difference); apart, the entries it would add to no candidate's total (a
    host not asked about, a score that is not an integer: wrong all the same)."""
    if verb == "filter" and isinstance(answer, dict) and answer.get("NodeNames"):
        return {key: value for key, value in answer.items() if key not in FAILURE_MAPS}
    if verb != "prioritize" or not isinstance(answer, list):
        return answer
    asked = dict.fromkeys(candidates, 0)
    stray = []
    for entry in answer:
        host, score = (entry.get("Host"), entry.get("Score")) if isinstance(entry, dict) else (None, None)
        if host in asked and type(score) is int:
            asked[host] += score
        else:
            stray.append(entry)
    low = min(asked.values(), default=0)
    return {"scores": {host: score - low for host, score in asked.items()}, "stray": stray}


def describe_diff(fast: Any, ref: Any) -> str:
    """A short, human diff of two filter or prioritize answers (prioritize: as
    `as_scheduler_reads` gives them, the differing hosts' shifted scores)."""
    if isinstance(fast, dict) and isinstance(ref, dict) and set(fast) == set(ref) == {"scores", "stray"}:
        hosts = [h for h, score in fast["scores"].items() if score != ref["scores"].get(h)]
        parts = [f"{len(hosts)} hosts score differently (fast vs reference, shifted): "
                 + ", ".join(f"{h}: {fast['scores'][h]} vs {ref['scores'].get(h)}" for h in hosts[:3])]
        if fast["stray"] != ref["stray"]:
            parts.append(f"entries for no candidate: {str(fast['stray'])[:120]} vs {str(ref['stray'])[:120]}")
        return "; ".join(parts)[:600]
    if isinstance(fast, dict) and isinstance(ref, dict):
        parts = []
        for key in sorted(set(fast) | set(ref)):
            f, r = fast.get(key), ref.get(key)
            if f == r:
                continue
            if isinstance(f, dict) and isinstance(r, dict):
                only_f = sorted(set(f) - set(r))[:3]
                only_r = sorted(set(r) - set(f))[:3]
                diff_v = [k for k in set(f) & set(r) if f[k] != r[k]][:2]
                parts.append(f"{key}: fast-only {only_f}, ref-only {only_r}, "
                             + ", ".join(f"{k}: {f[k]!r} vs {r[k]!r}" for k in diff_v))
            elif isinstance(f, list) and isinstance(r, list):
                parts.append(f"{key}: {len(f)} vs {len(r)} entries; fast-only "
                             f"{sorted(set(f) - set(r))[:3]}, ref-only {sorted(set(r) - set(f))[:3]}")
            else:
                parts.append(f"{key}: {str(f)[:80]!r} vs {str(r)[:80]!r}")
        return "; ".join(parts)[:600]
    if isinstance(fast, list) and isinstance(ref, list):
        diffs = [(x, y) for x, y in zip(fast, ref, strict=False) if x != y][:3]
        return f"{len(fast)} vs {len(ref)} hosts; first differences {diffs}"[:600]
    return f"{str(fast)[:200]} vs {str(ref)[:200]}"


def speedup(fast: Samples, ref: Samples) -> dict[str, Any]:
    """Ratio of medians (reference / fast) over the same requests."""
    out: dict[str, Any] = {}
    for verb in ("filter", "prioritize", "pair"):
        f, r = summarize(getattr(fast, verb)), summarize(getattr(ref, verb))
        if f.get("n") and r.get("n") and f["p50_ms"] > 0:
            out[verb] = {"fast_p50_ms": f["p50_ms"], "ref_p50_ms": r["p50_ms"],
                         "speedup": round(r["p50_ms"] / f["p50_ms"], 1)}
    return out


# --- driver 3: the scheduling simulation ----------------------------------------------


def simulate(make_extender, snapshot, node_dicts: list[dict[str, Any]],
             existing_pod_dicts: list[dict[str, Any]], pods: Sequence[dict[str, Any]],
             oracles: dict, seed: int = 1, annotation_prefix: str = "scheduling-extender.io",
             ) -> dict[str, Any]:
    """filter -> prioritize -> bind to the best node -> add to state, pod after pod.

    `make_extender(source)` builds the engine over a swappable source. Ties between
    best scores are broken with a seeded RNG, as kube-scheduler breaks them randomly.
    The placements are then replayed through the independent `Checker`."""
    rng = random.Random(seed)
    source = MutableSource(fork_snapshot(snapshot))
    ext = make_extender(source)
    names = [n.name for n in snapshot.nodes.nodes]
    placements: list[tuple[dict[str, Any], str]] = []
    unschedulable: dict[str, int] = defaultdict(int)
    t_filter = t_prio = t_bind = 0.0
    started = time.perf_counter()
    for pod in pods:
        t0 = time.perf_counter()
        fres = orjson.loads(ext.filter(ExtenderArgs(pod, None, names)))
        t1 = time.perf_counter()
        t_filter += t1 - t0
        feasible = fres.get("NodeNames") or []
        if fres.get("Error") or not feasible:
            unschedulable[workload_of(pod)] += 1
            continue
        if len(feasible) == 1:
            chosen = feasible[0]
        else:
            scores = orjson.loads(ext.prioritize(ExtenderArgs(pod, None, feasible)))
            t2 = time.perf_counter()
            t_prio += t2 - t1
            chosen = rng.choice(best_hosts(feasible, scores))
        t3 = time.perf_counter()
        bound = {**pod, "spec": {**pod["spec"], "nodeName": chosen}, "status": {"phase": "Running"}}
        source.set(extend_snapshot(source.snapshot(), existing_pod_from_dict(bound)))
        t_bind += time.perf_counter() - t3
        placements.append((pod, chosen))
    elapsed = time.perf_counter() - started
    t0 = time.perf_counter()
    checker = Checker(node_dicts, existing_pod_dicts, oracles, annotation_prefix)
    violations = checker.replay(placements)
    check_s = time.perf_counter() - t0
    by_rule: dict[str, int] = defaultdict(int)
    for v in violations:
        by_rule[v.rule] += 1
    n = len(pods)
    return {
        "pods": n,
        "bound": len(placements),
        "unschedulable": dict(unschedulable),
        "elapsed_s": round(elapsed, 3),
        "pods_per_s": round(n / elapsed, 1) if elapsed > 0 else None,
        "mean_ms": {"filter": round(t_filter / max(n, 1) * 1000, 3),
                    "prioritize": round(t_prio / max(n, 1) * 1000, 3),
                    "bind": round(t_bind / max(n, 1) * 1000, 3)},
        "violations": len(violations),
        "violations_by_rule": dict(by_rule),
        "violation_examples": [v.as_dict() for v in violations[:10]],
        "check_s": round(check_s, 3),
        # identical digests = identical placements (compares runs)
        "placements_digest": f"{zlib.crc32(orjson.dumps([(p['metadata']['name'], n) for p, n in placements])):08x}",
    }
