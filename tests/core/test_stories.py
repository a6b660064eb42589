"""Every user story in examples/stories runs through `extender explain` offline and lands
where its expected.yaml says; every manifest there passes `extender validate`.

A story directory holds cluster.yaml (what `kubectl get -o yaml` would show: nodes,
volumes, claims, running pods), pods.yaml (the pods to place, as an operator writes them)
and expected.yaml (per pod: the feasible nodes and, per filter message, the rejected ones).
The e2e suite (tests/e2e/test_stories.py) runs the same stories through a real
kube-scheduler."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from conftest import EXAMPLES

from extender.cli import main

STORIES = sorted(p for p in (EXAMPLES / "stories").iterdir() if p.is_dir())


def load_expected(story: Path) -> dict:
    return yaml.safe_load((story / "expected.yaml").read_text())


def explain(story: Path, capsys) -> dict:
    code = main(["explain", "--cluster", str(story / "cluster.yaml"), "--pod", str(story / "pods.yaml")])
    out = capsys.readouterr().out
    assert code == 0
    return orjson.loads(out)


def rejected_by_message(result: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for failed in (result["filter"]["FailedNodes"], result["filter"]["FailedAndUnresolvableNodes"]):
        for node, message in (failed or {}).items():
            out.setdefault(message, set()).add(node)
    return out


def test_every_kep_story_has_a_directory():
    names = {p.name for p in STORIES}
    wanted = ({f"kep-5471-story-{i}" for i in range(1, 6)} | {f"kep-5500-story-{i}" for i in range(1, 4)}
              | {f"kep-5721-story-{i}" for i in range(1, 5)} | {"kep-3094-story-1"})
    assert wanted <= names
    for story in STORIES:
        expected = load_expected(story)
        assert story.name == f"{expected['kep'].lower()}-story-{expected['story']}"
        assert expected["link"].startswith("https://github.com/kubernetes/enhancements/")


@pytest.mark.parametrize("story", STORIES, ids=[p.name for p in STORIES])
def test_story_placement_offline(story, capsys):
    expected = load_expected(story)
    report = explain(story, capsys)
    results = {r["pod"].split("/", 1)[1]: r for r in report["results"]}
    assert list(results) == [p["name"] for p in expected["pods"]], "pods.yaml and expected.yaml list the same pods"
    for want in expected["pods"]:
        result = results[want["name"]]
        assert result["filter"]["Error"] == ""
        assert sorted(result["filter"]["NodeNames"]) == sorted(want["feasible"]), want["name"]
        rejected = {message: set(nodes) for message, nodes in (want.get("rejected") or {}).items()}
        assert rejected_by_message(result) == rejected, want["name"]
        assert "annotationWarnings" not in result, result.get("annotationWarnings")


def test_story_manifests_pass_validate(capsys):
    code = main(["validate", "-R", str(EXAMPLES / "stories")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.endswith(" 0 error(s)\n") and "warning" not in out
