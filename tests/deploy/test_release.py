"""`make release` (issue 36): .ci/release builds every versioned artifact, and the release
workflow runs it and pushes what it built. Every step but the image runs here, into a
temporary directory (.ci/run runs the whole release, the image included)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from deploy_tools import ROOT, tool

WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"
VERSION = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)

pytestmark = pytest.mark.xdist_group("deploy/test_release")


def load() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def test_the_workflow_runs_make_release_on_version_tags_then_pushes():
    doc = load()
    assert set(doc["on"]) == {"push"} and set(doc["on"]["push"]) == {"tags"}
    (pattern,) = doc["on"]["push"]["tags"]
    assert pattern.startswith("v")
    (job,) = doc["jobs"].values()
    runs = [s["run"] for s in job["steps"] if "run" in s]
    python = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")]
    assert python and python[0]["with"]["python-version"] == "3.11", "cp311 wheels for the image"
    assert any("GITHUB_REF_NAME" in r and "pyproject.toml" in r for r in runs), "tag == version"
    release = next(i for i, r in enumerate(runs) if re.search(r"\bmake release \"VERSION=", r))
    pushes = [i for i, r in enumerate(runs) if "image-push" in r or "helm push" in r or "gh release create" in r]
    assert len(pushes) == 3 and min(pushes) > release, "everything pushed is what make release built"
    makefile = (ROOT / "Makefile").read_text()
    for target in ("release", "image", "image-push"):
        assert re.search(rf"^{target}:", makefile, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make release ", ci, re.M), "CI exercises the release up to the push"


def refusal(tmp_path: Path, version: str) -> str:
    env = {**os.environ, "VERSION": version, "RELEASE_DIR": str(tmp_path / "out"),
           "RELEASE_WORK": str(tmp_path / "work"), "PYTHON_BIN": sys.executable, "RELEASE_IMAGE": "0"}
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "release")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    return proc.stderr


def test_it_refuses_a_version_that_is_not_the_projects(tmp_path):
    assert "not 9.9.9: bump it first" in refusal(tmp_path, "9.9.9")
    assert "is not x.y.z" in refusal(tmp_path, "v1")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("release")
    env = {**os.environ, "VERSION": VERSION, "RELEASE_DIR": str(tmp / "out"), "RELEASE_WORK": str(tmp / "work"),
           "PYTHON_BIN": sys.executable, "RELEASE_IMAGE": "0", "IMAGE_REPO": "ghcr.io/example/scheduling-extender",
           "HELM": tool("helm")}
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "release")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out"


def test_the_release_holds_every_artifact_with_checksums(release):
    names = sorted(p.name for p in release.iterdir())
    assert names == sorted(["RELEASE-NOTES.md", "SHA256SUMS", f"scheduling-extender-{VERSION}.sbom.cdx.json",
                            f"scheduling-extender-{VERSION}.tgz", f"scheduling_extender-{VERSION}-py3-none-any.whl",
                            f"kubectl_extender-{VERSION}-py3-none-any.whl", f"kubectl-extender-{VERSION}.tar.gz",
                            f"kubectl-extender-{VERSION}.krew.yaml"])
    sums = dict(line.split()[::-1] for line in (release / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == set(names) - {"SHA256SUMS"}
    for name, digest in sums.items():
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == digest, name


def test_the_chart_carries_the_version_and_the_image(release):
    with tarfile.open(release / f"scheduling-extender-{VERSION}.tgz") as archive:
        chart = yaml.safe_load(archive.extractfile("scheduling-extender/Chart.yaml"))
        values = yaml.safe_load(archive.extractfile("scheduling-extender/values.yaml"))
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    assert values["image"]["repository"] == "ghcr.io/example/scheduling-extender"
    assert values["kubeScheduler"]["image"]["repository"] == "registry.k8s.io/kube-scheduler"
    out = subprocess.run([tool("helm"), "template", "x", str(release / f"scheduling-extender-{VERSION}.tgz"),
                          "--kube-version", "v1.35.0"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"image: \"ghcr.io/example/scheduling-extender:{VERSION}\"" in out


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {normal(n): v for n, v in (line.split("==") for line in lines if line and not line.startswith("#"))}


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_sbom_lists_the_images_pinned_packages(release):
    """The image installs the runtime dependencies at constraints.txt's pins: the SBOM
    lists each of them, at that version, and nothing of the test tools (pip and
    setuptools are the venv's own, from the Python the image runs)."""
    sbom = json.loads((release / f"scheduling-extender-{VERSION}.sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["metadata"]["component"]["name"] == "scheduling-extender"
    components = {normal(c["name"]): c["version"] for c in sbom["components"]}
    pinned = pins()
    ours = {"scheduling-extender": VERSION, "kubectl-extender": VERSION}  # the plugin: a dependency
    assert {n: v for n, v in components.items() if n not in ("pip", "setuptools") and {**pinned, **ours}.get(n) != v} == {}
    for runtime in ("flask", "gunicorn", "cel-python", "kubernetes", "orjson", "google-re2", "pyyaml"):
        assert runtime in components
    assert not {"pytest", "hypothesis", "ruff", "cyclonedx-bom"} & components.keys()


def test_the_notes_are_the_changelogs_section(release):
    notes = (release / "RELEASE-NOTES.md").read_text()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert notes.startswith(f"# scheduling-extender {VERSION}\n")
    assert notes.split("\n", 1)[1].strip() in changelog


def test_the_plugin_stands_alone_for_krew(release, tmp_path):
    """Issue 36: the krew archive's kubectl-extender runs on a bare python3 (-I: no site
    packages, none of the server's dependencies), and the manifest names its sha256."""
    manifest = yaml.safe_load((release / f"kubectl-extender-{VERSION}.krew.yaml").read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("krew.googlecontainertools.github.com/v1alpha2", "Plugin")
    # the project's name, not a generic word another plugin in the index may claim
    assert manifest["metadata"]["name"] == "scheduling-extender" and manifest["spec"]["version"] == f"v{VERSION}"
    assert "python3, version 3.11 or newer" in manifest["spec"]["caveats"]
    assert "kubectl scheduling-extender why POD" in manifest["spec"]["description"]
    (platform,) = manifest["spec"]["platforms"]
    archive = release / f"kubectl-extender-{VERSION}.tar.gz"
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/kubectl-extender-{VERSION}.tar.gz") and platform["bin"] == "kubectl-extender"
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-extender"]
        tar.extractall(tmp_path, filter="data")
    assert {f["from"] for f in platform["files"]} == {"LICENSE", "kubectl-extender"}
    proc = subprocess.run([sys.executable, "-I", str(tmp_path / "kubectl-extender"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "why" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "-I", str(tmp_path / "kubectl-extender"), "why", "p", "--url",
                           "http://127.0.0.1:9", "--kubeconfig", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/nonexistent"})
    assert proc.returncode == 1 and "cannot reach the extender" in proc.stderr, proc.stderr
    # krew's link, kubectl-scheduling_extender: `kubectl scheduling-extender` in its usage
    (tmp_path / "kubectl-scheduling_extender").symlink_to(tmp_path / "kubectl-extender")
    proc = subprocess.run([sys.executable, "-I", str(tmp_path / "kubectl-scheduling_extender"), "why"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: kubectl scheduling-extender why"), proc.stderr
    # an older python3 is refused, as the caveats say
    older = "import runpy, sys; sys.version_info = (3, 10, 12); runpy.run_path(sys.argv[1], run_name='__main__')"
    proc = subprocess.run([sys.executable, "-I", "-c", older, str(tmp_path / "kubectl-extender"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "needs python3 3.11 or newer; this python3 is 3.10" in proc.stderr, proc.stderr


def test_the_plugin_imports_the_standard_library_only():
    import ast

    for path in (ROOT / "plugin" / "kubectl_extender").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("kubectl_extender", "__future__"), (path.name, name)


def test_the_plugin_is_one_distribution_and_serve_runs_without_it(release, tmp_path):
    """Both distributions installed from the release's wheels into a fresh venv; then the
    plugin's removed: `extender serve` still starts and becomes ready (it never imports
    the plugin), and the commands that use the plugin say what is missing. The server's
    wheel holds neither the package nor the script, and requires the plugin's version."""
    import sysconfig
    import zipfile

    from testing.harness import Process, free_port, wait_extender_ready

    server = release / f"scheduling_extender-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(server) as wheel:
        names = wheel.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(info).decode()
        scripts = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert not [n for n in names if n.startswith("kubectl_extender")]
    assert "kubectl-extender" not in scripts and "extender = extender.cli:main" in scripts
    assert f"Requires-Dist: kubectl-extender=={VERSION}" in metadata

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--no-index", "--no-deps", str(server),
                    str(release / f"kubectl_extender-{VERSION}-py3-none-any.whl")], check=True, timeout=300)
    assert (venv / "bin" / "kubectl-extender").exists()
    subprocess.run([*pip, "uninstall", "-y", "kubectl-extender"], check=True, timeout=300)
    assert not (venv / "bin" / "kubectl-extender").exists()
    # the server's dependencies from the test venv (PYTHONPATH: its .pth files, and so its
    # editable installs of both distributions, are not read)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBECONFIG")},
           "PYTHONPATH": sysconfig.get_paths()["purelib"]}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tmp_path)

    gone = run("python", "-c", "import kubectl_extender")
    assert gone.returncode == 1 and "No module named 'kubectl_extender'" in gone.stderr, gone.stderr
    helped = run("extender", "serve", "--help")
    assert helped.returncode == 0 and "--scheduler-config" in helped.stdout, helped.stderr
    refused = run("extender", "whatif", "--cluster", str(ROOT / "extender/data/cluster.yaml"), "--cordon", "x")
    assert refused.returncode == 2 and "needs the kubectl plugin's distribution, kubectl-extender" in refused.stderr
    port, metrics_port = free_port(), free_port()
    served = Process("extender", [str(venv / "bin" / "extender"), "serve", "--cluster",
                                  str(ROOT / "extender/data/cluster.yaml"), "--listen", f"127.0.0.1:{port}",
                                  "--metrics-listen", f"127.0.0.1:{metrics_port}"], tmp_path / "serve.log", env)
    try:
        wait_extender_ready(served, metrics_port)
    finally:
        served.stop()


def test_the_plugin_has_the_servers_version():
    plugin = re.search(r'^version = "(.*)"', (ROOT / "plugin" / "pyproject.toml").read_text(), re.M).group(1)
    from kubectl_extender import __version__

    assert plugin == VERSION == __version__


def test_the_images_debian_packages_join_the_sbom(release, tmp_path):
    """With the image (RELEASE_IMAGE=1), .ci/release lists its Debian packages with
    dpkg-query and .ci/sbom-add-debian adds them to the SBOM: here on this release's SBOM
    with a listing in dpkg-query's format."""
    sbom = tmp_path / "sbom.json"
    sbom.write_text((release / f"scheduling-extender-{VERSION}.sbom.cdx.json").read_text())
    python = {c["name"] for c in json.loads(sbom.read_text())["components"]}
    listing = tmp_path / "dpkg"
    listing.write_text("libc6\t2.36-9+deb12u9\tamd64\npython3.11\t3.11.2-6+deb12u5\tamd64\n")
    for _ in range(2):  # idempotent
        subprocess.run([sys.executable, str(ROOT / ".ci" / "sbom-add-debian"), str(sbom), str(listing)], check=True)
    components = json.loads(sbom.read_text())["components"]
    debian = [c for c in components if c.get("purl", "").startswith("pkg:deb/")]
    assert [(c["name"], c["version"]) for c in debian] == [("libc6", "2.36-9+deb12u9"), ("python3.11", "3.11.2-6+deb12u5")]
    assert debian[0]["purl"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u9?arch=amd64&distro=debian-12"
    assert {c["name"] for c in components if not c.get("purl", "").startswith("pkg:deb/")} == python
    release_script = (ROOT / ".ci" / "release").read_text()
    assert "dpkg-query -W" in release_script and ".ci/sbom-add-debian" in release_script
