"""The real kube-scheduler and `extender serve` against a real control plane, installed
as an operator installs them.

`install(plane)` applies what `kubectl kustomize manifests/overlays/with-webhook` renders
(with its CIDR set: `testing.overlays`) for identity and access, as rendered: the Namespace, the ServiceAccount
`scheduling-extender/extended-scheduler` and every Role, ClusterRole and binding (the
Deployment, Services, ConfigMap, cert-manager objects and the webhook configuration are
not applied: the processes run here, and `testing.webhook` registers the webhook with a
local URL). `RealCluster` then runs, per test,

- `extender serve --config manifests/base/extender.yaml --kubeconfig K` and
- kube-scheduler with `manifests/base/kube-scheduler-config.yaml` (only the kubeconfig,
  the extender's URL and the ports change: leader election on the shipped lease,
  protobuf, default qps; its secure port with delegated authentication, as in the pod),

where K carries a token of that ServiceAccount from the TokenRequest API, so every call
either process makes is authorized by the shipped RBAC alone. `forbidden()` lists the log
lines of either process that say `forbidden`: the fixture fails the test on any.

It is an `E2ECluster` (`testing.harness`) whose `api` is a `testing.realapi.RealApi`, so
scenario code written for the double runs here unchanged. Between tests on one control
plane `reset` deletes what a test may have made (pods, nodes, volumes, workloads,
events, the lease, webhook configurations); namespaces, priority classes and the
installed RBAC stay.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from testing.apiserver import ApiError
from testing.controlplane import ControlPlane, KubeClient
from testing.harness import (
    SCHEDULER_CONFIG,
    E2ECluster,
    Process,
    launch_extender,
    scheduler_config,
    wait_extender_ready,
    wait_for,
)
from testing.live import free_port
from testing.overlays import overlay_dir
from testing.realapi import FORCE, KINDS, RealApi, path_of, resource_of
from testing.wiretap import WireTap

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = "with-webhook"
NAMESPACE, SERVICE_ACCOUNT = "scheduling-extender", "extended-scheduler"
IDENTITY_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# kube-scheduler's log, lowercased (v1.30 logs "successfully acquired lease", v1.36 "Successfully ...")
ATTEMPTING, ACQUIRED = "attempting to acquire leader lease", "successfully acquired lease"
FORBIDDEN = re.compile(r"forbidden", re.IGNORECASE)


def kubectl() -> str:
    """kubectl with kustomize v5 (`.ci/install-tools` puts it in /opt/extender-tools/bin)."""
    tools = Path(os.environ.get("EXTENDER_TOOLS_DIR", "/opt/extender-tools")) / "bin" / "kubectl"
    found = str(tools) if os.access(tools, os.X_OK) else shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found: run `sudo .ci/install-tools` (kubectl with kustomize v5 "
                           f"into {tools.parent})")
    return found


@functools.cache
def rendered(overlay: str = OVERLAY) -> tuple[dict, ...]:
    """`kubectl kustomize manifests/overlays/OVERLAY`, parsed."""
    proc = subprocess.run([kubectl(), "kustomize", str(overlay_dir(overlay))],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {overlay} failed:\n{proc.stderr}")
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def rendered_kind(kind: str, overlay: str = OVERLAY) -> list[dict]:
    return [d for d in rendered(overlay) if d["kind"] == kind]


def install(plane: ControlPlane, overlay: str = OVERLAY) -> list[str]:
    """Apply the overlay's identity and access objects as rendered; their kind/names."""
    api = RealApi(plane)
    done = []
    for kind in IDENTITY_KINDS:  # namespaces first, bindings last
        for obj in rendered_kind(kind, overlay):
            api.apply(next(k for k, r in KINDS.items() if r.kind == kind and
                           r.group_version == obj["apiVersion"]), obj)
            done.append(f"{kind}/{obj['metadata']['name']}")
    return done


def service_account_token(client: KubeClient, namespace: str = NAMESPACE, name: str = SERVICE_ACCOUNT,
                          seconds: int = 7200) -> str:
    """A token of the ServiceAccount from the TokenRequest API (what the kubelet mounts)."""
    answer = client.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds}})
    return answer["status"]["token"]


