"""`kubectl extender`: why is my pod Pending, asked of the running extender.

    kubectl extender why POD [-n NAMESPACE] [-o table|json|yaml] [--all-nodes]
    kubectl extender explain -f pod.yaml [-n NAMESPACE] [-o table|json|yaml] [--all-nodes]
    kubectl extender drift [-n NAMESPACE | -A] [-o table|json] [--severity S,...]
    kubectl extender what-if --taint NODE|-l SELECTOR KEY=VALUE:EFFECT[-] [--label ...]
                             [--cordon ...] [-f pods.yaml] [-o table|json]

`why` explains a pod of the cluster (`GET /explain/NAMESPACE/POD`), `explain` a pod
from a file, e.g. one not created yet (`POST /explain`), both against the extender's
live state; `drift` lists the running pods whose node no longer satisfies them
(`GET /drift`, docs/operate/drift.md); `what-if` asks what a taint, label, cordon, node
removal or volume annotation would do before it is made (`POST /whatif`,
docs/operate/what-if.md). The extender is reached like `kubectl get --raw`
reaches a Service: through the API server's service proxy, by way of `kubectl proxy` with
the user's kubeconfig (every kind of credential kubectl knows; RBAC: `get` on
`services/proxy` of the extender's Service; manifests/components/explain has a
ClusterRole), or with `--port-forward` (runs `kubectl port-forward` to the Service) or
`--url` (a direct URL, e.g. a port-forward you started). `why` first reads the pod with
the user's own credentials, so a user who may not read it is told so, as kubectl would.

The standard library only (issue 36): kubectl does the talking to the API server and
reads YAML pod files (`kubectl patch --local`), so the plugin installs on its own
(plugin/pyproject.toml, the krew manifest of a release) without the server's dependencies.
`kubectl-extender` on PATH makes it a kubectl plugin.

The endpoint checks who asks (a TokenReview and a SubjectAccessReview: docs/operate/
security.md): the plugin sends the kubeconfig's bearer token (a static token, or the one
an exec plugin such as an OIDC or cloud login helper prints), or `--token`, in
`Authorization` (direct) and in `X-Extender-Authorization` (through the API server's
proxy, which takes `Authorization` for itself). A kubeconfig that authenticates with a
client certificate has no token to send.
"""

from __future__ import annotations

import argparse
import json
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
from urllib.parse import quote, urlencode

from kubectl_extender.whatif import USAGE, FlagError, add_change_flags, render_whatif, split_changes

DEFAULT_SERVICE = "scheduling-extender/extended-scheduler-metrics:metrics"
SERVICE_ENV = "KUBECTL_EXTENDER_SERVICE"
URL_ENV = "KUBECTL_EXTENDER_URL"
TOKEN_ENV = "KUBECTL_EXTENDER_TOKEN"
RETRIES = 3  # 429 / 503 with a Retry-After of at most MAX_WAIT seconds are retried
MAX_WAIT = 10.0
_FORWARDING = re.compile(rb"Forwarding from (?:127\.0\.0\.1|\[::1\]):(\d+)")
_SERVING = re.compile(rb"Starting to serve on 127\.0\.0\.1:(\d+)")


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

    def headers(self) -> dict[str, str]:
        return credentials(self.token)

    def send(self, method: str, path: str, body: bytes | None) -> Response:
        request = urllib.request.Request(self.base + path, data=body, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json",
                                                  **self.headers()})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310 - user's URL
                return Response(answer.status, answer.read(), answer.headers.get("Retry-After"))
        except urllib.error.HTTPError as exc:
            return Response(exc.code, exc.read(), exc.headers.get("Retry-After"))
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PluginError(f"cannot reach the extender at {self.base}: {reason}") from None


