"""The release workflow (.github/workflows/release.yaml, not run here: issue 25 item 1)
publishes on a version tag only, checks the tag against the package version, and runs the
Makefile's own targets with the Python the image's wheels need."""

from __future__ import annotations

import re

import yaml
from deploy_tools import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"


def load() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def test_it_runs_on_version_tags_only_and_says_it_is_not_run_here():
    doc = load()
    assert set(doc["on"]) == {"push"} and set(doc["on"]["push"]) == {"tags"}
    (pattern,) = doc["on"]["push"]["tags"]
    assert pattern.startswith("v")
    assert "NOT RUN HERE" in WORKFLOW.read_text()
    assert doc["permissions"] == {"contents": "read", "packages": "write"}


def test_its_steps_are_the_makefile_targets():
    (job,) = load()["jobs"].values()
    runs = [s["run"] for s in job["steps"] if "run" in s]
    python = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")]
    assert python and python[0]["with"]["python-version"] == "3.11", "cp311 wheels for the image"
    assert any(re.search(r"\bmake image$", r) for r in runs)
    assert any(re.search(r"\bmake image-push \"IMAGE_REPO=\$IMAGE_REPO\"", r) for r in runs)
    assert any("GITHUB_REF_NAME" in r and "pyproject.toml" in r for r in runs), "tag == version"
    makefile = (ROOT / "Makefile").read_text()
    for target in ("image", "image-push"):
        assert re.search(rf"^{target}:", makefile, re.M)