# what a test may leave behind, deleted before the next one (namespaced: in every namespace)
RESET_COLLECTIONS = ("pods", "persistentvolumeclaims", "deployments", "jobs", "cronjobs", "replicasets",
                     "statefulsets", "daemonsets", "replicationcontrollers", "events", "endpoints",
                     "poddisruptionbudgets")
RESET_CLUSTER = ("nodes", "persistentvolumes", "storageclasses", "validatingwebhookconfigurations")


def reset(plane: ControlPlane) -> None:
    """Delete what tests make (see the module docstring)."""
    client = plane.admin()
    delete = {"kind": "DeleteOptions", "apiVersion": "v1", **FORCE, "propagationPolicy": "Background"}
    namespaces = [n["metadata"]["name"] for n in client.call("GET", "/api/v1/namespaces")["items"]]
    for resource in RESET_COLLECTIONS:
        for namespace in namespaces:
            if resource == "endpoints" and namespace == "default":
                continue  # the `kubernetes` Service's
            client.call("DELETE", path_of(resource, namespace), delete)
    for resource in RESET_CLUSTER:
        client.call("DELETE", path_of(resource), delete)
    # the storage-object-in-use finalizers stay until a controller (none here) lifts them
    for resource in ("persistentvolumes", "persistentvolumeclaims"):
        for obj in client.call("GET", path_of(resource))["items"]:
            md = obj["metadata"]
            if md.get("finalizers"):
                client.call("PATCH", path_of(resource, md.get("namespace", ""), md["name"]),
                            {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
    for namespace in namespaces:
        for svc in client.call("GET", path_of("services", namespace))["items"]:
            if (namespace, svc["metadata"]["name"]) != ("default", "kubernetes"):
                client.call("DELETE", path_of("services", namespace, svc["metadata"]["name"]))
    try:
        client.call("DELETE", path_of("leases", NAMESPACE, SERVICE_ACCOUNT))
    except ApiError as exc:
        if exc.code != 404:
            raise
    # a deletecollection returns before every object is gone from the watch cache
    wait_for(lambda: not any(client.call("GET", path_of(r))["items"]
                             for r in ("pods", "nodes", "persistentvolumes", "persistentvolumeclaims")), timeout=60)
    client.close()


def shipped_scheduler_config(kubeconfig: Path, extender_port: int | None) -> dict:
    """manifests/base/kube-scheduler-config.yaml with only the kubeconfig and the
    extender's URL changed (`extender_port` None: the in-tree baseline, as
    `harness.scheduler_config` makes it)."""
    config = scheduler_config(kubeconfig, extender_port)
    shipped = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    config["leaderElection"] = shipped["leaderElection"]
    return config


def start_real_scheduler(binary: str, kubeconfig: Path, workdir: Path, extender_port: int | None,
                         gates: Iterable[str] = (), edit: Callable[[dict], None] | None = None,
                         verbosity: int = 2) -> tuple[Process, int]:
    """kube-scheduler as the Deployment runs it (its secure port on a free loopback port,
    authenticating and authorizing scrapes through the API server with the pod's
    identity: `--authentication-kubeconfig`/`--authorization-kubeconfig` stand in for the
    in-cluster configuration). (process, secure port)."""
    config = shipped_scheduler_config(kubeconfig, extender_port)
    if edit is not None:
        edit(config)
    path = workdir / "kube-scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    cmd = [binary, f"--config={path}", f"--v={verbosity}", "--bind-address=127.0.0.1", f"--secure-port={port}",
           f"--cert-dir={workdir / 'scheduler-certs'}", f"--authentication-kubeconfig={kubeconfig}",
           f"--authorization-kubeconfig={kubeconfig}", *gates]
    return Process("kube-scheduler", cmd, workdir / "kube-scheduler.log"), port


class RealCluster(E2ECluster):
    """See the module docstring. `extender_flags`, `scheduler_config_edit`, `in_tree`
    as for `E2ECluster`."""

    def __init__(self, workdir: Path, plane: ControlPlane, binary: str, **kwargs: Any) -> None:
        super().__init__(workdir, binary, api=RealApi(plane), **kwargs)
        self.plane = plane
        self.node_lags: list[float] = []  # seconds from a node write to the extender's watch event
        self.scheduler_port = 0
        self.kubeconfig = self.identity = workdir / "kubeconfig"

    def start(self, objects: Iterable[dict] = ()) -> RealCluster:
        reset(self.plane)
        self.api.start()
        self.api.load(objects)
        self.kubeconfig = self.api.write_kubeconfig(self.workdir / "kubeconfig")  # the user's (admin)
        self.identity = self.plane.kubeconfig(self.workdir / f"{SERVICE_ACCOUNT}.kubeconfig",
                                              service_account_token(self.api.client), SERVICE_ACCOUNT)
        if not self.in_tree:
            self.extender, self.extender_port, self.metrics_port = launch_extender(
                self.identity, self.workdir, self.extender_flags)
            self.tap = WireTap(self.extender_port).start()
        self.start_scheduler(self.identity)
        self._wait_scheduler(self.leads, "take the lease")  # the lease is free after `reset`
        if self.extender is not None:
            wait_extender_ready(self.extender, self.metrics_port)
        return self

    def start_scheduler(self, kubeconfig: Path) -> None:
        """kube-scheduler, returned once it has synced its caches and asks for the lease
        (a standby stays there)."""
        self.scheduler, self.scheduler_port = start_real_scheduler(
            self.binary, kubeconfig, self.workdir, None if self.in_tree else self.tap.port,
            self.plane.pair.feature_gates, self.scheduler_config_edit, self.verbosity)
        self._wait_scheduler(lambda: ATTEMPTING in self.scheduler.tail(10**7).lower(), "ask for the lease")

    def _wait_scheduler(self, condition: Callable[[], bool], what: str) -> None:
        if not wait_for(lambda: condition() or not self.scheduler.alive(), timeout=120, interval=0.1) \
                or not self.scheduler.alive():
            raise RuntimeError(f"kube-scheduler did not {what}:\n{self.scheduler.tail()}")

    def scrape_headers(self) -> dict[str, str]:
        """kube-scheduler authenticates and authorizes scrapes through the API server:
        the admin's token (system:masters) may read /metrics."""
        return {"Authorization": f"Bearer {self.plane.admin_token}"}

    def leads(self) -> bool:
        return self.scheduler is not None and ACQUIRED in self.scheduler.tail(10**7).lower()

    def create(self, *objects: dict) -> list[dict]:
        """Create objects of any kind the real server serves (`testing.realapi.KINDS`)."""
        return [self.api.create(resource_of(o), o) for o in objects]

    # -- node changes, and when the extender saw them

    def _observed(self, write: Callable[[], dict]) -> dict:
        """A node write, then until the extender's Node watch delivered it: how long that
        took (the extender decides on what it has seen) widens the truth's race window."""
        if self.extender is None:
            return write()
        def seen() -> float:
            try:
                return self.extender_metric("extender_watch_events_total", 'kind="Node",type="MODIFIED"')
            except AssertionError:  # none yet: the series appears with the first one
                return 0.0

        before = seen()
        result = write()
        written = time.monotonic()
        wait_for(lambda: seen() > before, timeout=60, interval=0.01)
        self.node_lags.append(time.monotonic() - written)
        return result

    def patch_node(self, name: str, patch: dict) -> dict:
        return self._observed(lambda: super(RealCluster, self).patch_node(name, patch))

    def set_taints(self, name: str, taints: list[dict]) -> dict:
        return self._observed(lambda: super(RealCluster, self).set_taints(name, taints))

    def cordon(self, name: str) -> dict:
        return self._observed(lambda: super(RealCluster, self).cordon(name))

    def replay(self, oracles: dict | None = None, **kwargs: Any):
        """The truth's replay; a node change counts as a race for as long as the extender
        took to see it (measured by `_observed`) beyond the double's 0.5 s. Here a change is
        dated when this process's watch delivered it, and the extender's watch can be later."""
        kwargs.setdefault("race_window", 0.5 + max(self.node_lags, default=0.0))
        return super().replay(oracles, **kwargs)

    def forbidden(self) -> list[str]:
        """Log lines of kube-scheduler or the extender that say `forbidden`."""
        out = []
        for proc in (self.scheduler, self.extender):
            if proc is not None:
                out += [f"{proc.name}: {line}" for line in proc.tail(10**8).splitlines() if FORBIDDEN.search(line)]
        return out

    def logs(self, chars: int = 4000) -> str:
        """The tails of both processes' logs, the extender's warnings and errors however
        early (in-flight give-ups, watch restarts), the API server's tail."""
        warnings = []
        if self.extender is not None:
            warnings = [line for line in self.extender.tail(10**8).splitlines()
                        if '"level":"warning"' in line or '"level":"error"' in line]
        return (super().logs(chars) + f"\n--- extender warnings and errors ({len(warnings)}) ---\n"
                + "\n".join(warnings[:30]) + f"\n--- kube-apiserver ---\n{self.plane.apiserver.tail(chars)}")


# ---- the service proxy ------------------------------------------------------------------


def host_address() -> str:
    """A non-loopback IPv4 address of this machine: the API server refuses Endpoints on
    loopback (and link-local) addresses, so a Service's backend must be reachable there."""
    import ipaddress

    import psutil

    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET:
                ip = ipaddress.ip_address(a.address)
                if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
                    return a.address
    raise RuntimeError("no non-loopback IPv4 address on this machine: the API server's service proxy "
                       "cannot reach a backend on loopback (Endpoints validation refuses 127.0.0.0/8)")


class Acceptor:
    """A listening socket on `host`, each accepted connection handed to `handle` on a
    thread of its own, until `stop`."""

    def __init__(self, host: str, name: str) -> None:
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True, name=name).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stopped = True
        self.server.close()


