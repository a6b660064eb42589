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
    assert "--no-index --find-links /wheels scheduling-extender" in text, "installs only the pinned wheels"
    assert "[test]" not in text and "pytest" not in text


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    return {normal(line.split("==")[0]): line.split("==")[1]
            for line in (ROOT / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")}


# this repository's own distributions: installed from ./plugin and . at the one version
FIRST_PARTY = ("scheduling-extender", "kubectl-extender")


def test_constraints_pin_every_runtime_dependency():
    """Every third-party runtime dependency is pinned in constraints.txt; the plugin's
    distribution (first party, installed from ./plugin) is required at the server's own
    version instead."""
    pins = pinned()
    project = (ROOT / "pyproject.toml").read_text()
    runtime = re.search(r"dependencies = \[(.*?)\]", project, re.S).group(1)
    names = [normal(re.match(r'\s*"([A-Za-z0-9_.-]+)', line).group(1))
             for line in runtime.splitlines() if line.strip().startswith('"')]
    assert names and [n for n in names if n not in pins and n not in FIRST_PARTY] == []
    version = re.search(r'^version = "(.*)"', project, re.M).group(1)
    assert f'"kubectl-extender=={version}"' in runtime, "the server requires its own version of the plugin"
    build = re.search(r"^requires = \[(.*?)\]", project, re.M).group(1)
    assert all("==" in r for r in re.findall(r'"([^"]+)"', build)), "the build backend is pinned too"


def test_everything_make_installed_is_pinned():
    """Issue 36: `make run` and `make test` install under PIP_CONSTRAINT=constraints.txt,
    so every distribution of this venv (the project's own two aside; pip and setuptools
    come with the venv itself) is at the version constraints.txt pins."""
    from importlib import metadata

    pins = pinned()
    unpinned = {}
    for dist in metadata.distributions():
        name = normal(dist.metadata["Name"])
        if name in (*FIRST_PARTY, "pip", "setuptools"):
            continue
        if pins.get(name) != dist.version:
            unpinned[name] = (dist.version, pins.get(name))
    assert unpinned == {}, "installed (version, pin); regenerate constraints.txt (command in its header)"


def test_make_run_installs_only_what_serving_needs():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^export PIP_CONSTRAINT := \$\(CURDIR\)/constraints.txt$", makefile, re.M)
    assert re.search(r"^run: \$\(RUNSTAMP\)$", makefile, re.M)
    recipe = re.search(r"^\$\(RUNSTAMP\):.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "pip install -q -e ./plugin -e .\n" in recipe and "[" not in recipe.replace("[ ", "")


def test_install_tools_is_idempotent():
    """Run after the tools are present (make test installs them first): nothing to do."""
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "install-tools")], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""
