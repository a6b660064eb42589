"""A shipped pod run on this machine as the kubelet would run it, to prove that what its
probes, ports, Services and NetworkPolicies name is served (issue 36).

Each container's process is started with the pod's own args, env and mounted files:
`extender serve` for the extender image, the real kube-scheduler (`$KUBE_SCHEDULER_BINARY`)
for registry.k8s.io/kube-scheduler. What cannot be had on a test machine is substituted,
and only that:

- **the pod's network namespace**: every port number the pod uses (in HOST:PORT of args,
  env and mounted files; the listeners' defaults made explicit first) becomes a free
  local port, the same one for every container of the pod (or of the host-network pods
  of one node), so a probe by number reaches whichever container listens there;
- **volumes**: ConfigMaps and hostPath directories are written to temp directories and
  every mount path in args, env and files points there; a TLS Secret is a fresh
  self-signed pair;
- **the API server**: the API double; the pod's service account (`--in-cluster`, a
  kube-scheduler configuration without `clientConnection.kubeconfig`) becomes a kubeconfig
  for it, and so does every kubeconfig file a hostPath provides.

Which container serves a port is read from the listening sockets of its processes
(psutil), with the address they are bound to: the kubelet, a Service and a NetworkPolicy
reach a pod on its IP, so a listener on 127.0.0.1 alone serves none of them (unless the
pod is on the host network and the probe names `host: 127.0.0.1`).
"""

from __future__ import annotations

import copy
import datetime
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

from testing import kubelet
from testing.apiserver import FakeApiServer
from testing.harness import Process, extender_command, node
from testing.live import free_port

SCHEDULER_DEFAULT_SECURE_PORT = 10259  # kube-scheduler's --secure-port default
ADDRESS = re.compile(r"(?<![\w.])((?:\d{1,3}\.){3}\d{1,3}|localhost|\[[0-9a-fA-F:]*\]):(\d{2,5})\b")
WILDCARD = ("0.0.0.0", "::")
DEADLINE = float(os.environ.get("PODSIM_DEADLINE", "180"))  # generous: a probe that never succeeds is the failure, not a slow one
API_KUBECONFIG = "<a kubeconfig for the API double>"  # hostPath content: the node's kubeconfig


@dataclass
class Listener:
    container: str
    address: str


