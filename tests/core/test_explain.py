"""`extender explain`: the JSON contract, on the bundled examples, via the real CLI."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest
from conftest import EXAMPLES

# one pytest-xdist worker runs the module: the module's report made once, not once per worker
pytestmark = pytest.mark.xdist_group("core/test_explain")

PODS = sorted((EXAMPLES / "pods").glob("*.yaml"))


def explain(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "extender", "explain", "--cluster", str(EXAMPLES / "cluster.yaml"), *args],
        capture_output=True, text=True, timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def report() -> dict:
    args = [a for p in PODS for a in ("--pod", str(p))]
    code, out, err = explain(*args)
    assert code == 0, err
    return orjson.loads(out)


def test_every_example_pod_is_explained(report):
    assert [r["pod"] for r in report["results"]] == [
        f"{'shop' if p.stem == 'spread-spot' else 'default'}/{'web-new' if p.stem == 'spread-spot' else p.stem}"
        for p in PODS
    ]


def test_contract_shape(report):
    for result in report["results"]:
        assert set(result) >= {"pod", "filter", "prioritize", "nodes"}
        assert list(result["filter"]) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
        feasible = set(result["filter"]["NodeNames"])
        assert {h["Host"] for h in result["prioritize"]} == feasible
        for node, info in result["nodes"].items():
            for plugin, verdict in info["plugins"].items():
                assert set(verdict) == {"code", "reasons", "score"}
                assert verdict["code"] in ("Success", "Unschedulable", "UnschedulableAndUnresolvable", "Error")
                if node not in feasible:
                    assert verdict["score"] is None, (node, plugin)
                elif verdict["score"] is not None:
                    assert 0 <= verdict["score"] <= 100


def by_pod(report, name):
    return next(r for r in report["results"] if r["pod"].endswith("/" + name))


def test_gt_details_name_the_taint_and_the_comparison(report):
    sla = by_pod(report, "sla-gt")
    assert sla["filter"]["NodeNames"] == ["od-a1", "od-b1", "spot-a1", "spot-b1"]
    tt = sla["nodes"]["spot-c1"]["plugins"]["TaintToleration"]
    assert tt["code"] == "UnschedulableAndUnresolvable"
    assert tt["reasons"][0] == "node(s) had untolerated taint(s)"
    assert any("node.example.com/sla=500:NoSchedule" in r for r in tt["reasons"])
    assert any(r.startswith("toleration[0] node.example.com/sla Gt") and r.endswith("taint value 500 is not greater than 750") for r in tt["reasons"])


def test_each_plugin_is_evaluated_for_every_node(report):
    plain = by_pod(report, "plain")
    cordoned = plain["nodes"]["od-c2"]["plugins"]
    assert cordoned["NodeUnschedulable"]["code"] == "UnschedulableAndUnresolvable"
    assert cordoned["TaintToleration"]["code"] == "UnschedulableAndUnresolvable"
    assert plain["filter"]["FailedAndUnresolvableNodes"]["od-c2"] == "node(s) were unschedulable"


def test_cel_stories(report):
    assert "od-c1" in by_pod(report, "cel-env-prefix")["filter"]["NodeNames"]
    assert "od-b2" in by_pod(report, "cel-kernel-version")["filter"]["NodeNames"]
    assert "od-a2" not in by_pod(report, "cel-kernel-version")["filter"]["NodeNames"]
    assert "dev-a1" in by_pod(report, "cel-rack-regex")["filter"]["NodeNames"]


def test_candidates_and_table_output():
    code, out, err = explain("--pod", str(EXAMPLES / "pods" / "sla-gt.yaml"), "--candidates", "spot-a1,spot-c1,ghost",
                             "--output", "table")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "POD default/sla-gt"
    assert lines[1].split() == ["NODE", "VERDICT", "SCORE", "REASON"]
    rows = {line.split()[0]: line for line in lines[2:] if line.strip()}
    assert set(rows) == {"spot-a1", "spot-c1", "ghost"}
    assert "Feasible" in rows["spot-a1"]
    assert "node(s) had untolerated taint(s)" in rows["spot-c1"]
    assert "not seen yet" in rows["ghost"]


def test_pod_in_cluster_with_same_name_is_ignored(tmp_path):
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: web-7d9f-0, namespace: shop}\nspec: {}\n")
    code, out, err = explain("--pod", str(pod), "--candidates", "od-a1")
    assert code == 0, err
    assert orjson.loads(out)["results"][0]["pod"] == "shop/web-7d9f-0"


def test_bad_inputs_are_clear_errors(tmp_path):
    code, _, err = explain("--pod", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in err
    code, _, err = explain("--pod", str(EXAMPLES / "pods" / "plain.yaml"), "--feature-gates", "Nope=true")
    assert code == 2 and "unknown feature gate 'Nope'" in err
