"""Correctness of the perf harness itself (never timing: numbers belong in the report).

The generator must be deterministic and produce clusters the extender loads with the
requested counts and features; the independent simulation checker must catch planted
violations (otherwise "0 violations" would mean nothing); the report writer must emit
the keys the README and the lead rely on.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import orjson
import pytest

import perf.__main__ as perf_entry
from extender.model.parse import existing_pod_from_dict
from extender.server.listener import Listener
from extender.state import ClusterSnapshot, StaticSource, load_objects
from extender.validation.pod import pod_from_dict
from perf import handlers
from perf import options as perf_options
from perf._noop_app import NoopApp
from perf.churn import WARMUP
from perf.engine import default_config, extend_snapshot, new_extender
from perf.generate import generate_cluster, node_objects, pod_objects, write_cluster
from perf.http_driver import Connection
from perf.inprocess import as_scheduler_reads, compare_reference, run_inprocess
from perf.report import REQUIRED_KEYS, SIZE_KEYS, evaluate_bar, render_summary, write_report
from perf.stats import percentile, stalls, summarize
from perf.workloads import CEL_ENV, CEL_ORACLES, WORKLOADS, mixed_pods, workload_of
from testing.check import Checker

# one pytest-xdist worker runs the module: the module's cluster file made once, not once per worker
pytestmark = pytest.mark.xdist_group("perf/test_perf_harness")

# --- generator -----------------------------------------------------------------------


def test_generator_is_deterministic_per_seed() -> None:
    a, _ = generate_cluster(80, 500, seed=7)
    b, _ = generate_cluster(80, 500, seed=7)
    c, _ = generate_cluster(80, 500, seed=8)
    assert orjson.dumps(a) == orjson.dumps(b)
    assert orjson.dumps(a) != orjson.dumps(c)


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    cluster, info = generate_cluster(400, 3000, seed=1)
    path = write_cluster(cluster, tmp_path_factory.mktemp("perf") / "cluster.json")
    return path, {"cluster": cluster, "info": info}


def test_generated_cluster_loads_with_requested_counts(cluster_file) -> None:
    path, _ = cluster_file
    snapshot = ClusterSnapshot.from_objects(load_objects(path))
    counts = snapshot.counts()
    assert counts["nodes"] == 400
    assert counts["pods"] == 3000
    assert counts["services"] > 0 and counts["replicasets"] > 0 and counts["statefulsets"] > 0


def test_generated_cluster_has_the_realistic_features(cluster_file) -> None:
    _, data = cluster_file
    nodes = node_objects(data["cluster"])
    pods = pod_objects(data["cluster"])
    taints = [t for n in nodes for t in n["spec"].get("taints", [])]
    sla = [t for t in taints if t["key"] == "node.example.com/sla"]
    assert sla and all(t["value"].isdigit() and t["effect"] == "NoSchedule" for t in sla)
    assert any(t["key"] == "node.example.com/kernel-version" for t in taints)
    assert any(t["key"] == "node.example.com/cni-version" for t in taints)
    assert any(t["key"].startswith("env.example.com/") for t in taints)
    assert any(t["effect"] == "PreferNoSchedule" for t in taints)
    assert any(t["key"].startswith("zone-a1-rack-") for t in taints)
    cordoned = [n for n in nodes if n["spec"].get("unschedulable")]
    assert cordoned
    for n in cordoned:
        assert {"key": "node.kubernetes.io/unschedulable", "value": "",
                "effect": "NoSchedule"} in n["spec"]["taints"]
    for n in nodes:
        labels = n["metadata"]["labels"]
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone",
                    "topology.example.com/rack", "node.example.com/kernel-version",
                    "node.example.com/cni-version"):
            assert key in labels
    zones = {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes}
    assert 3 <= len(zones) <= 5
    names = {n["metadata"]["name"] for n in nodes}
    cordoned_names = {n["metadata"]["name"] for n in cordoned}
    assert all(p["spec"]["nodeName"] in names - cordoned_names for p in pods)
    assert all(p["metadata"]["ownerReferences"] for p in pods)
    assert len({p["metadata"]["namespace"] for p in pods}) >= 4


def test_cli_generate_writes_a_loadable_file(tmp_path: Path) -> None:
    from perf.__main__ import main

    out = tmp_path / "c.json"
    assert main(["generate", "--nodes", "30", "--pods", "100", "--seed", "3", "-o", str(out)]) == 0
    assert ClusterSnapshot.from_objects(load_objects(out)).counts()["nodes"] == 30


# --- workloads -------------------------------------------------------------------------


def test_every_workload_pod_parses_without_annotation_errors() -> None:
    for w in WORKLOADS:
        pod = pod_from_dict(w.pod(1))
        assert pod.tolerations_error is None and pod.affinity_error is None, w.name


def test_mixed_stream_is_deterministic_and_covers_every_workload() -> None:
    stream = mixed_pods(60)
    assert stream == mixed_pods(60)
    assert len({p["metadata"]["name"] for p in stream}) == 60
    assert {workload_of(p) for p in stream} == {w.name for w in WORKLOADS}


def test_extend_snapshot_appends_without_touching_the_original(cluster_file) -> None:
    path, _ = cluster_file
    snap = ClusterSnapshot.from_objects(load_objects(path))
    pod = existing_pod_from_dict({"metadata": {"name": "x", "namespace": "perf"},
                                  "spec": {"nodeName": snap.nodes.nodes[0].name}})
    new = extend_snapshot(snap, pod)
    assert len(new.pods) == len(snap.pods) + 1 and any(p is pod for p in new.pods)
    assert pod not in snap.pods_by_namespace.get("perf", [])
    assert any(p is pod for p in new.pods_by_namespace["perf"])
    assert new.nodes is snap.nodes and new.generation == snap.generation + 1


# --- the reference comparison ------------------------------------------------------


def test_answers_compare_as_kube_scheduler_reads_them() -> None:
    """A slim answer and the full one it stands for, or the same entries in another
    order, read alike; a different relative score, a host not asked about, another
    feasible list, or other failure maps when no node fits do not."""
    asked = ["a", "b", "c", "d"]

    def reads(answer):
        return as_scheduler_reads("prioritize", answer, asked)

    full = [{"Host": "a", "Score": 3}, {"Host": "b", "Score": 5}, {"Host": "c", "Score": 3},
            {"Host": "d", "Score": 7}]
    slim = [{"Host": "d", "Score": 4}, {"Host": "b", "Score": 2}]
    assert reads(full) == reads(slim) == reads(list(reversed(slim)))
    assert reads([]) == reads([{"Host": h, "Score": 6} for h in asked])  # every host alike
    assert reads([{"Host": "b", "Score": 1}, {"Host": "b", "Score": 1}]) == reads([{"Host": "b", "Score": 2}])
    assert reads(slim) != reads([{"Host": "d", "Score": 4}, {"Host": "b", "Score": 3}])
    assert reads(slim) != reads([{"Host": "d", "Score": 4}, {"Host": "c", "Score": 2}])
    assert reads(slim) != reads([*slim, {"Host": "ghost", "Score": 0}])

    fits = {"Nodes": None, "NodeNames": ["a", "b"], "FailedNodes": {},
            "FailedAndUnresolvableNodes": {}, "Error": ""}
    fits_full = {**fits, "FailedNodes": {"c": "why"}, "FailedAndUnresolvableNodes": {"d": "why"}}
    assert as_scheduler_reads("filter", fits, asked) == as_scheduler_reads("filter", fits_full, asked)
    assert as_scheduler_reads("filter", fits, asked) != as_scheduler_reads(
        "filter", {**fits, "NodeNames": ["b", "a"]}, asked)
    none_fit = {**fits, "NodeNames": [], "FailedNodes": {h: "why" for h in asked}}
    assert as_scheduler_reads("filter", none_fit, asked) != as_scheduler_reads(
        "filter", {**none_fit, "FailedNodes": {**none_fit["FailedNodes"], "d": "another"}}, asked)


def test_reference_comparison_agrees_and_catches_a_changed_answer(cluster_file) -> None:
    """As `perf run` compares them: one source, the fast engine first, then the
    reference asked the same. Their answers agree as kube-scheduler reads them (the hosts
    of a slim prioritize answer come in an order that depends on the candidate set's
    templates, not on the scores); one score or one feasible node changed is counted."""
    path, _ = cluster_file
    snapshot = ClusterSnapshot.from_objects(load_objects(path))
    names = [n.name for n in snapshot.nodes.nodes]
    source = StaticSource(snapshot)
    fast, ref = new_extender(default_config(), source), new_extender(default_config(), source, fast=False)
    answers, _ = run_inprocess(fast, mixed_pods(len(WORKLOADS) * 2), names)
    _, same = compare_reference(answers, ref, names)
    assert same["compared"] == len(answers) and same["mismatches"] == 0, same["examples"]

    scored = next(a for a in answers if a.prioritize_result)
    top = scored.prioritize_result[0]
    scored.prioritize_result[0] = {**top, "Score": top["Score"] + 1}
    narrowed = next(a for a in answers if a is not scored and len(a.filter_result["NodeNames"]) > 2)
    narrowed.filter_result["NodeNames"] = narrowed.filter_result["NodeNames"][1:]
    narrowed.prioritize_result = None  # the reference is then not asked to prioritize it either
    _, changed = compare_reference(answers, ref, names)
    assert changed["mismatches"] == 2
    assert {e["verb"] for e in changed["examples"]} == {"filter", "prioritize"}
    diff = next(e["diff"] for e in changed["examples"] if e["verb"] == "prioritize")
    got = re.search(rf"{re.escape(top['Host'])}: (-?\d+) vs (-?\d+)", diff)  # shifted by the lowest
    assert got is not None and int(got[1]) == int(got[2]) + 1, diff


def test_noop_floor_answers_the_verbs() -> None:
    """The do-nothing app `perf run` measures as the HTTP floor answers filter and
    prioritize (its verbs were refused with 404 before their bodies were read when it
    caught them in `__call__` instead of declaring them)."""
    listener = Listener("127.0.0.1:0", app=NoopApp()).start()
    try:
        conn = Connection(listener.port)
        body = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": ["a", "b"]})
        status, data = conn.post("/filter", body)
        assert (status, orjson.loads(data)["NodeNames"]) == (200, ["a", "b"])
        status, data = conn.post("/prioritize", body)
        assert (status, orjson.loads(data)) == (200, [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}])
        conn.close()
    finally:
        listener.stop()


# --- the independent checker ---------------------------------------------------------


def _node(name: str, zone: str, taints=(), unschedulable=False, **labels: str) -> dict:
    spec: dict = {"taints": list(taints)}
    if unschedulable:
        spec["unschedulable"] = True
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone, **labels}},
        "spec": spec}


def _pod(name: str, node: str = "", tolerations=(), labels=None, **spec) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels or {}},
            "spec": {"nodeName": node, "tolerations": list(tolerations), **spec},
            "status": {"phase": "Running"}}


SLA = {"key": "node.example.com/sla", "value": "500", "effect": "NoSchedule"}
NODES = [
    _node("tainted", "a", [SLA]),
    _node("cordoned", "a", [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
          unschedulable=True),
    _node("old", "b", **{"node.example.com/kernel-version": "5.4.0"}),
    _node("new", "b", **{"node.example.com/kernel-version": "6.8.0"}),
    _node("env", "b", [{"key": "env.example.com/dev", "effect": "NoSchedule"}]),
]


def test_checker_detects_planted_violations() -> None:
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
               "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "w"}}}]
    existing = [_pod("e1", "tainted", labels={"app": "w"}), _pod("e2", "tainted", labels={"app": "w"})]
    semver = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node.example.com/kernel-version", "operator": "SemverGt",
             "values": ["6.0.0"]}]}]}}}
    gt = {"key": "node.example.com/sla", "operator": "Gt", "value": "100", "effect": "NoSchedule"}
    checker = Checker(NODES, existing, CEL_ORACLES)
    placements = [
        (_pod("p-taint"), "tainted"),  # untolerated NoSchedule
        (_pod("p-cordon"), "cordoned"),  # cordoned, no toleration
        (_pod("p-affinity", affinity=semver), "old"),  # 5.4.0 is not > 6.0.0
        (_pod("p-spread", tolerations=[gt], labels={"app": "w"},
              topologySpreadConstraints=spread), "tainted"),  # zone a: 2+1-0 > 1
        (_pod("p-missing"), "nowhere"),
    ]
    rules = {(v.pod.split("/")[1], v.rule) for v in checker.replay(placements)}
    assert rules == {("p-taint", "TaintToleration"), ("p-cordon", "NodeUnschedulable"),
                     ("p-cordon", "TaintToleration"), ("p-affinity", "NodeAffinity"),
                     ("p-spread", "PodTopologySpread"), ("p-missing", "node")}


def test_checker_accepts_valid_placements_and_counts_replayed_pods() -> None:
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
               "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "w"}}}]
    gt = {"key": "node.example.com/sla", "operator": "Gt", "value": "100", "effect": "NoSchedule"}
    ann = {"scheduling-extender.io/tolerations": json.dumps([{"expression": CEL_ENV}])}
    checker = Checker(NODES, [], CEL_ORACLES)
    ok = checker.replay([
        (_pod("gt", tolerations=[gt]), "tainted"),
        (_pod("cel", labels={}), "new"),
        ({**_pod("cel-ann"), "metadata": {"name": "cel-ann", "namespace": "ns",
                                          "annotations": ann}}, "env"),
        (_pod("s1", tolerations=[gt], labels={"app": "w"}, topologySpreadConstraints=spread), "new"),
        (_pod("s2", tolerations=[gt], labels={"app": "w"}, topologySpreadConstraints=spread),
         "tainted"),
    ])
    assert ok == []
    # Zones a=1, b=1: a third pod into b is fine (skew 1); a fourth into b (2+1-1 = 2) is
    # not. Counts must carry over between replay calls.
    bad = checker.replay([
        (_pod("s3", tolerations=[gt], labels={"app": "w"}, topologySpreadConstraints=spread), "new"),
        (_pod("s4", tolerations=[gt], labels={"app": "w"}, topologySpreadConstraints=spread), "new"),
    ])
    assert [v.pod for v in bad] == ["ns/s4"]


def test_simulation_on_a_small_cluster_has_no_violations(tmp_path: Path) -> None:
    from perf.inprocess import simulate

    cluster, _ = generate_cluster(60, 400, seed=5)
    path = write_cluster(cluster, tmp_path / "c.json")
    objects = load_objects(path)
    snapshot = ClusterSnapshot.from_objects(objects)
    config = default_config()
    nodes = [o for o in objects if o["kind"] == "Node"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    stream = mixed_pods(40, start=900)
    result = simulate(lambda src: new_extender(config, src), snapshot, nodes, pods, stream,
                      CEL_ORACLES)
    assert result["pods"] == 40
    assert result["violations"] == 0, result["violation_examples"]
    # The same run again: the same placements (seeded ties, deterministic engine).
    again = simulate(lambda src: new_extender(config, src), snapshot, nodes, pods, stream, CEL_ORACLES)
    assert again["placements_digest"] == result["placements_digest"]


# --- stats and report --------------------------------------------------------------------


def test_percentiles_are_nearest_rank_and_stalls_are_flagged() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert percentile(values, 50) == 0.05 and percentile(values, 99) == 0.099
    s = summarize(values)
    assert s["n"] == 100 and s["p50_ms"] == 50.0 and s["max_ms"] == 100.0
    assert stalls([0.002] * 50 + [0.041])["count"] == 1
    assert stalls([0.050] * 50)["count"] == 0  # uniformly slow is not a stall


def _fake_report() -> dict:
    lat = {"n": 3, "p50_ms": 1.0, "p90_ms": 2.0, "p99_ms": 3.0, "max_ms": 3.0, "mean_ms": 1.5}
    run = {"filter": lat, "prioritize": lat, "pair": lat, "pairs_per_s": 100.0,
           "_samples": {"pair": [0.001, 0.002, 0.003]}}
    size = {
        "nodes": 500, "pods": 10000,
        "inprocess": {"mixed": {"filter": lat, "prioritize": lat, "pair": lat,
                                "plugins": {"TaintToleration/Filter": {"calls": 3, "mean_us": 5.0}},
                                "_samples": {"pair": [0.001]}},
                      "workloads": {"plain": {"filter": lat, "prioritize": lat, "mismatches": 0,
                                              "speedup": {"pair": {"speedup": 12.0}}}}},
        "reference": {"compared": 3, "mismatches": 0, "speedup": {"pair": {"speedup": 12.0}},
                      "latency": {"filter": lat, "prioritize": lat, "pair": lat}},
        "http": {"server": {"cold_start_s": 1.0, "rss_mb": {"worker_mb": 100.0}},
                 "names_seq": run, "names_c4": run, "nodes_seq": run},
        "simulation": {"pods": 10, "pods_per_s": 50.0, "violations": 0},
    }
    cel = {"expressions": {"startsWith": {"compile_us": 50.0, "memo_hit_us": 0.2}}}
    return {"meta": {"cpu": "test"}, "mode": "quick", "sizes": [size], "cel": cel,
            "bar": evaluate_bar(size), "notes": ["n"]}


def test_report_writer_produces_expected_keys_and_files(tmp_path: Path) -> None:
    paths = write_report(_fake_report(), tmp_path)
    data = json.loads(paths["json"].read_text())
    for key in REQUIRED_KEYS:
        assert key in data
    for key in SIZE_KEYS:
        assert key in data["sizes"][0]
    assert "_samples" not in paths["json"].read_text()
    assert data["bar"]["pair_p50_ms"]["ok"] is True and data["bar"]["speedup"]["ok"] is True
    assert (tmp_path / "latency-vs-nodes.png").stat().st_size > 0
    assert (tmp_path / "latency-cdf.png").stat().st_size > 0
    assert not (tmp_path / "churn-latency-vs-nodes.png").exists()  # no churn run, no plot
    summary = paths["summary"].read_text()
    assert summary == render_summary(data) and "| nodes | pods |" in summary
    assert "CEL costs per expression" in summary


def test_report_leads_with_the_churn_table_and_its_bar(tmp_path: Path) -> None:
    lat = {"n": 3, "p50_ms": 2.0, "p90_ms": 5.0, "p99_ms": 9.0, "max_ms": 9.5, "mean_ms": 3.0}
    slow = {**lat, "p50_ms": 8.0, "p99_ms": 30.0}
    run = {"filter": lat, "prioritize": lat, "pair": lat, "initial_sync_s": 7.0, "loadavg_after": 2.5,
           "rss_synced": {"worker_mb": 190.0}, "rss_after": {"worker_mb": 200.0}}
    report = _fake_report()
    report["churn"] = [
        {"nodes": 5000, "pods": 50000, "runs": {"off": run, "on": run},
         "bar": {"p50_ms": 2.5, "p99_ms": 10.0, "rss_mb": None, "initial_sync_s": None, "met": True}},
        {"nodes": 15000, "pods": 150000, "runs": {"off": {**run, "pair": slow}},
         "bar": {"p50_ms": 7.5, "p99_ms": 25.0, "rss_mb": 1500.0, "initial_sync_s": 45.0, "met": False}},
    ]
    summary = write_report(report, tmp_path)["summary"].read_text()
    assert summary.index("**Under churn**") < summary.index("| nodes | pods |")
    rows = [line for line in summary.splitlines() if line.startswith(("| 5,000 / 50,000", "| 15,000 / 150,000"))]
    assert len(rows) == 3
    assert "| off |" in rows[0] and "| yes |" in rows[0] and "2.00 / 9.00" in rows[0]
    assert "| on |" in rows[1] and "| - |" in rows[1]
    assert "**NO**" in rows[2] and "8.00 / 30.00" in rows[2] and "RSS ≤ 1500" in rows[2]
    assert (tmp_path / "churn-latency-vs-nodes.png").stat().st_size > 0  # latency vs nodes under churn


def test_one_entry_point_names_every_benchmark(capsys, monkeypatch) -> None:
    """`python -m perf NAME` knows every perf module that has a main(argv), and runs it
    with the rest of the command line."""
    import re
    from pathlib import Path

    import perf.__main__ as entry

    here = Path(entry.__file__).parent
    with_main = {p.stem for p in here.glob("*.py")
                 if p.stem != "__main__" and re.search(r"^def main\(argv", p.read_text(), re.M)}
    assert with_main == set(entry.BENCHMARKS)
    assert entry.main(["list"]) == 0 and "scheduler_e2e" in capsys.readouterr().out
    seen = []
    import perf.tiebreak

    monkeypatch.setattr(perf.tiebreak, "main", lambda argv: seen.append(argv) or 0)
    assert entry.main(["tiebreak", "--x", "1"]) == 0 and seen == [["--x", "1"]]



def _help(name: str, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        perf_entry.main([name, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_every_benchmark_flag_the_makefile_and_docs_pass_is_accepted(capsys) -> None:
    """The benchmarks declare their shared options through perf.options; each flag a
    Makefile target or a doc passes to `python -m perf NAME` (or `python -m perf.NAME`)
    is still in that NAME's --help."""
    root = Path(perf_entry.__file__).resolve().parent.parent
    texts = [root / "Makefile", root / "README.md", *sorted((root / "perf").glob("*.md")),
             *sorted((root / "docs").rglob("*.md"))]
    invoked: dict[str, set[str]] = {}
    for path in texts:
        for name, rest in re.findall(r"python -m perf[ .](\w+)([^`\n\"]*)", path.read_text()):
            invoked.setdefault(name, set()).update(re.findall(r"(?<!\S)(--[\w-]+)", rest))
    assert {"churn", "attacks", "cel_bench", "run", "whatif"} <= set(invoked)
    for name, flags in invoked.items():
        if name == "list":
            continue
        text = _help(name, capsys)
        assert f"python -m perf {name}" in text
        missing = [flag for flag in flags if not re.search(rf"(?<![\w-]){flag}(?![\w-])", text)]
        assert not missing, (name, missing)


