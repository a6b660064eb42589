"""The admission webhook as kube-apiserver calls it (tests/e2e/test_real_webhook.py).

`register(api, url, ca_pem)` registers the ValidatingWebhookConfiguration that
`kubectl kustomize manifests/overlays/with-webhook` renders, as rendered (name, rules,
`matchConditions`, `namespaceSelector`, `failurePolicy`, `timeoutSeconds`, `sideEffects`)
except `clientConfig`: a URL on this machine and the test CA as `caBundle`, in place of
the Service and cert-manager's injected CA. `effective(api)` waits until the API server
calls it (its configuration informer takes a moment). `Silent` is a webhook that takes
the connection and the review and never answers: what the API server then does is its
`timeoutSeconds` and `failurePolicy`.
"""

from __future__ import annotations

import base64
import copy
import socket
import ssl
import time
from typing import Any

from testing.apiserver import ApiError
from testing.controlplane import Pki
from testing.live import free_port
from testing.realapi import KINDS, RealApi, path_of, resource_of
from testing.realcluster import Acceptor, rendered_kind

NAME = "scheduling-extender"
# a pod the validator always refuses (examples/invalid/pod-gt-leading-zero.yaml's annotation)
PROBE_ANNOTATION = '[{"key": "node.example.com/sla", "operator": "Gt", "value": "08", "effect": "NoSchedule"}]'


def rendered_configuration() -> dict:
    (config,) = rendered_kind("ValidatingWebhookConfiguration")
    return config


def configuration(url: str, ca_pem: bytes, **changes: Any) -> dict:
    """The rendered configuration with `clientConfig` pointing at `url`; `changes` are
    set on its one webhook (e.g. failurePolicy="Fail") where a test needs another value."""
    config = copy.deepcopy(rendered_configuration())
    config["metadata"].pop("annotations", None)  # cert-manager's CA injection
    (hook,) = config["webhooks"]
    hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
    hook.update(changes)
    return config


def register(api: RealApi, url: str, ca_pem: bytes, **changes: Any) -> dict:
    """Create (or replace) the configuration, then wait until it is in effect."""
    config = configuration(url, ca_pem, **changes)
    existing = api.get("validatingwebhookconfigurations", NAME)
    if existing is not None:
        config["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        stored = api.update("validatingwebhookconfigurations", config)
    else:
        stored = api.create("validatingwebhookconfigurations", config)
    return stored


def probe_pod(name: str = "webhook-probe") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"scheduling-extender.io/tolerations": PROBE_ANNOTATION}},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/app:1"}]}}


def dry_run_create(api: RealApi, obj: dict) -> Any:
    """POST with dryRun=All: admission runs, nothing is stored."""
    resource = resource_of(obj)
    namespace = obj["metadata"].get("namespace") or "default" if KINDS[resource].namespaced else ""
    return api.client.call("POST", path_of(resource, namespace), obj, query={"dryRun": "All"})


def effective(api: RealApi, refused_with: str, timeout: float = 60.0) -> str:
    """Until a dry-run create of the probe pod is refused with `refused_with` in the
    message (the API server calls the newly registered webhook); that message."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            dry_run_create(api, probe_pod())
            last = "admitted"
        except ApiError as exc:
            last = str(exc)
            if refused_with in last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"the webhook configuration never took effect; last answer: {last}")


class Silent(Acceptor):
    """An HTTPS server that reads each request and never answers (until `stop`): it
    records the request lines (the API server adds `?timeout=Ns` from `timeoutSeconds`)."""

    def __init__(self, pki: Pki) -> None:
        cert, key = pki.issue("silent-webhook", "silent-webhook", hosts=["127.0.0.1"])
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.requests: list[str] = []
        self._held: list[socket.socket] = []
        super().__init__("127.0.0.1", "silent-webhook")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/validate"

    def handle(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
            tls.settimeout(30)
            head = tls.recv(65536).decode(errors="replace")
            self.requests.append(head.split("\r\n", 1)[0])
            self._held.append(tls)  # never answered
        except OSError:
            conn.close()

    def stop(self) -> None:
        super().stop()
        for conn in self._held:
            conn.close()


def closed_port_url() -> str:
    """A URL nothing listens on (the webhook is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"https://127.0.0.1:{port}/validate"


def serving_flags(pki: Pki) -> list[str]:
    """`extender serve` flags for its webhook listener on a free loopback port, with a
    serving certificate for 127.0.0.1 (what cert-manager issues for the Service's name)
    signed by the test CA that `caBundle` carries; the URL is the last flag's pair."""
    cert, key = pki.issue("extender-webhook", "scheduling-extender-webhook", hosts=["127.0.0.1"])
    return ["--webhook-listen", f"127.0.0.1:{free_port()}", "--tls-cert-file", str(cert),
            "--tls-private-key-file", str(key)]


def url_of(flags: list[str]) -> str:
    return f"https://{flags[flags.index('--webhook-listen') + 1]}/validate"
