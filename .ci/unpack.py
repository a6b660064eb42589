"""Unpacking the real control-plane binaries for the end-to-end tests (used by
.ci/kube-scheduler and .ci/kube-apiserver; `.ci/run` and make export their paths).

Each binary comes xz-compressed from ../shared/<component>/ beside the clone (or the
directory in $CONTROL_PLANE_ARCHIVES); it is unpacked with Python's lzma into build/ and
its sha256 checked. An already exported environment variable (the `env` column) wins.
Exit 1, naming what is missing and where it was looked for, when there is neither."""

from __future__ import annotations

import hashlib
import lzma
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


@dataclass(frozen=True)
class Binary:
    component: str  # kube-scheduler, kube-apiserver
    version: str  # v1.30.6
    env: str  # the variable the tests read
    sha256: str  # of the unpacked binary

    @property
    def archive_name(self) -> str:
        return f"{self.component}-{self.version}-linux-amd64.xz"

    @property
    def dest(self) -> Path:
        return ROOT / "build" / f"{self.component}-{self.version}"


BINARIES = [
    # upstream v1.30.6 code, unmodified (`--version` prints v0.0.0-master)
    Binary("kube-scheduler", "v1.30.6", "KUBE_SCHEDULER_BINARY",
           "67e993688f401b0e1408b447286716e3b30a5c66537022604dcfa214afbd4b27"),
    # the next three: upstream code through MicroShift's vendored OpenShift fork
    Binary("kube-scheduler", "v1.36.2", "KUBE_SCHEDULER_V1_36_BINARY",
           "4ade1d089f2e54a4471b03550dd8611b085cb3d903a1848ca8d92da39d483d7b"),
    Binary("kube-apiserver", "v1.30.3", "KUBE_APISERVER_V1_30_BINARY",
           "06ea82f3aecdec0d03791666e2cdbb4b0deb7feb2e23f1d1ecf3260af80ed5b0"),
    Binary("kube-apiserver", "v1.36.2", "KUBE_APISERVER_V1_36_BINARY",
           "ee51384d152e423245c8f7edb3dc05a099deeb1b31c865670847ed8ef5152b8e"),
]


class Missing(Exception):
    """A binary that is neither given nor unpackable; the message says how to get it."""


def find(component: str, version: str) -> Binary:
    for b in BINARIES:
        if b.component == component and b.version == version:
            return b
    known = ", ".join(b.version for b in BINARIES if b.component == component)
    raise Missing(f"{component} {version}: not one of the shipped versions ({known})")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unpack(binary: Binary) -> Path:
    """The binary's path: $env, else build/ (unpacked now if needed); Missing otherwise."""
    given = os.environ.get(binary.env)
    if given:
        if not os.access(given, os.X_OK):
            raise Missing(f"{binary.env}={given} is not an executable file")
        return Path(given)
    if binary.dest.is_file() and sha256(binary.dest) == binary.sha256:
        return binary.dest
    where = Path(os.environ.get("CONTROL_PLANE_ARCHIVES") or SHARED / binary.component)
    archive = where / binary.archive_name
    if not archive.is_file():
        raise Missing(f"{binary.component} {binary.version}: {archive} not found. Put "
                 f"{binary.archive_name} in ../shared/{binary.component}/ beside the clone "
                 f"(or in $CONTROL_PLANE_ARCHIVES), or set {binary.env} to the binary")
    data = lzma.decompress(archive.read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if digest != binary.sha256:
        raise Missing(f"{archive}: unpacked sha256 {digest}, expected {binary.sha256}")
    binary.dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.dest.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    tmp.replace(binary.dest)
    return binary.dest


def main(component: str, default_version: str) -> int:
    """`SCRIPT [VERSION]` prints the path (exit 1 naming what is missing); `SCRIPT --env`
    prints `export ENV=path` for every shipped version of the component (for the
    Makefile and .ci/run to eval), each missing one on stderr (exit 1)."""
    args = sys.argv[1:]
    if args == ["--env"]:
        status = 0
        for b in BINARIES:
            if b.component != component:
                continue
            try:
                print(f"export {b.env}={shlex.quote(str(unpack(b)))}")
            except Missing as exc:
                print(f"{component}: {exc}", file=sys.stderr)
                status = 1
        return status
    try:
        print(unpack(find(component, args[0] if args else default_version)))
    except Missing as exc:
        sys.exit(str(exc))
    return 0