class ProxyTransport(DirectTransport):
    """Through the API server's service proxy, reached by way of `kubectl proxy` (which
    carries the kubeconfig's credentials)."""

    def __init__(self, proxy_url: str | None, service: str, timeout: float, token: str = "") -> None:
        self.namespace, self.name, self.port = parse_service(service)
        super().__init__((proxy_url or "") + self.prefix, timeout, token)

    def headers(self) -> dict[str, str]:
        """`kubectl proxy` authenticates to the API server itself; the extender's token
        rides in the header the API server passes on."""
        return {k: v for k, v in credentials(self.token).items() if k != "Authorization"}

    @property
    def prefix(self) -> str:
        target = f"{self.name}:{self.port}" if self.port else self.name
        return f"/api/v1/namespaces/{quote(self.namespace, safe='')}/services/{quote(target, safe=':')}/proxy"

    def describe(self) -> str:
        return f"service {self.namespace}/{self.name}{':' + self.port if self.port else ''} via the API server"


def parse_service(text: str) -> tuple[str, str, str]:
    """`NAMESPACE/NAME[:PORT]` (PORT a name or a number)."""
    namespace, slash, rest = text.partition("/")
    name, _, port = rest.partition(":")
    if not slash or not namespace or not name:
        raise PluginError(f"--service: expected NAMESPACE/NAME[:PORT], got {text!r}")
    return namespace, name, port


# --- kubeconfig ------------------------------------------------------------------------


class Kubectl:
    """The kubectl the plugin runs (`$KUBECTL`, else the one on PATH), with the user's
    `--kubeconfig` and `--context`."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        found = shutil.which(os.environ.get("KUBECTL", "kubectl"))
        if found is None:
            raise PluginError("kubectl not found on PATH (or set KUBECTL)")
        self.path = found
        self.flags = [*(["--kubeconfig", kubeconfig] if kubeconfig else []),
                      *(["--context", context] if context else [])]

    def run(self, *args: str, stdin: bytes | None = None) -> bytes:
        proc = subprocess.run([self.path, *args, *self.flags], input=stdin, capture_output=True, timeout=120)
        if proc.returncode != 0:
            raise PluginError(proc.stderr.decode(errors="replace").strip().removeprefix("error: ")
                              or f"kubectl {args[0]} exited {proc.returncode}")
        return proc.stdout

    def namespace(self) -> str:
        """The context's namespace, or "default", as kubectl reads it."""
        try:
            out = self.run("config", "view", "--minify", "-o", "jsonpath={.contexts[0].context.namespace}")
        except PluginError as exc:
            raise PluginError(f"cannot load the kubeconfig: {exc}") from None
        return out.decode().strip() or "default"


def kubeconfig_token(kubectl: Kubectl | None) -> str:
    """The bearer token the kubeconfig authenticates with ("" for a client certificate or
    none): the user's `token`, else the token its `exec` credential plugin prints (run as
    kubectl would, ExecCredential on stdout)."""
    if kubectl is None:
        return ""
    try:
        view = json.loads(kubectl.run("config", "view", "--raw", "--minify", "-o", "json"))
    except (PluginError, ValueError):
        return ""
    user = ((view.get("users") or [{}])[0] or {}).get("user") or {}
    if user.get("token"):
        return str(user["token"])
    spec = user.get("exec")
    if not isinstance(spec, dict) or not spec.get("command"):
        return ""
    env = {**os.environ, **{e["name"]: e["value"] for e in spec.get("env") or [] if "name" in e and "value" in e}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": spec.get("apiVersion", ""), "kind": "ExecCredential",
                                             "spec": {"interactive": False}})
    try:
        proc = subprocess.run([spec["command"], *(spec.get("args") or [])], env=env, capture_output=True, timeout=60)
        status = json.loads(proc.stdout).get("status") or {} if proc.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return ""
    return str(status.get("token") or "")


