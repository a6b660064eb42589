"""The kustomize overlays as the tests build them. manifests/overlays/with-webhook does not
build until its user sets the API server's CIDR (its kustomization says where;
tests/deploy/test_manifests.py checks that it refuses): the tests build a copy of
manifests/ with that one edit made, the CIDR 192.0.2.0/24 (TEST-NET-1)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
WEBHOOK_CIDR = "192.0.2.0/24"
UNSET = "  literals: []  # SET"  # the shipped line of with-webhook's kustomization.yaml
_copy: list[Path] = []


def set_webhook_cidr(manifests: Path, cidr: str) -> None:
    """The edit the user makes in with-webhook's kustomization.yaml."""
    path = manifests / "overlays" / "with-webhook" / "kustomization.yaml"
    text = path.read_text()
    if UNSET not in text:
        raise RuntimeError(f"{path}: no line {UNSET!r} to set the CIDR in")
    path.write_text(text.replace(UNSET, f"  literals: [cidr={cidr}]  # SET"))


def overlay_dir(name: str) -> Path:
    """The directory `kubectl kustomize` builds for the overlay `name`: the shipped one, or
    for with-webhook a copy of manifests/ (made once per process) with the CIDR set."""
    if name != "with-webhook":
        return MANIFESTS / "overlays" / name
    if not _copy:
        root = Path(tempfile.mkdtemp(prefix="extender-manifests-"))
        atexit.register(shutil.rmtree, root, True)
        shutil.copytree(MANIFESTS, root / "manifests")
        set_webhook_cidr(root / "manifests", WEBHOOK_CIDR)
        _copy.append(root / "manifests")
    return _copy[0] / "overlays" / name