def test_a_shared_option_is_the_same_option_in_every_benchmark(monkeypatch) -> None:
    """--nodes, --pods, --requests, --seed, --out, --seconds and --server-arg have one type
    wherever they are accepted: a benchmark that declared its own would show here."""
    parsers: dict[str, argparse.ArgumentParser] = {}

    def keep(parser, args=None, namespace=None):
        parsers[parser.prog] = parser
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
    for name in perf_entry.BENCHMARKS:
        with pytest.raises(SystemExit):
            perf_entry.main([name])
    assert len(parsers) == len(perf_entry.BENCHMARKS)
    seen = set()
    for parser in parsers.values():
        for action in parser._actions:
            for flag in action.option_strings:
                spec = perf_options.SHARED.get(flag[2:].replace("-", "_"))
                if spec is not None:
                    seen.add(flag)
                    assert action.type is spec.get("type"), (parser.prog, flag)
    assert seen == {"--nodes", "--pods", "--requests", "--seed", "--out", "--seconds",
                    "--server-arg"}


def test_handlers_batch_takes_one_scheduler_perf_workload():
    pods = handlers.batch(3, distinct=False, workload="sp-node-affinity")
    assert len(pods) == WARMUP + 3
    assert {workload_of(p) for p in pods} == {"sp-node-affinity"}
    assert all(p["spec"]["affinity"]["nodeAffinity"] for p in pods)
    mixed = handlers.batch(3, distinct=False)
    assert len({workload_of(p) for p in mixed}) > 1
    with pytest.raises(SystemExit):  # argparse: not one of the five
        handlers.main(["--workload", "no-such-workload"])
