"""`extender validate`: examples pass, examples/invalid fail with the documented lines."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from extender.cli import main

ROOT = Path(__file__).resolve().parents[2]
INVALID = ROOT / "examples" / "invalid"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "extender", "validate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_good_examples_pass():
    out = run("-R", "examples/pods", "examples/cluster.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.endswith("0 error(s)\n")
    assert "object(s) checked" in out.stdout and not out.stdout.startswith("0 object")
    assert run("examples/").returncode == 0  # like kubectl -f DIR: examples/invalid is not read


def test_invalid_examples_fail_with_the_documented_messages():
    out = run("examples/invalid")
    assert out.returncode == 1
    assert out.stdout == (INVALID / "expected-output.txt").read_text()


def test_json_output_lists_every_error(tmp_path):
    out = run("--output", "json", "examples/invalid/cronjob-node-affinity.yaml")
    assert out.returncode == 1
    body = json.loads(out.stdout)
    (obj,) = body["objects"]
    assert (obj["kind"], obj["name"], obj["document"], len(obj["errors"])) == ("CronJob", "semver-affinity", 1, 3)
    assert body["errorCount"] == 3


def test_stdin_multi_document_and_warnings(monkeypatch, capsys):
    docs = """
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    scheduling-extender.io/tolerations: '[{"key": "k", "operator": "Exists", "effect": "NoExecute"}]'
"""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(docs.encode())))
    assert main(["validate", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "-:6:Pod/p: warning: metadata.annotations[scheduling-extender.io/tolerations][0]: a NoExecute taint can "
        "only be tolerated from spec.tolerations: the node's taint manager evicts a pod that only this annotation "
        "lets onto the node",
        "1 object(s) checked, 0 error(s)",
    ]


@pytest.mark.parametrize("content, fragment", [
    ("a: [b", "cannot parse"),
    ("- 5\n", "expected Kubernetes objects"),
])
def test_unparseable_files_are_errors(tmp_path, capsys, content, fragment):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{bad}") and fragment in out


def test_missing_file_is_an_error(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 1
    assert "cannot read: No such file or directory" in capsys.readouterr().out


def test_feature_gate_flag_is_honoured(tmp_path, capsys):
    pod = tmp_path / "pod.yaml"
    pod.write_text("kind: Pod\nmetadata:\n  name: p\n  annotations:\n    scheduling-extender.io/tolerations: "
                   "'[{\"key\": \"k\", \"operator\": \"Gt\", \"value\": \"5\"}]'\n")
    assert main(["validate", str(pod)]) == 0
    capsys.readouterr()
    assert main(["validate", "--feature-gates", "TaintTolerationComparisonOperators=false", str(pod)]) == 1
    assert 'Unsupported value: "Gt"' in capsys.readouterr().out


def test_annotation_that_is_not_a_string_is_an_error(tmp_path, capsys):
    pod = tmp_path / "pod.yaml"
    pod.write_text("kind: Pod\nmetadata:\n  name: p\n  annotations:\n    scheduling-extender.io/tolerations:\n"
                   "    - {key: k, operator: Exists}\n")
    assert main(["validate", str(pod)]) == 1
    # the value as JSON, not a Python repr ("[{'key': 'k', ...}]"): issue #23
    assert ('metadata.annotations[scheduling-extender.io/tolerations]: Invalid value: '
            '[{"key":"k","operator":"Exists"}]: annotation values must be strings'
            ) in capsys.readouterr().out


def test_scheduler_config_warns_by_each_pods_profile(tmp_path, capsys):
    """Two profiles that disagree on TaintToleration: the annotation is read for the pods
    of the one that disables it, ignored for the other's (a warning; exit 0)."""
    config = tmp_path / "kube-scheduler-config.yaml"
    config.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n"
                      "- schedulerName: web\n  plugins:\n    multiPoint:\n      disabled: [{name: TaintToleration}]\n"
                      "- schedulerName: batch\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text("\n---\n".join(
        f"kind: Pod\nmetadata:\n  name: {name}\n  annotations:\n    scheduling-extender.io/tolerations: "
        f"'[{{\"key\": \"k\", \"operator\": \"Gt\", \"value\": \"5\"}}]'\nspec:\n  schedulerName: {name}\n"
        for name in ("web", "batch")))
    assert main(["validate", "--scheduler-config", str(config), str(pods)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{pods}:10:Pod/batch: warning: metadata.annotations[scheduling-extender.io/tolerations]: profile \"batch\" "
        "runs TaintToleration in kube-scheduler (it does not disable it), which reads spec only: this annotation is "
        "ignored when these pods are placed",
        "2 object(s) checked, 0 error(s)",
    ]
    assert main(["validate", str(pods)]) == 0  # without it: the single profile reads every annotation
    assert "warning" not in capsys.readouterr().out
    config.write_text(config.read_text().replace("schedulerName: batch", "schedulerName: batch\n  wieght: 1"))
    assert main(["validate", "--scheduler-config", str(config), str(pods)]) == 2  # as serve: the field named
    assert 'unknown field "profiles[1].wieght"' in capsys.readouterr().err
