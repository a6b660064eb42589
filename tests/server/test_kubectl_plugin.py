"""`kubectl extender` against a running extender (`extender serve --kubeconfig`, live
state from the API-server double), reached through the double's service proxy with a
kubeconfig, as in a cluster; also by `kubectl` itself (plugin discovery), `--url` and
`--port-forward`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import EXAMPLES, example_pod
from kubectl_extender.cli import PluginError, Response, ask

from extender.state import load_objects
from testing.apiserver import FakeApiServer
from testing.harness import start_extender
from testing.service_proxy import add_service_proxy
from tests.deploy.deploy_tools import kubectl

# one pytest-xdist worker runs the module: the module's server made once, not once per worker
pytestmark = [pytest.mark.gunicorn, pytest.mark.xdist_group("server/test_kubectl_plugin")]
NAMESPACE, SERVICE = "scheduling-extender", "extended-scheduler-metrics"
TOKEN = "t-reader"


@pytest.fixture(scope="module")
def extender(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plugin")
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.load(load_objects(EXAMPLES / "cluster.yaml"))
        api.create("pods", example_pod("sla-gt"))  # Pending
        api.create("services", {"metadata": {"name": SERVICE, "namespace": NAMESPACE},
                                "spec": {"ports": [{"name": "metrics", "port": 8889, "targetPort": "metrics"}]}})
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        config = json.loads(kubeconfig.read_text())
        config["users"][0]["user"] = {"token": TOKEN}  # what the plugin hands the extender
        kubeconfig.write_text(json.dumps(config))
        reviews = api.reviews
        reviews.token(TOKEN, "reader")
        reviews.grant("reader", "get", "pods")
        reviews.grant("reader", "list", "pods")
        served, _, metrics_port = start_extender(kubeconfig, tmp, ("--explain-endpoint", "true"))
        add_service_proxy(api, {(NAMESPACE, SERVICE): f"127.0.0.1:{metrics_port}"})
        try:
            yield api, kubeconfig, metrics_port, tmp
        finally:
            served.stop()


def plugin(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The plugin as kubectl runs it, with the kubectl it talks through (.ci/install-tools)."""
    return subprocess.run([sys.executable, "-m", "kubectl_extender.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "KUBECTL": kubectl(), **(env or {})})


def test_why_prints_the_table_through_the_service_proxy(extender):
    api, kubeconfig, _, _ = extender
    proc = plugin("why", "sla-gt", "--kubeconfig", str(kubeconfig))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["POD", "default/sla-gt"]
    assert lines[1].startswith("STATE     live, resourceVersion ")
    assert lines[2] == ("RESULT    4/10 nodes are available: 1 node(s) were unschedulable, "
                        "5 node(s) had untolerated taint(s).")
    assert any(line.split()[:3] == ["NODES", "PLUGIN", "REASON"] for line in lines)
    assert any("toleration[0] node.example.com/sla Gt '750' (NoSchedule): does not tolerate: "
               "taint value 500 is not greater than 750" in line for line in lines)
    assert any("e.g. spot-c1" in line for line in lines)
    proxied = [r for r in api.requests if "/services/" in r and "/proxy/explain/default/sla-gt" in r]
    assert proxied, "the request went through the API server's service proxy"
    assert any(r.startswith("GET /api/v1/namespaces/default/pods/sla-gt") for r in api.requests)


def test_json_output_is_the_endpoints_answer(extender):
    _, kubeconfig, port, _ = extender
    proc = plugin("why", "sla-gt", "-n", "default", "--kubeconfig", str(kubeconfig), "-o", "json", "--all-nodes")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["view"] == "all" and report["state"]["mode"] == "live"
    (result,) = report["results"]
    assert result["filter"]["NodeNames"] == ["od-a1", "od-b1", "spot-a1", "spot-b1"]
    assert len(result["nodes"]) == 10
    # the same with --url straight to the side listener
    direct = plugin("why", "sla-gt", "--url", f"http://127.0.0.1:{port}", "--kubeconfig", str(kubeconfig),
                    "-o", "json", "--all-nodes")
    assert direct.returncode == 0, direct.stderr
    assert json.loads(direct.stdout)["results"] == report["results"]


def test_explain_a_pod_file_not_created_yet(extender, tmp_path):
    api, kubeconfig, _, _ = extender
    proc = plugin("explain", "-f", str(EXAMPLES / "pods" / "cel-rack-regex.yaml"), "--kubeconfig", str(kubeconfig),
                  "-o", "yaml")
    assert proc.returncode == 0, proc.stderr
    import yaml

    report = yaml.safe_load(proc.stdout)
    assert report["results"][0]["pod"] == "default/cel-rack-regex"
    assert "dev-a1" in report["results"][0]["filter"]["NodeNames"]
    assert any(r.startswith("POST /api/v1/namespaces/scheduling-extender/services/") for r in api.requests)


def test_the_namespace_comes_from_the_context(extender, tmp_path):
    _, kubeconfig, _, _ = extender
    config = json.loads(Path(kubeconfig).read_text())
    config["contexts"][0]["context"]["namespace"] = "shop"
    shop = tmp_path / "kubeconfig-shop"
    shop.write_text(json.dumps(config))
    proc = plugin("why", "web-7d9f-0", "--kubeconfig", str(shop))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["POD", "shop/web-7d9f-0"]


def test_errors_read_like_kubectl(extender):
    api, kubeconfig, _, _ = extender
    proc = plugin("why", "nope", "--kubeconfig", str(kubeconfig))
    assert proc.returncode == 1
    assert proc.stderr.strip() == 'error: Error from server (NotFound): pods "nope" not found'
    api.faults.fail_requests, api.faults.fail_status = 1, 403
    api.faults.fail_match = "GET /api/v1/namespaces/default/pods/sla-gt"
    proc = plugin("why", "sla-gt", "--kubeconfig", str(kubeconfig))
    api.faults.fail_requests, api.faults.fail_match = 0, ""
    assert proc.returncode == 1 and "Error from server (Forbidden)" in proc.stderr
    proc = plugin("why", "sla-gt", "--kubeconfig", str(kubeconfig), "--service", f"{NAMESPACE}/missing:metrics")
    assert proc.returncode == 1 and 'services "missing" not found' in proc.stderr
    proc = plugin("why", "sla-gt", "--kubeconfig", str(kubeconfig), "--service", "nonsense")
    assert proc.returncode == 1 and "expected NAMESPACE/NAME[:PORT]" in proc.stderr


def test_kubectl_finds_the_plugin(extender, tmp_path):
    _, kubeconfig, _, _ = extender
    script = Path(sys.executable).parent / "kubectl-extender"
    assert script.exists(), f"{script}: the package's console script (pip install -e .)"
    env = {**os.environ, "PATH": f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(kubeconfig), "KUBECTL": kubectl()}
    proc = subprocess.run([kubectl(), "extender", "why", "sla-gt"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["POD", "default/sla-gt"]


def test_port_forward_runs_kubectl_port_forward(extender, tmp_path):
    _, kubeconfig, port, _ = extender
    calls = tmp_path / "calls"
    fake = tmp_path / "kubectl"
    # port-forward is played; every other command (the context's namespace, the API
    # proxy for the pod check) is the real kubectl's
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = port-forward ] || exec {kubectl()} \"$@\"\n"
                    f"echo \"$@\" > {calls}\necho 'Forwarding from 127.0.0.1:{port} -> 8889'\nexec sleep 60\n")
    fake.chmod(0o755)
    proc = plugin("why", "sla-gt", "--port-forward", "--kubeconfig", str(kubeconfig), env={"KUBECTL": str(fake)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["POD", "default/sla-gt"]
    assert calls.read_text().split() == ["port-forward", "-n", NAMESPACE, f"service/{SERVICE}", ":metrics",
                                         "--kubeconfig", str(kubeconfig)]


class Scripted:
    def __init__(self, *responses: Response) -> None:
        self.responses = list(responses)

    def describe(self) -> str:
        return "scripted"

    def send(self, method, path, body):
        return self.responses.pop(0)


def test_busy_and_unready_answers_are_retried_after_retry_after():
    answer = orjson.dumps({"results": []})
    assert ask(Scripted(Response(429, b'{"error":"busy"}', "0"), Response(503, b"{}", "0"),
                        Response(200, answer, None)), "GET", "/explain/a/b") == {"results": []}
    with pytest.raises(PluginError, match="too long"):
        ask(Scripted(Response(429, b'{"error":"too long"}', "60")), "GET", "/explain/a/b")
    with pytest.raises(PluginError, match="NetworkPolicy"):
        ask(Scripted(Response(503, b'{"message":"error trying to reach service: refused"}', None)), "GET", "/x")


def test_the_token_comes_from_the_kubeconfigs_exec_plugin(tmp_path, monkeypatch):
    """A kubeconfig whose user authenticates through an exec credential plugin (an OIDC or
    cloud login helper): the plugin runs it as kubectl would, with its env and
    KUBERNETES_EXEC_INFO, and sends the token it prints; a client certificate gives none."""
    from kubectl_extender.cli import Kubectl, kubeconfig_token

    helper = tmp_path / "login-helper"
    helper.write_text("#!/bin/sh\n"
                      "case \"$KUBERNETES_EXEC_INFO\" in *ExecCredential*) ;; *) exit 3;; esac\n"
                      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
                      "\"status\":{\"token\":\"%s-%s\"}}' \"$1\" \"$HELPER_SUFFIX\"\n")
    helper.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(helper), "args": ["t"],
                     "env": [{"name": "HELPER_SUFFIX", "value": "exec"}], "interactiveMode": "Never"}}
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
              "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
              "users": [{"name": "u", "user": user}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("KUBECTL", kubectl())
    assert kubeconfig_token(Kubectl(str(path), None)) == "t-exec"
    config["users"][0]["user"] = {"client-certificate-data": "eA==", "client-key-data": "eA=="}
    path.write_text(json.dumps(config))
    assert kubeconfig_token(Kubectl(str(path), None)) == ""


class Recording:
    """An extender stand-in on a local port for `--url`: it records each request (method,
    path, body) and answers an empty report."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests: list[tuple[str, str, bytes]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((self.command, self.path, body))
                data = b'{"results": [], "pods": [], "complete": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def context_kubeconfig(tmp_path: Path, namespace: str) -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
              "users": [{"name": "u", "user": {"token": "t-user"}}],
              "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": namespace}}]}
    path = tmp_path / f"kubeconfig-{namespace}"
    path.write_text(json.dumps(config))
    return path


def test_with_url_drift_and_explain_default_to_the_contexts_namespace(tmp_path):
    """-n's help: the kubeconfig context's namespace is the default; --url changes where
    the extender is, not which namespace is asked about."""
    served = Recording()
    try:
        shop = context_kubeconfig(tmp_path, "shop")
        proc = plugin("drift", "--url", served.url, "--kubeconfig", str(shop), "-o", "json")
        assert proc.returncode == 0, proc.stderr
        (method, path, _), = served.requests
        assert method == "GET" and "namespace=shop" in path, path
        pod_file = tmp_path / "pod.yaml"
        pod_file.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
                            "  containers: [{name: c, image: registry.example.com/app:1}]\n")
        proc = plugin("explain", "-f", str(pod_file), "--url", served.url, "--kubeconfig", str(shop), "-o", "json")
        assert proc.returncode == 0, proc.stderr
        method, path, body = served.requests[-1]
        assert method == "POST" and path.startswith("/explain")
        assert json.loads(body)["metadata"]["namespace"] == "shop"
        # -n still wins
        proc = plugin("drift", "--url", served.url, "--kubeconfig", str(shop), "-n", "other", "-o", "json")
        assert proc.returncode == 0 and "namespace=other" in served.requests[-1][1]
    finally:
        served.server.shutdown()


def test_drift_with_url_and_token_needs_no_kubectl(tmp_path):
    served = Recording()
    try:
        proc = plugin("drift", "--url", served.url, "--token", "t-x", "-A", "-o", "json",
                      env={"KUBECTL": str(tmp_path / "no-kubectl"), "PATH": "/nonexistent"})
        assert proc.returncode == 0, proc.stderr
        (method, path, _), = served.requests
        assert method == "GET" and path.startswith("/drift")
        # explain -f reads the file with kubectl: without it, a clear error
        proc = plugin("explain", "-f", str(tmp_path / "p.yaml"), "--url", served.url, "--token", "t",
                      env={"KUBECTL": str(tmp_path / "no-kubectl"), "PATH": "/nonexistent"})
        assert proc.returncode == 1 and "kubectl not found" in proc.stderr
    finally:
        served.server.shutdown()
