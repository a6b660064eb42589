"""One version: pyproject.toml's. Every other file that states the release's version
says the same (the plugin's distribution and package, the server's package, the chart's
version and appVersion, the Dockerfile's default label, the overlays' image tags, the
OpenAPI document), and the image build passes it as --build-arg VERSION. A bump is
`make release VERSION=x.y.z` makes it (.ci/cut-release, tried here on a copy of the tree:
the CHANGELOG section, the bump, the commit and the tag), then builds with that version."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deploy_tools import ROOT

VERSION = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def stated(root: Path = ROOT) -> dict[str, str]:
    """Where the version is written -> what it says there."""
    def line(path: str, pattern: str) -> str:
        return re.search(pattern, (root / path).read_text(), re.M).group(1)

    chart = yaml.safe_load((root / "charts/scheduling-extender/Chart.yaml").read_text())
    server = next(d for d in _project(root)["dependencies"] if d.startswith("kubectl-extender"))
    out = {
        "pyproject.toml": _project(root)["version"],
        "pyproject.toml: the dependency on kubectl-extender": server.removeprefix("kubectl-extender=="),
        "plugin/pyproject.toml": line("plugin/pyproject.toml", r'^version = "(.*)"'),
        "plugin/kubectl_extender/__init__.py": line("plugin/kubectl_extender/__init__.py", r'^__version__ = "(.*)"'),
        "extender/__init__.py": line("extender/__init__.py", r'^__version__ = "(.*)"'),
        "charts/scheduling-extender/Chart.yaml: version": chart["version"],
        "charts/scheduling-extender/Chart.yaml: appVersion": chart["appVersion"],
        "Dockerfile: ARG VERSION": line("Dockerfile", r"^ARG VERSION=(.*)$"),
        "docs/reference/openapi.yaml": yaml.safe_load((root / "docs/reference/openapi.yaml").read_text())["info"]["version"],
    }
    for kustomization in sorted((root / "manifests").rglob("kustomization.yaml")):
        for image in yaml.safe_load(kustomization.read_text()).get("images", []):
            if "scheduling-extender" in image.get("newName", image["name"]):
                out[f"{kustomization.relative_to(root)}: {image['name']}"] = image["newTag"]
    return out


def _project(root: Path) -> dict:
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def test_every_file_states_pyprojects_version():
    found = stated()
    assert len(found) >= 12
    assert {where: v for where, v in found.items() if v != VERSION} == {}


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of this tree (committed or not) as a git repository of its own: the cut
    commits and tags there, never here."""
    subprocess.run(["bash", str(ROOT / ".ci" / "source-snapshot"), str(tmp_path / "tree")], check=True, timeout=300)
    tree = tmp_path / "tree"
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "Release Test"],
                 ["config", "user.email", "release-test@example.com"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, timeout=300)
    return tree


def cut(tree: Path, version: str, date: str = "2026-12-07") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(tree / ".ci" / "cut-release"), version], cwd=tree, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "RELEASE_DATE": date})


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, text=True, timeout=60).stdout


def next_version() -> str:
    major, minor, _ = map(int, VERSION.split("."))
    return f"{major}.{minor + 1}.0"