def check_pod(proxy_url: str, namespace: str, name: str, timeout: float) -> None:
    """Read the pod with the user's credentials: not found and forbidden are said as
    kubectl says them, before the extender is asked."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    response = DirectTransport(proxy_url, timeout).send("GET", path, None)
    if response.status == 200:
        return
    message = _status_message(response.body) or f"HTTP {response.status}"
    kind = {404: "NotFound", 403: "Forbidden", 401: "Unauthorized"}.get(response.status, str(response.status))
    raise PluginError(f"Error from server ({kind}): {message}")


def _status_message(body: Any) -> str:
    try:
        data = json.loads(body)
    except (ValueError, TypeError):
        return body.decode(errors="replace")[:300] if isinstance(body, bytes) else ""
    if isinstance(data, dict):
        return str(data.get("message") or data.get("error") or "")
    return ""


# --- port-forward ----------------------------------------------------------------------


class Background:
    """A kubectl command that serves on a local port it prints (`port-forward`, `proxy`),
    for one command of the plugin."""

    def __init__(self, kubectl: Kubectl, args: list[str], printed: re.Pattern[bytes], timeout: float) -> None:
        self.proc = subprocess.Popen([kubectl.path, *args, *kubectl.flags], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            match = printed.search(line)
            if match:
                self.url = f"http://127.0.0.1:{int(match.group(1))}"
                return
            if not line and self.proc.poll() is not None:
                break
        self.close()
        err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
        raise PluginError(f"kubectl {args[0]} failed: {err or line.decode(errors='replace') or 'no port'}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def port_forward(kubectl: Kubectl, service: str, timeout: float) -> Background:
    """`kubectl port-forward` to the Service on a free local port."""
    namespace, name, port = parse_service(service)
    return Background(kubectl, ["port-forward", "-n", namespace, f"service/{name}", f":{port or '8889'}"],
                      _FORWARDING, timeout)


def api_proxy(kubectl: Kubectl, timeout: float) -> Background:
    """`kubectl proxy` on a free local port: the API server with the user's credentials."""
    return Background(kubectl, ["proxy", "--port=0"], _SERVING, timeout)


# --- asking ----------------------------------------------------------------------------


