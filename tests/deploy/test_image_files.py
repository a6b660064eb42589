"""The image recipe (built for real by `make image`, outside `make test`) and the tool
installer keep their promises."""

from __future__ import annotations

import os
import re
import subprocess

from deploy_tools import ROOT


def test_dockerfile_is_parameterised_labelled_and_non_root():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=", text, re.M)
    assert text.count("FROM ${BASE_IMAGE}") == 2
    for label in ("title", "version", "licenses", "description"):
        assert f"org.opencontainers.image.{label}=" in text
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert "--no-index --find-links /wheels extender" in text, "installs only the pinned wheels"
    assert "[test]" not in text and "pytest" not in text


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_constraints_pin_every_runtime_dependency_and_no_test_tool():
    pins = {normal(line.split("==")[0]) for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")}
    project = (ROOT / "pyproject.toml").read_text()
    runtime = re.search(r"dependencies = \[(.*?)\]", project, re.S).group(1)
    names = [normal(re.match(r'\s*"([A-Za-z0-9_.-]+)', line).group(1))
             for line in runtime.splitlines() if line.strip().startswith('"')]
    assert names and [n for n in names if n not in pins] == []
    assert not {"pytest", "hypothesis", "ruff", "kubernetes-validate"} & pins


def test_install_tools_is_idempotent():
    """Run after the tools are present (make test installs them first): nothing to do."""
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "install-tools")], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""