def test_make_release_cuts_the_changelog_bumps_every_file_and_tags(tree):
    new = next_version()
    before = (tree / "CHANGELOG.md").read_text()
    unreleased = re.search(r"^## \[Unreleased\]\n(.*?)(?=^## \[)", before, re.M | re.S).group(1).strip()
    assert unreleased, "this test needs CHANGELOG entries under [Unreleased]"
    base = git(tree, "rev-parse", "HEAD").strip()

    proc = cut(tree, new)
    assert proc.returncode == 0, proc.stderr

    after = (tree / "CHANGELOG.md").read_text()
    assert f"## [Unreleased]\n\n## [{new}] - 2026-12-07\n\n{unreleased}\n\n## [{VERSION}] - " in after
    assert after.count("## [Unreleased]") == 1
    assert after.replace(f"## [Unreleased]\n\n## [{new}] - 2026-12-07\n", "## [Unreleased]\n") == before
    found = stated(tree)
    assert found.keys() == stated().keys()
    assert {where: v for where, v in found.items() if v != new} == {}, "the version test after the bump"
    # the docs' install examples follow; the history that names an old version does not
    assert f"image.tag={new}" in (tree / "README.md").read_text()
    assert (tree / "docs/operate/hardening.md").read_text() == (ROOT / "docs/operate/hardening.md").read_text()
    # one commit of exactly that, tagged; nothing left uncommitted
    assert git(tree, "rev-parse", "HEAD~1").strip() == base
    assert git(tree, "rev-parse", f"v{new}^{{commit}}").strip() == git(tree, "rev-parse", "HEAD").strip()
    assert git(tree, "cat-file", "-t", f"v{new}").strip() == "tag"  # annotated
    assert git(tree, "log", "-1", "--format=%s").strip() == f"Release {new}"
    assert git(tree, "status", "--porcelain").strip() == ""
    changed = set(git(tree, "diff", "--name-only", "HEAD~1").split())
    assert {"CHANGELOG.md", "pyproject.toml", "Dockerfile", "charts/scheduling-extender/Chart.yaml"} <= changed
    assert not {c for c in changed if c.startswith("tests/")}

    # the version already cut (CI's `make release`, the workflow on the tag): nothing to do
    proc = cut(tree, new)
    assert proc.returncode == 0 and "nothing to do" in proc.stderr, proc.stderr
    assert git(tree, "rev-parse", "HEAD").strip() == git(tree, "rev-parse", f"v{new}^{{commit}}").strip()


def test_the_cut_refuses_what_it_cannot_release(tree):
    def refused(version: str) -> str:
        proc = cut(tree, version)
        assert proc.returncode == 1, proc.stderr
        return proc.stderr

    head = git(tree, "rev-parse", "HEAD")
    assert "is not x.y.z" in refused("v1")
    assert "is older than" in refused("0.0.1")
    (tree / "README.md").write_text((tree / "README.md").read_text() + "\nuncommitted\n")
    assert "uncommitted changes" in refused(next_version())
    git(tree, "checkout", "--", "README.md")
    git(tree, "tag", f"v{next_version()}")
    assert "exists already" in refused(next_version())
    git(tree, "tag", "-d", f"v{next_version()}")
    (tree / "Dockerfile").write_text((tree / "Dockerfile").read_text().replace(f"ARG VERSION={VERSION}", "ARG VERSION=9.9.9"))
    git(tree, "commit", "-q", "-am", "a file that disagrees")
    assert "Dockerfile says ['9.9.9']" in refused(next_version())
    git(tree, "reset", "-q", "--hard", "HEAD~1")
    changelog = (tree / "CHANGELOG.md").read_text()
    empty = re.sub(r"^## \[Unreleased\]\n.*?(?=^## \[)", "## [Unreleased]\n\n", changelog, flags=re.M | re.S)
    (tree / "CHANGELOG.md").write_text(empty)
    git(tree, "commit", "-q", "-am", "nothing unreleased")
    assert "nothing under [Unreleased]" in refused(next_version())
    git(tree, "reset", "-q", "--hard", "HEAD~1")
    assert git(tree, "rev-parse", "HEAD") == head and git(tree, "tag", "--list") == ""
    assert git(tree, "status", "--porcelain") == ""


def test_make_release_runs_the_cut_before_the_build():
    recipe = re.search(r"^release:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1).splitlines()
    assert ".ci/cut-release \"$(VERSION)\"" in recipe[0] and ".ci/release" in recipe[1]
    assert shutil.which("git"), "the cut needs git"


def test_the_image_build_passes_the_version():
    build = (ROOT / ".ci" / "build-image").read_text()
    assert '--build-arg VERSION="$VERSION"' in build
    assert re.search(r"^VERSION=\$\(sed -n .*pyproject\.toml\)", build, re.M)
    assert 'org.opencontainers.image.version="${VERSION}"' in (ROOT / "Dockerfile").read_text()


def test_the_chart_is_packaged_with_the_version():
    release = (ROOT / ".ci" / "release").read_text()
    assert '--version "$VERSION" --app-version "$VERSION"' in release
    values = yaml.safe_load((ROOT / "charts/scheduling-extender/values.yaml").read_text())
    assert values["image"]["tag"] == "", "the image's tag follows appVersion"