@dataclass
class PodRun:
    """Containers of one or more pods sharing a network namespace."""

    workdir: Path
    binary: str
    ports: dict[int, int] = field(default_factory=dict)  # pod port -> local port
    processes: dict[str, Process] = field(default_factory=dict)  # "pod/container" -> process
    api: FakeApiServer | None = None
    kubeconfig: Path | None = None

    # --- the pod's network namespace -------------------------------------------------

    def local(self, port: int) -> int:
        if port not in self.ports:
            self.ports[port] = free_port()
        return self.ports[port]

    def remap(self, text: str) -> str:
        """Every HOST:PORT of the pod to its local port (one already local stays)."""
        local = set(self.ports.values())

        def sub(m: re.Match) -> str:
            port = int(m.group(2))
            return m.group(0) if port in local else f"{m.group(1)}:{self.local(port)}"

        return ADDRESS.sub(sub, text)

    # --- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> PodRun:
        self.api = FakeApiServer().start()
        self.api.load([node("n-a", "a")])
        self.kubeconfig = self.api.write_kubeconfig(self.workdir / "api-double.kubeconfig")
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.processes.values():
            proc.stop()
        if self.api is not None:
            self.api.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{proc.tail(2500)}" for name, proc in self.processes.items())

    # --- starting a pod ----------------------------------------------------------------

    def start(self, pod_name: str, pod: dict, config_maps: dict[str, dict], host_paths: dict[str, dict]) -> None:
        """Start every container of `pod` (a PodSpec). `config_maps`: name -> data;
        `host_paths`: path -> {file name: content} (a file path maps to {"": content})."""
        for container in pod["containers"]:
            mounts = self._volumes(f"{pod_name}/{container['name']}", pod, container, config_maps, host_paths)
            env = {e["name"]: self._rewrite(e.get("value", ""), mounts) for e in container.get("env", [])}
            args = [self._rewrite(a, mounts) for a in container.get("command", []) + container.get("args", [])]
            if "kube-scheduler" in container["image"]:
                cmd, child_env = self._kube_scheduler(args), {"PATH": os.environ.get("PATH", "")}
            elif "scheduling-extender" in container["image"]:
                cmd, child_env = self._extender(args, env)
            else:
                raise AssertionError(f"{container['name']}: no process known for image {container['image']}")
            name = f"{pod_name}/{container['name']}"
            self.processes[name] = Process(name, cmd, self.workdir / f"{name.replace('/', '_')}.log", child_env)

    def _volumes(self, where: str, pod: dict, container: dict, config_maps: dict, host_paths: dict) -> dict:
        """mountPath -> a local path holding what the volume would hold (per container,
        its files' paths rewritten to this container's view)."""
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        root = self.workdir / where.replace("/", "_")
        mounts: dict[str, str] = {}
        files: list[tuple[Path, str]] = []
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            target = root / mount["name"]
            content: dict[str, str] = {}
            if "configMap" in volume:
                content = config_maps[volume["configMap"]["name"]]
            elif "hostPath" in volume:
                content = host_paths[volume["hostPath"]["path"]]
            elif "secret" in volume:
                content = tls_pair()
            elif "emptyDir" not in volume:
                raise AssertionError(f"{where}: volume {mount['name']}: kind not simulated")
            if list(content) == [""]:  # a hostPath of type File
                files.append((target, content[""]))
            else:
                target.mkdir(parents=True, exist_ok=True)
                files += [(target / name, text) for name, text in content.items()]
            mounts[mount["mountPath"]] = str(target)
        for path, text in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.kubeconfig.read_text() if text == API_KUBECONFIG else self._rewrite(text, mounts))
        return mounts

    def _rewrite(self, text: str, mounts: dict[str, str]) -> str:
        """Mount paths to their local directories (one pass), then the pod's ports."""
        if mounts:
            paths = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
            text = re.sub(rf"(?<![\w/])({paths})(?=/|$|[^\w.-])", lambda m: mounts[m.group(1)], text)
        return self.remap(text)

    def _kube_scheduler(self, args: list[str]) -> list[str]:
        assert args and args[0] == "kube-scheduler", f"kube-scheduler's command: {args}"
        out = [self.binary]
        secure = SCHEDULER_DEFAULT_SECURE_PORT
        for arg in args[1:]:
            if arg.startswith("--secure-port="):
                secure = int(arg.split("=", 1)[1])
                continue
            if arg.startswith("--config="):
                self._scheduler_service_account(Path(arg.split("=", 1)[1]))
            out.append(arg)
        return [*out, f"--secure-port={self.local(secure)}"]

    def _scheduler_service_account(self, config_path: Path) -> None:
        """No clientConnection.kubeconfig: kube-scheduler uses the pod's service account,
        here a kubeconfig for the API double, which speaks JSON only (not protobuf)."""
        config = yaml.safe_load(config_path.read_text())
        connection = config.setdefault("clientConnection", {})
        if not connection.get("kubeconfig"):
            connection["kubeconfig"] = str(self.kubeconfig)
        connection["contentType"] = "application/json"
        config_path.write_text(yaml.safe_dump(config))

    def _extender(self, args: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """`extender ARGS` (the image's entrypoint), its listeners' defaults made explicit
        (then remapped), the pod's service account pointed at the API double."""
        from extender.cli import _settings, build_parser
        from extender.config import build_config

        if args and args[0] == "extender":
            args = args[1:]
        if env.pop("EXTENDER_IN_CLUSTER", "false").lower() == "true":
            args = [*args, "--in-cluster"]
        args = [f"--kubeconfig={self.kubeconfig}" if a in ("--in-cluster", "--in-cluster=true") else a for a in args]
        ns = build_parser().parse_args(args)
        config = build_config(_settings(ns), env=env, config_file=ns.config)
        for flag, value in (("--listen", config.listen), ("--metrics-listen", config.metrics_listen),
                            ("--webhook-listen", config.webhook_listen)):
            if value and value != "off":
                args.append(f"{flag}={self.remap(value)}")
        child = {k: v for k, v in os.environ.items()
                 if not k.startswith("EXTENDER_") and k not in ("KUBECONFIG", "PROMETHEUS_MULTIPROC_DIR")}
        return [*extender_command(), *args], {**child, **env}

    # --- what listens where ------------------------------------------------------------

    def listeners(self) -> dict[int, list[Listener]]:
        """Local port -> who listens there (container, bound address)."""
        found: dict[int, list[Listener]] = {}
        for name, proc in self.processes.items():
            try:
                root = psutil.Process(proc.proc.pid)
                family = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for member in family:
                try:
                    conns = member.net_connections(kind="tcp")
                except psutil.Error:
                    continue
                for conn in conns:
                    if conn.status == psutil.CONN_LISTEN:
                        found.setdefault(conn.laddr.port, []).append(Listener(name, conn.laddr.ip))
        return found

    def serving(self, pod_port: int) -> list[Listener]:
        return self.listeners().get(self.ports.get(pod_port, -1), [])

    def dead(self) -> list[str]:
        return [name for name, proc in self.processes.items() if not proc.alive()]

    def probe(self, target: kubelet.Target, host_network: bool) -> str | None:
        """Run one probe until it succeeds: None, or why the kubelet would never see it succeed."""
        if target.host not in ("", "127.0.0.1"):
            return f"host {target.host!r} is not simulated"
        if target.host == "127.0.0.1" and not host_network:
            return "host 127.0.0.1 is the kubelet's own node loopback, not the pod's"
        deadline = time.monotonic() + DEADLINE
        last = "nothing listens there"
        while time.monotonic() < deadline:
            served = self.serving(target.port)
            if served:
                if target.host == "" and not any(s.address in WILDCARD for s in served):
                    return (f"the kubelet dials the pod's IP; {served[0].container} listens on "
                            f"{served[0].address} only")
                try:
                    if target.action == "tcpSocket":
                        return None
                    status = kubelet.http_probe(target.scheme, "127.0.0.1", self.ports[target.port], target.path)
                    if kubelet.succeeds(status):
                        return None
                    last = f"{target.scheme} GET {target.path} answered {status}"
                except OSError as exc:
                    last = f"{target.scheme} GET {target.path}: {exc}"
            if self.dead():
                return f"{last}; exited: {self.dead()}"
            time.sleep(0.2)
        return f"{last} for {DEADLINE:.0f} s"


def tls_pair() -> dict[str, str]:
    """A self-signed serving certificate, as cert-manager would put in the Secret."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scheduling-extender-webhook")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    return {"tls.crt": cert.public_bytes(serialization.Encoding.PEM).decode(),
            "tls.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode(),
            "ca.crt": cert.public_bytes(serialization.Encoding.PEM).decode()}


def without_images(pod: dict) -> dict:
    """The pod spec minus what does not change what runs (images), for deduplication."""
    pod = copy.deepcopy(pod)
    for container in pod["containers"]:
        container.pop("image", None)
    return pod