def ask(transport: Any, method: str, path: str, body: bytes | None = None) -> dict[str, Any]:
    """One explanation; 429 and 503 with a short Retry-After are retried."""
    for attempt in range(RETRIES + 1):
        response = transport.send(method, path, body)
        if response.status == 200:
            try:
                return json.loads(response.body)
            except ValueError:
                raise PluginError(f"{transport.describe()} answered something other than JSON") from None
        wait = _seconds(response.retry_after)
        if response.status in (429, 503) and wait is not None and wait <= MAX_WAIT and attempt < RETRIES:
            time.sleep(wait)
            continue
        message = _status_message(response.body) or f"HTTP {response.status}"
        if response.status == 401:
            message += (" (the extender checks a bearer token: give --token when the kubeconfig "
                        "authenticates with a client certificate)")
        if response.status in (502, 503) and not any(w in message for w in ("explain", "drift", "cluster state",
                                                                             "what-if")):
            flag = "--drift-endpoint" if path.startswith("/drift") else "--whatif-endpoint" \
                if path.startswith("/whatif") else "--explain-endpoint"
            message += (f" (is the extender running with {flag}=true, and does its "
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


def read_pods(kubectl: Kubectl, path: str, namespace: str) -> list[dict[str, Any]]:
    """The Pods of a YAML or JSON file (`-` for stdin), as JSON: kubectl reads the file
    (`kubectl patch --local` with an empty patch prints each object unchanged)."""
    pods = [o for o in read_objects(kubectl, path, namespace) if o.get("kind", "Pod") == "Pod"]
    if not pods:
        raise PluginError(f"{path}: no Pod objects found")
    return pods


def read_objects(kubectl: Kubectl | None, path: str, namespace: str) -> list[dict[str, Any]]:
    """Every object of a YAML or JSON file (`-` for stdin), its namespace defaulted."""
    if kubectl is None:
        raise PluginError("kubectl is needed to read -f files")
    if path != "-" and not Path(path).is_file():
        raise PluginError(f"cannot read {path}: no such file")
    data = sys.stdin.buffer.read() if path == "-" else None
    out = kubectl.run("patch", "--local", "-f", path, "--type", "merge", "-p", "{}", "-o", "json", stdin=data)
    decoder, text, objects, at = json.JSONDecoder(), out.decode(), [], 0
    while text[at:].strip():
        obj, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        objects += obj.get("items", []) if obj.get("kind", "").endswith("List") else [obj]
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if not meta.get("namespace"):
            meta["namespace"] = namespace
    return objects


def drift_query(ns: argparse.Namespace, namespace: str) -> str:
    params = {} if ns.all_namespaces else {"namespace": namespace}
    if ns.severity:
        params["severity"] = ns.severity
    if ns.limit is not None:
        params["limit"] = str(ns.limit)
    return "/drift" + ("?" + urlencode(params) if params else "")


def render_drift(report: dict[str, Any], all_namespaces: bool) -> str:
    """`kubectl get`-style table: a row per violation, its detail lines under it."""
    head = ("NAMESPACE", "POD", "NODE", "SEVERITY", "PLUGIN", "REASON")
    start = 0 if all_namespaces else 1
    rows: list[tuple[str, ...]] = []
    details: list[list[str]] = []
    pods = [*report.get("pods", ()), *(report.get("spread") or {}).get("pods", ())]
    for pod in pods:
        for v in pod["violations"]:
            rows.append((pod["namespace"], pod["name"], pod["node"], v["severity"], v["plugin"], v["reason"]))
            details.append(list(v.get("details") or ()))
    if not rows:
        where = "any namespace" if all_namespaces else "this namespace"
        return f"No pods in {where} run on a node that no longer satisfies them.\n"
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(start, len(head) - 1)]

    def line(cells: tuple[str, ...]) -> str:
        return ("   ".join(c.ljust(w) for c, w in zip(cells[start:-1], widths, strict=True)) + "   " + cells[-1]).rstrip()

    indent = " " * (sum(widths) + 3 * len(widths))
    out = [line(head)]
    for row, lines in zip(rows, details, strict=True):
        out.append(line(row))
        out += [indent + d for d in lines]
    omitted = report.get("omittedPods") or 0
    if omitted:
        out.append(f"... {omitted} more pods (--limit)")
    return "\n".join(out) + "\n"


def render(report: dict[str, Any], output: str, all_nodes: bool) -> str:
    from kubectl_extender.render import render_summary, render_table, to_yaml

    if output == "json":
        return json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    if output == "yaml":
        return to_yaml(report)

    text = render_summary(report)
    if all_nodes:
        text += render_table(report)
    return text


# --- the command line ------------------------------------------------------------------


