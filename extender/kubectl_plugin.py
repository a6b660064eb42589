"""`kubectl extender`: why is my pod Pending, asked of the running extender.

    kubectl extender why POD [-n NAMESPACE] [-o table|json|yaml] [--all-nodes]
    kubectl extender explain -f pod.yaml [-n NAMESPACE] [-o table|json|yaml] [--all-nodes]

`why` explains a pod of the cluster (`GET /explain/NAMESPACE/POD`), `explain` a pod
from a file, e.g. one not created yet (`POST /explain`), both against the extender's
live state. The extender is reached like `kubectl get --raw` reaches a Service: through
the API server's service proxy with the user's kubeconfig (RBAC: `get` on
`services/proxy` of the extender's Service; manifests/components/explain has a
ClusterRole), or with `--port-forward` (runs `kubectl port-forward` to the Service) or
`--url` (a direct URL, e.g. a port-forward you started). `why` first reads the pod with
the user's own credentials, so a user who may not read it is told so, as kubectl would.

The endpoint checks who asks (a TokenReview and a SubjectAccessReview: docs/operate/
security.md): the plugin sends the kubeconfig's bearer token (a static token, an exec
plugin's or an OIDC provider's), or `--token`, in `Authorization` (direct) and in
`X-Extender-Authorization` (the API server removes `Authorization` before it proxies).
A kubeconfig that authenticates with a client certificate has no token to send.

A console script of the package (`kubectl-extender` on PATH makes it a kubectl plugin).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import orjson

DEFAULT_SERVICE = "scheduling-extender/extended-scheduler-metrics:metrics"
SERVICE_ENV = "KUBECTL_EXTENDER_SERVICE"
URL_ENV = "KUBECTL_EXTENDER_URL"
TOKEN_ENV = "KUBECTL_EXTENDER_TOKEN"
RETRIES = 3  # 429 / 503 with a Retry-After of at most MAX_WAIT seconds are retried
MAX_WAIT = 10.0
_FORWARDING = re.compile(rb"Forwarding from (?:127\.0\.0\.1|\[::1\]):(\d+)")


class PluginError(Exception):
    """Printed as `error: ...`, exit 1 (as kubectl does)."""


# --- transports ------------------------------------------------------------------------


class Response:
    def __init__(self, status: int, body: bytes, retry_after: str | None) -> None:
        self.status, self.body, self.retry_after = status, body, retry_after


def credentials(token: str) -> dict[str, str]:
    """The headers that carry the bearer token to the extender (none without one)."""
    return {"Authorization": f"Bearer {token}", "X-Extender-Authorization": f"Bearer {token}"} if token else {}


class DirectTransport:
    """Plain HTTP to a URL (`--url`, `--port-forward`)."""

    def __init__(self, base: str, timeout: float, token: str = "") -> None:
        self.base = base.rstrip("/")
        self.timeout = timeout
        self.token = token

    def describe(self) -> str:
        return self.base

    def send(self, method: str, path: str, body: bytes | None) -> Response:
        request = urllib.request.Request(self.base + path, data=body, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json",
                                                  **credentials(self.token)})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310 - user's URL
                return Response(answer.status, answer.read(), answer.headers.get("Retry-After"))
        except urllib.error.HTTPError as exc:
            return Response(exc.code, exc.read(), exc.headers.get("Retry-After"))
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PluginError(f"cannot reach the extender at {self.base}: {reason}") from None


class ProxyTransport:
    """Through the API server's service proxy, with the kubeconfig's credentials."""

    def __init__(self, api_client: Any, service: str, timeout: float, token: str = "") -> None:
        self.api_client = api_client
        self.namespace, self.name, self.port = parse_service(service)
        self.timeout = timeout
        self.token = token

    @property
    def prefix(self) -> str:
        target = f"{self.name}:{self.port}" if self.port else self.name
        return f"/api/v1/namespaces/{quote(self.namespace, safe='')}/services/{quote(target, safe=':')}/proxy"

    def describe(self) -> str:
        return f"service {self.namespace}/{self.name}{':' + self.port if self.port else ''} via the API server"

    def send(self, method: str, path: str, body: bytes | None) -> Response:
        resource, _, params = path.partition("?")
        try:
            request = self.api_client.param_serialize(
                method, self.prefix + resource, query_params=parse_qsl(params),
                header_params={"Content-Type": "application/json", "Accept": "application/json",
                               **{k: v for k, v in credentials(self.token).items() if k != "Authorization"}},
                body=orjson.loads(body) if body else None, auth_settings=["BearerToken"])
            response = self.api_client.call_api(*request, _request_timeout=self.timeout)
            data = response.read()
        except Exception as exc:  # unreachable API server, TLS, timeout
            raise PluginError(f"cannot reach the API server: {exc}") from None
        return Response(response.status, data, response.headers.get("Retry-After"))


def parse_service(text: str) -> tuple[str, str, str]:
    """`NAMESPACE/NAME[:PORT]` (PORT a name or a number)."""
    namespace, slash, rest = text.partition("/")
    name, _, port = rest.partition(":")
    if not slash or not namespace or not name:
        raise PluginError(f"--service: expected NAMESPACE/NAME[:PORT], got {text!r}")
    return namespace, name, port


# --- kubeconfig ------------------------------------------------------------------------


def load_kubeconfig(path: str | None, context: str | None) -> tuple[Any, str]:
    """(ApiClient, the context's namespace or "default"), as kubectl reads them."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        _, active = config.list_kube_config_contexts(config_file=path)
        if context:
            contexts, _ = config.list_kube_config_contexts(config_file=path)
            active = next((c for c in contexts if c["name"] == context), active)
    except Exception as exc:  # ConfigException, missing file, bad YAML
        raise PluginError(f"cannot load the kubeconfig: {exc}") from None
    namespace = (active or {}).get("context", {}).get("namespace") or "default"
    return client.ApiClient(configuration), namespace


def kubeconfig_token(api_client: Any) -> str:
    """The bearer token the kubeconfig authenticates with ("" for a client certificate),
    refreshed first when it comes from an exec plugin."""
    if api_client is None:
        return ""
    setting = api_client.configuration.auth_settings().get("BearerToken") or {}
    scheme, _, token = str(setting.get("value") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def check_pod(api_client: Any, namespace: str, name: str, timeout: float) -> None:
    """Read the pod with the user's credentials: not found and forbidden are said as
    kubectl says them, before the extender is asked."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        response = client.CoreV1Api(api_client).read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=timeout)
        response.release_conn()
    except ApiException as exc:
        message = _status_message(exc.body) or f"{exc.status} {exc.reason}"
        kind = {404: "NotFound", 403: "Forbidden", 401: "Unauthorized"}.get(exc.status, str(exc.status))
        raise PluginError(f"Error from server ({kind}): {message}") from None
    except Exception as exc:
        raise PluginError(f"cannot reach the API server: {exc}") from None


def _status_message(body: Any) -> str:
    try:
        data = orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError):
        return body.decode(errors="replace")[:300] if isinstance(body, bytes) else ""
    if isinstance(data, dict):
        return str(data.get("message") or data.get("error") or "")
    return ""


# --- port-forward ----------------------------------------------------------------------


class PortForward:
    """`kubectl port-forward` to the Service on a free local port, for one command."""

    def __init__(self, service: str, kubeconfig: str | None, context: str | None, timeout: float) -> None:
        namespace, name, port = parse_service(service)
        kubectl = shutil.which(os.environ.get("KUBECTL", "kubectl"))
        if kubectl is None:
            raise PluginError("--port-forward needs kubectl on PATH")
        cmd = [kubectl, "port-forward", "-n", namespace, f"service/{name}", f":{port or '8889'}"]
        if kubeconfig:
            cmd += ["--kubeconfig", kubeconfig]
        if context:
            cmd += ["--context", context]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            match = _FORWARDING.search(line)
            if match:
                self.url = f"http://127.0.0.1:{int(match.group(1))}"
                return
            if not line and self.proc.poll() is not None:
                break
        self.close()
        err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
        raise PluginError(f"kubectl port-forward failed: {err or line.decode(errors='replace') or 'no port'}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# --- asking ----------------------------------------------------------------------------


def ask(transport: Any, method: str, path: str, body: bytes | None = None) -> dict[str, Any]:
    """One explanation; 429 and 503 with a short Retry-After are retried."""
    for attempt in range(RETRIES + 1):
        response = transport.send(method, path, body)
        if response.status == 200:
            try:
                return orjson.loads(response.body)
            except orjson.JSONDecodeError:
                raise PluginError(f"{transport.describe()} answered something other than JSON") from None
        wait = _seconds(response.retry_after)
        if response.status in (429, 503) and wait is not None and wait <= MAX_WAIT and attempt < RETRIES:
            time.sleep(wait)
            continue
        message = _status_message(response.body) or f"HTTP {response.status}"
        if response.status == 401:
            message += (" (the extender checks a bearer token: give --token when the kubeconfig "
                        "authenticates with a client certificate)")
        if response.status in (502, 503) and "explain" not in message and "cluster state" not in message:
            message += (" (is the extender running with --explain-endpoint=true, and does its "
                        "NetworkPolicy admit the API server? see manifests/components/explain)")
        raise PluginError(f"{transport.describe()}: {message}")
    raise PluginError("unreachable")  # pragma: no cover - the loop returns or raises


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def query(ns: argparse.Namespace) -> str:
    params = {}
    if ns.all_nodes:
        params["nodes"] = "all"
    if ns.examples is not None:
        params["examples"] = str(ns.examples)
    return "?" + urlencode(params) if params else ""


def read_pods(path: str, namespace: str) -> list[dict[str, Any]]:
    from extender.state.loader import ClusterFileError, parse_documents

    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise PluginError(f"cannot read {path}: {exc.strerror}") from None
    try:
        objects = parse_documents(data, path)
    except ClusterFileError as exc:
        raise PluginError(str(exc)) from None
    pods = [o for o in objects if o.get("kind", "Pod") == "Pod"]
    if not pods:
        raise PluginError(f"{path}: no Pod objects found")
    for pod in pods:
        meta = pod.setdefault("metadata", {})
        if not meta.get("namespace"):
            meta["namespace"] = namespace
    return pods


def render(report: dict[str, Any], output: str, all_nodes: bool) -> str:
    if output == "json":
        return orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n"
    if output == "yaml":
        import yaml

        return yaml.safe_dump(report, sort_keys=False)
    from extender.explain import render_summary, render_table

    text = render_summary(report)
    if all_nodes:
        text += render_table(report)
    return text


# --- the command line ------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl extender",
        description="Ask the scheduling extender why a pod is Pending, from its live cluster state.")
    sub = parser.add_subparsers(dest="command", required=True)
    why = sub.add_parser("why", help="explain a pod of the cluster (GET /explain/NAMESPACE/POD)")
    why.add_argument("pod", metavar="POD")
    exp = sub.add_parser("explain", help="explain pods from a file, e.g. not created yet (POST /explain)")
    exp.add_argument("-f", "--filename", required=True, help="pod manifest (YAML or JSON; - for stdin)")
    for cmd in (why, exp):
        cmd.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
        cmd.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
        cmd.add_argument("--all-nodes", action="store_true", help="every node, not the summary's examples")
        cmd.add_argument("--examples", type=int, help="example nodes per reason group (default 3, at most 50)")
        cmd.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
        cmd.add_argument("--context", help="kubeconfig context")
        cmd.add_argument("--service", default=os.environ.get(SERVICE_ENV, DEFAULT_SERVICE),
                         help=f"the extender's Service, NAMESPACE/NAME[:PORT] (env {SERVICE_ENV}; "
                         f"default {DEFAULT_SERVICE})")
        how = cmd.add_mutually_exclusive_group()
        how.add_argument("--url", default=os.environ.get(URL_ENV),
                         help=f"reach the extender's side listener directly, e.g. http://127.0.0.1:8889 (env {URL_ENV})")
        how.add_argument("--port-forward", action="store_true", help="run kubectl port-forward to the Service")
        cmd.add_argument("--request-timeout", type=float, default=30.0, help="seconds per request (default 30)")
        cmd.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                         help=f"bearer token the extender checks (env {TOKEN_ENV}; default: the "
                         "kubeconfig's, if it has one)")
    return parser


def run(ns: argparse.Namespace) -> int:
    api_client, namespace = None, ns.namespace
    if not ns.url or ns.command == "why":
        try:
            api_client, context_namespace = load_kubeconfig(ns.kubeconfig, ns.context)
        except PluginError:
            if not ns.url:
                raise
            context_namespace = "default"  # --url without a usable kubeconfig: no pod check
        namespace = namespace or context_namespace
    namespace = namespace or "default"
    forward = None
    token = ns.token or kubeconfig_token(api_client)
    try:
        if ns.url:
            transport: Any = DirectTransport(ns.url, ns.request_timeout, token)
        elif ns.port_forward:
            forward = PortForward(ns.service, ns.kubeconfig, ns.context, ns.request_timeout)
            transport = DirectTransport(forward.url, ns.request_timeout, token)
        else:
            transport = ProxyTransport(api_client, ns.service, ns.request_timeout, token)
        if ns.command == "why":
            if api_client is not None:
                check_pod(api_client, namespace, ns.pod, ns.request_timeout)
            path = f"/explain/{quote(namespace, safe='')}/{quote(ns.pod, safe='')}{query(ns)}"
            report = ask(transport, "GET", path)
        else:
            report = {"results": []}
            for pod in read_pods(ns.filename, namespace):
                answer = ask(transport, "POST", "/explain" + query(ns), orjson.dumps(pod))
                report["results"] += answer["results"]
                report.update({k: v for k, v in answer.items() if k != "results"})
    finally:
        if forward is not None:
            forward.close()
    sys.stdout.write(render(report, ns.output, ns.all_nodes))
    return 0


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return run(ns)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
