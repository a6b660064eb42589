"""A real control plane for the end-to-end tests: etcd and kube-apiserver on loopback.

`ControlPlane(workdir, "v1.30").start()` makes its own PKI (a CA, the API server's serving
certificate, an admin token, a service-account key pair: `Pki`, with `cryptography`),
starts etcd (Debian's `etcd-server`) and kube-apiserver on free ports with their data in
`workdir`, and returns once `/readyz` answers `ok`. Several control planes run side by
side (other tests, other checkouts): nothing here uses a fixed port or path.

The flags are a single-node test control plane's: token file and service-account keys,
RBAC authorization (the shipped roles are proven by use), `ServiceAccount` and
`TaintNodesByCondition` admission off (there is no controller-manager to create default
ServiceAccounts and no node lifecycle controller to lift the not-ready taint), no
endpoint reconciler. There is no kubelet either: tests patch node status through the
status subresource and force-delete pods (`testing.realapi`).

`PAIRS` are the tested version pairs (kube-apiserver, kube-scheduler); the binaries come
from environment variables that `.ci/run` and make set (`.ci/kube-apiserver`,
`.ci/kube-scheduler`). A missing one is a `MissingBinary` naming the variable, the file
it looked for and how to get it: the tests on the real control plane fail with it,
never skip.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testing.apiserver import ApiError
from testing.harness import Process, wait_for
from testing.live import free_port

ROOT = Path(__file__).resolve().parents[1]
GATE = "TaintTolerationComparisonOperators"


@dataclass(frozen=True)
class Pair:
    """A tested kube-apiserver + kube-scheduler pair (and the gates both run with)."""

    name: str  # v1.30, the pytest id
    apiserver: str  # v1.30.3
    scheduler: str
    apiserver_env: str
    scheduler_env: str
    gates: tuple[str, ...] = ()

    @property
    def feature_gates(self) -> list[str]:
        return [f"--feature-gates={','.join(self.gates)}"] if self.gates else []

    @property
    def spec_gt_lt(self) -> bool:
        """Whether this API server stores Gt/Lt in spec.tolerations."""
        return f"{GATE}=true" in self.gates


PAIRS = {
    "v1.30": Pair("v1.30", "v1.30.3", "v1.30.6", "KUBE_APISERVER_V1_30_BINARY", "KUBE_SCHEDULER_BINARY"),
    "v1.36": Pair("v1.36", "v1.36.2", "v1.36.2", "KUBE_APISERVER_V1_36_BINARY", "KUBE_SCHEDULER_V1_36_BINARY",
                  gates=(f"{GATE}=true",)),
}


class MissingBinary(RuntimeError):
    """A binary the real control plane needs is not there; the message says how to get it."""


def _binary(env: str, component: str, version: str) -> str:
    path = os.environ.get(env)
    if not path:
        archive = f"{component}-{version}-linux-amd64.xz"
        raise MissingBinary(
            f"{env} is not set: the real-control-plane tests need {component} {version}. "
            f"`make test` and .ci/run set it with `.ci/{component} --env`, which unpacks {archive} "
            f"from the archives CI provides (where: that script) or from $CONTROL_PLANE_ARCHIVES; "
            f"or export {env}=/path/to/{component}")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise MissingBinary(f"{env}={path} is not an executable file")
    return path


def etcd_binary() -> str:
    """$ETCD_BINARY, else `etcd` on PATH (Debian's etcd-server, from .ci/install-tools)."""
    path = os.environ.get("ETCD_BINARY") or shutil.which("etcd")
    if not path:
        raise MissingBinary("etcd not found (set ETCD_BINARY or put etcd on PATH): the real-control-plane "
                            "tests start their own etcd; install Debian's etcd-server with "
                            "`sudo .ci/install-tools`")
    return path


def binaries(pair: Pair) -> tuple[str, str, str]:
    """(kube-apiserver, kube-scheduler, etcd) for a pair; MissingBinary otherwise."""
    return (_binary(pair.apiserver_env, "kube-apiserver", pair.apiserver),
            _binary(pair.scheduler_env, "kube-scheduler", pair.scheduler), etcd_binary())


# ---- certificates ----------------------------------------------------------------------


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Pki:
    """A throw-away CA in `directory` and the certificates it issues (ECDSA P-256)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = _name("extender-test-ca")
        self._cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(hours=1))
                      .not_valid_after(now + datetime.timedelta(days=2))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                     critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.ca_file = directory / "ca.crt"
        self.ca_pem = self._cert.public_bytes(serialization.Encoding.PEM)
        self.ca_file.write_bytes(self.ca_pem)

    def issue(self, name: str, common_name: str, organization: str | None = None,
              hosts: Iterable[str] = (), client: bool = False) -> tuple[Path, Path]:
        """A certificate for a server (`hosts`: IPs and DNS names) or a client; (cert, key) files."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, organization))
                   .issuer_name(self._cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client
                                                         else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_file, key_file = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_pem_key(key))
        key_file.chmod(0o600)
        return cert_file, key_file

    def key_pair(self, name: str) -> tuple[Path, Path]:
        """A bare key pair (the service-account signing key): (private, public) files."""
        key = ec.generate_private_key(ec.SECP256R1())
        private, public = self.dir / f"{name}.key", self.dir / f"{name}.pub"
        private.write_bytes(_pem_key(key))
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
        return private, public


# ---- a small client --------------------------------------------------------------------


# Users the tests authenticate as against a real API server (static tokens: kube-apiserver
# reads --token-auth-file at start only), with no rights until a test grants them some
# (`testing.realapi.RealReviews.grant`): the bearer tokens the extender's /explain and
# /drift check with a TokenReview.
TEST_USERS = {"t-reader": "reader", "t-viewer": "viewer", "t-team": "team-lead"}


class KubeClient:
    """JSON over HTTPS with a bearer token; one keep-alive connection per thread.
    `call` raises `testing.apiserver.ApiError` (code, reason, message) on a 4xx/5xx, as
    the double does, so scenario code catches the same exception for both."""

    def __init__(self, url: str, ca_file: Path, token: str) -> None:
        host, _, port = url.removeprefix("https://").partition(":")
        self.host, self.port, self.token = host, int(port), token
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self._local = threading.local()

    def _connection(self, timeout: float) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                                                  timeout=timeout)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def request(self, method: str, path: str, body: Any = None, query: dict | None = None,
                content_type: str = "application/json", timeout: float = 60.0) -> tuple[int, Any]:
        """(status, decoded JSON body or text); retried once on a dropped keep-alive."""
        url = path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._connection(timeout)
            try:
                conn.request(method, url, data, headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (ConnectionError, http.client.RemoteDisconnected, http.client.CannotSendRequest):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        try:
            return resp.status, json.loads(raw) if raw else {}
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    def call(self, method: str, path: str, body: Any = None, query: dict | None = None,
             content_type: str = "application/json", timeout: float = 60.0) -> Any:
        status, answer = self.request(method, path, body, query, content_type, timeout)
        if status >= 400:
            if isinstance(answer, dict):
                raise ApiError(status, str(answer.get("reason", "")), str(answer.get("message", answer)))
            raise ApiError(status, "", str(answer))
        return answer

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
              opened: Callable[[http.client.HTTPSConnection], None] | None = None) -> Iterator[dict]:
        """The events of one watch request, on a fresh connection of its own (`opened`
        is handed it, so that another thread can close it to end the watch)."""
        query = urlencode({"watch": "true", "resourceVersion": resource_version,
                           "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds})
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout_seconds + 30)
        if opened is not None:
            opened(conn)
        try:
            conn.request("GET", f"{path}?{query}", headers={"Authorization": f"Bearer {self.token}"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise ApiError(resp.status, "", resp.read().decode(errors="replace"))
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def kubeconfig(path: Path, url: str, ca_pem: bytes, token: str, user: str) -> Path:
    """A kubeconfig for `url` with a bearer token (the CA embedded)."""
    import base64

    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url,
                                                  "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


# ---- the control plane -----------------------------------------------------------------


class ControlPlane:
    """etcd + kube-apiserver of one version pair in `workdir`; see the module docstring."""

    def __init__(self, workdir: Path, pair: Pair, apiserver_binary: str, etcd: str,
                 extra_flags: Iterable[str] = ()) -> None:
        self.workdir, self.pair = workdir, pair
        self.apiserver_binary, self.etcd_binary = apiserver_binary, etcd
        self.extra_flags = list(extra_flags)
        self.pki = Pki(workdir / "pki")
        self.admin_token = secrets.token_hex(16)
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self.port = 0
        self.started_in = 0.0  # seconds from the etcd start to /readyz ok

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> ControlPlane:
        """etcd, then kube-apiserver; returns when /readyz is ok (RuntimeError with the
        logs otherwise). A port taken between choosing and binding it is retried."""
        began = time.monotonic()
        for attempt in range(3):
            self._start_etcd(timeout)
            try:
                self._start_apiserver(timeout)
                break
            except _PortTaken:
                self.stop()
                if attempt == 2:
                    raise
        self.started_in = time.monotonic() - began
        return self

    def _start_etcd(self, timeout: float) -> None:
        client, peer = free_port(), free_port()
        data = self.workdir / "etcd-data"
        shutil.rmtree(data, ignore_errors=True)
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.etcd = Process("etcd", [
            self.etcd_binary, "--name", "test", "--data-dir", str(data),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer}", "--log-level", "warn",
            # as kubeadm runs it: without progress notifications a quiet resource's watch
            # cache never advances, and kube-apiserver sends its watchers no bookmarks
            "--experimental-watch-progress-notify-interval=5s"],
            self.workdir / "etcd.log")

        def healthy() -> bool:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", client, timeout=2)
                conn.request("GET", "/health")
                return b'"true"' in conn.getresponse().read()
            except OSError:
                return False

        if not wait_for(lambda: healthy() or not self.etcd.alive(), timeout, interval=0.05) or not healthy():
            log = self.etcd.tail()
            self.etcd.stop()
            if "address already in use" in log:
                raise _PortTaken(log)
            raise RuntimeError(f"etcd did not become healthy:\n{log}")

    def _start_apiserver(self, timeout: float) -> None:
        pki = self.pki
        cert, key = pki.issue("apiserver", "kube-apiserver", hosts=[
            "127.0.0.1", "10.0.0.1", "localhost", "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"])
        sa_key, sa_pub = pki.key_pair("sa")
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f"{self.admin_token},kubernetes-admin,uid-admin,system:masters\n"
                          + "".join(f"{t},{user},uid-{user}\n" for t, user in TEST_USERS.items()))
        self.port = free_port()
        cmd = [
            self.apiserver_binary, f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", f"--secure-port={self.port}", "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
            f"--client-ca-file={pki.ca_file}", f"--token-auth-file={tokens}",
            f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            f"--cert-dir={self.workdir / 'certs'}",
            *self.pair.feature_gates, *self.extra_flags,
        ]
        self.apiserver = Process("kube-apiserver", cmd, self.workdir / "kube-apiserver.log")
        admin = self.admin()

        def ready() -> bool:
            try:
                return admin.request("GET", "/readyz", timeout=5) == (200, "ok")
            except (OSError, http.client.HTTPException):
                admin.close()
                return False

        if not wait_for(lambda: ready() or not self.apiserver.alive(), timeout, interval=0.1) or not ready():
            log = self.apiserver.tail(6000)
            self.apiserver.stop()
            if "address already in use" in log:
                raise _PortTaken(log)
            raise RuntimeError(f"kube-apiserver {self.pair.apiserver} did not become ready in {timeout:.0f} s:"
                               f"\n{log}\n--- etcd ---\n{self.etcd.tail() if self.etcd else ''}")

    def admin(self) -> KubeClient:
        """A client with the admin token (system:masters)."""
        return KubeClient(self.url, self.pki.ca_file, self.admin_token)

    def kubeconfig(self, path: Path, token: str | None = None, user: str = "admin") -> Path:
        return kubeconfig(path, self.url, self.pki.ca_pem, token or self.admin_token, user)

    def version(self) -> str:
        return self.admin().call("GET", "/version")["gitVersion"]

    def alive(self) -> bool:
        return all(p is not None and p.alive() for p in (self.etcd, self.apiserver))

    def stop(self) -> None:
        """kube-apiserver (SIGTERM: it shuts down gracefully in a few seconds), then etcd."""
        for proc in (self.apiserver, self.etcd):
            if proc is not None:
                proc.stop(timeout=30)

    def logs(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name} ({p.log}) ---\n{p.tail(chars)}" for p in (self.apiserver, self.etcd) if p)


class _PortTaken(RuntimeError):
    """A free port was taken by someone else before the process bound it."""