def command_name(argv0: str) -> str:
    """How kubectl was asked for this plugin, for the usage lines: `kubectl extender` (the
    `kubectl-extender` script of pip) or, installed by krew as the plugin
    `scheduling-extender` (a link named `kubectl-scheduling_extender`), `kubectl
    scheduling-extender`; kubectl reads `_` in a plugin's file name as `-`."""
    name = Path(argv0).name
    if name.startswith("kubectl-"):
        return "kubectl " + name.removeprefix("kubectl-").replace("_", "-")
    return "kubectl extender"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=command_name(sys.argv[0]),
        description="Ask the scheduling extender why a pod is Pending, or which running pods no longer "
        "fit their node, from its live cluster state.")
    sub = parser.add_subparsers(dest="command", required=True)
    why = sub.add_parser("why", help="explain a pod of the cluster (GET /explain/NAMESPACE/POD)")
    why.add_argument("pod", metavar="POD")
    exp = sub.add_parser("explain", help="explain pods from a file, e.g. not created yet (POST /explain)")
    exp.add_argument("-f", "--filename", required=True, help="pod manifest (YAML or JSON; - for stdin)")
    drift = sub.add_parser("drift", help="running pods whose node no longer satisfies them (GET /drift)")
    drift.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    drift.add_argument("--severity", help="required, evicting, preferred (comma-separated; default all)")
    drift.add_argument("--limit", type=int, help="at most this many pods (default 1000)")
    drift.add_argument("-o", "--output", choices=("table", "json"), default="table")
    wif = sub.add_parser("what-if", help="what a taint, label, cordon or node removal would do, before it is "
                         "made (POST /whatif)", epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    wif.add_argument("-f", "--filename", action="append",
                     help="pods or workloads (YAML or JSON) to place after the change (repeatable)")
    wif.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_change_flags(wif)
    for cmd in (why, exp):
        cmd.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
        cmd.add_argument("--all-nodes", action="store_true", help="every node, not the summary's examples")
        cmd.add_argument("--examples", type=int, help="example nodes per reason group (default 3, at most 50)")
    for cmd in (why, exp, drift, wif):
        cmd.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
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
    try:
        kubectl: Kubectl | None = Kubectl(ns.kubeconfig, ns.context)
    except PluginError:
        if not (ns.url and (ns.command in ("why", "drift") or (ns.command == "what-if" and not ns.filename))):
            raise
        kubectl = None  # --url asks without kubectl; only the pod check and -f need it
    namespace, proxy, forward = ns.namespace, None, None
    try:
        if kubectl is not None:  # the context's namespace is the default, --url or not
            try:
                namespace = namespace or kubectl.namespace()
                if ns.command == "why" or not (ns.url or ns.port_forward):
                    proxy = api_proxy(kubectl, ns.request_timeout)
            except PluginError:
                if not ns.url:
                    raise
                # --url without a usable kubeconfig: no pod check
        namespace = namespace or "default"
        token = ns.token or kubeconfig_token(kubectl)
        if ns.url:
            transport: Any = DirectTransport(ns.url, ns.request_timeout, token)
        elif ns.port_forward:
            forward = port_forward(kubectl, ns.service, ns.request_timeout)
            transport = DirectTransport(forward.url, ns.request_timeout, token)
        else:
            transport = ProxyTransport(proxy.url, ns.service, ns.request_timeout, token)
        if ns.command == "what-if":
            pods = [p for path in ns.filename or () for p in read_objects(kubectl, path, namespace)]
            body = {"changes": ns.changes, **({"pods": pods} if pods else {})}
            answer = ask(transport, "POST", "/whatif", json.dumps(body).encode())
            sys.stdout.write(json.dumps(answer, indent=2, ensure_ascii=False) + "\n" if ns.output == "json"
                             else render_whatif(answer))
            return 0
        if ns.command == "drift":
            report = ask(transport, "GET", drift_query(ns, namespace))
            if ns.output == "json":
                sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
            else:
                sys.stdout.write(render_drift(report, ns.all_namespaces))
            return 0
        if ns.command == "why":
            if proxy is not None:
                check_pod(proxy.url, namespace, ns.pod, ns.request_timeout)
            path = f"/explain/{quote(namespace, safe='')}/{quote(ns.pod, safe='')}{query(ns)}"
            report = ask(transport, "GET", path)
        else:
            report = {"results": []}
            for pod in read_pods(kubectl, ns.filename, namespace):
                answer = ask(transport, "POST", "/explain" + query(ns), json.dumps(pod).encode())
                report["results"] += answer["results"]
                report.update({k: v for k, v in answer.items() if k != "results"})
    finally:
        for background in (forward, proxy):
            if background is not None:
                background.close()
    sys.stdout.write(render(report, ns.output, ns.all_nodes))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    changes: list[dict[str, Any]] = []
    if argv[:1] == ["what-if"]:
        try:
            changes, rest = split_changes(argv[1:])
        except FlagError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        argv = ["what-if", *rest]
        if not changes and not {"-h", "--help"} & set(rest):
            print("error: what-if: give at least one change (--taint, --label, --cordon, --uncordon, "
                  "--remove-node, --annotate-volume)", file=sys.stderr)
            return 1
    ns = build_parser().parse_args(argv)
    ns.changes = changes
    try:
        return run(ns)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