class Forwarder(Acceptor):
    """TCP from `host:<free port>` to `target` (host:port), one thread pair per connection:
    the pod IP the API server's service proxy connects to."""

    def __init__(self, host: str, target: str) -> None:
        self.target = target.rsplit(":", 1)
        super().__init__(host, "forwarder")

    def handle(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection((self.target[0], int(self.target[1])), timeout=10)
        except OSError:
            client.close()
            return
        threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
        self._pipe(client, upstream)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            source.close()


def serve_endpoints(api: RealApi, backends: dict[tuple[str, str], str]) -> None:
    """What a running pod and the endpoints controller give each Service in `backends`
    ((namespace, name) -> 127.0.0.1:port): a `Forwarder` on this machine's address as the
    pod's IP, the extender's Pod (the rendered Deployment's template, admitted by the
    namespace's Pod Security level) reporting that IP as a kubelet would, and Endpoints
    naming the Pod. kube-apiserver's service proxy checks all three: a loopback
    address, an address without a `targetRef` or one its Pod does not report is skipped
    ("no endpoints available"). (The double's twin: `testing.service_proxy.add_service_proxy`.)"""
    host = host_address()
    for (namespace, name), target in backends.items():
        forwarder = Forwarder(host, target)
        api.on_stop.append(forwarder.stop)
        (deployment,) = rendered_kind("Deployment")  # the extender's pod, as its ReplicaSet makes it
        template = deployment["spec"]["template"]
        backend = api.create("pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {**template["metadata"], "name": f"{name}-backend", "namespace": namespace},
            "spec": template["spec"], "status": {"phase": "Running", "podIP": host, "podIPs": [{"ip": host}]}})
        service = api.get("services", name, namespace)
        ports = [{"name": p["name"], "port": forwarder.port} if p.get("name") else {"port": forwarder.port}
                 for p in service["spec"]["ports"]]
        target_ref = {"kind": "Pod", "namespace": namespace, "name": backend["metadata"]["name"],
                      "uid": backend["metadata"]["uid"]}
        api.apply("endpoints", {"apiVersion": "v1", "kind": "Endpoints",
                                "metadata": {"name": name, "namespace": namespace},
                                "subsets": [{"addresses": [{"ip": host, "targetRef": target_ref}], "ports": ports}]})
