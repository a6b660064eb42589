"""`POST /validate`: AdmissionReview v1 semantics, then the real HTTPS listener
(certificates made in the test), certificate rotation under load, client certificates."""

from __future__ import annotations

import copy
import http.client
import json
import os
import ssl
import threading
import time
from pathlib import Path

import orjson
import pytest
from pki import CA, write_pair

from extender.features import FeatureGates
from extender.server.listener import Listener
from extender.server.tls import ReloadingContext
from extender.server.webhook import BadReview, review, webhook_listener
from perf.attacks import closed

P = "scheduling-extender.io"
GATES = FeatureGates()
BAD_TOLS = '[{"key": "k", "operator": "Gt", "value": "08"}, {"key": "k", "operator": "Exists", "value": "x"}]'
GT_08 = ('metadata.annotations[scheduling-extender.io/tolerations][0].value: Invalid value: "08": '
         "must be a canonical decimal integer within int64")


def pod(annotations: dict | None = None, name: str = "p") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                             "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


def admission(obj: dict | None, kind: str = "Pod", operation: str = "CREATE", old: dict | None = None,
              uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002", **extra) -> bytes:
    group = {"Pod": "", "PersistentVolume": "", "CronJob": "batch", "Job": "batch"}.get(kind, "apps")
    request = {"uid": uid, "kind": {"group": group, "version": "v1", "kind": kind}, "operation": operation,
               "name": (obj or {}).get("metadata", {}).get("name", ""), "namespace": "default",
               "object": obj, "oldObject": old, **extra}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()


def response(body: bytes) -> dict:
    answer = review(body, P, GATES)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    return answer["response"]


# --- AdmissionReview semantics ----------------------------------------------------------


def test_valid_pod_is_allowed_and_uid_echoed():
    r = response(admission(pod({f"{P}/tolerations": '[{"key": "k", "operator": "Gt", "value": "8"}]'}), uid="u-1"))
    assert r == {"uid": "u-1", "allowed": True}


def test_invalid_pod_is_denied_with_every_error():
    r = response(admission(pod({f"{P}/tolerations": BAD_TOLS})))
    assert r["allowed"] is False
    assert r["status"]["code"] == 422 and r["status"]["reason"] == "Invalid"
    message = r["status"]["message"]
    assert message.startswith(f'Pod "p" is invalid: [{GT_08}, ')
    assert "[1].operator: Invalid value: core.Toleration{" in message


def test_warnings_are_returned():
    r = response(admission(pod({f"{P}/tolerations": '[{"key": "k", "operator": "Exists", "effect": "NoExecute"}]'})))
    assert r["allowed"] is True
    assert r["warnings"][0].startswith(f"metadata.annotations[{P}/tolerations][0]: a NoExecute taint")


def test_update_is_checked_only_when_the_annotations_change():
    old = pod({f"{P}/tolerations": BAD_TOLS})
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert response(admission(relabelled, operation="UPDATE", old=old))["allowed"] is True
    changed = pod({f"{P}/tolerations": '[{"key": "k", "operator": "Gt", "value": "08"}]'})
    r = response(admission(changed, operation="UPDATE", old=old))
    assert r["allowed"] is False and r["status"]["message"] == f'Pod "p" is invalid: {GT_08}'


@pytest.mark.parametrize("kind, path", [
    ("Deployment", ("spec", "template")), ("StatefulSet", ("spec", "template")),
    ("DaemonSet", ("spec", "template")), ("ReplicaSet", ("spec", "template")),
    ("ReplicationController", ("spec", "template")), ("Job", ("spec", "template")),
    ("CronJob", ("spec", "jobTemplate", "spec", "template")),
])
def test_pod_templates_of_workloads_are_checked(kind, path):
    template = pod({f"{P}/tolerations": '[{"key": "k", "operator": "Gt", "value": "08"}]'})
    del template["apiVersion"], template["kind"]
    obj: dict = {"apiVersion": "x/v1", "kind": kind, "metadata": {"name": "w"}}
    node = obj
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = template
    r = response(admission(obj, kind=kind))
    prefix = ".".join(path)
    assert r["status"]["message"] == f'{kind} "w" is invalid: {prefix}.{GT_08}'


@pytest.mark.parametrize("body", [
    admission(pod({f"{P}/tolerations": BAD_TOLS}), operation="DELETE"),
    admission(pod({f"{P}/tolerations": BAD_TOLS}), subResource="status"),
    admission({"metadata": {"name": "cm"}}, kind="ConfigMap"),
])
def test_other_requests_are_allowed(body):
    assert response(body)["allowed"] is True


@pytest.mark.parametrize("body, message", [
    (b"not json", "request body is not JSON"),
    (b"[]", "expected an AdmissionReview object"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}',
     "expected apiVersion admission.k8s.io/v1"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request.uid: required"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 5}}',
     "request.uid: required"),
])
def test_malformed_reviews_are_rejected(body, message):
    with pytest.raises(BadReview, match=message):
        review(body, P, GATES)


def test_webhook_and_scheduling_report_the_same_text(example_extender):
    from extender.api.wire import ExtenderArgs

    bad = pod({f"{P}/tolerations": '[{"key": "k", "operator": "Gt", "value": "08"}]'})
    filtered = orjson.loads(example_extender.filter(ExtenderArgs(bad, None, ["od-a1"])))
    reason = filtered["FailedAndUnresolvableNodes"]["od-a1"]
    assert response(admission(bad))["status"]["message"] == f'Pod "p" is invalid: {reason}'


# --- HTTPS transport ------------------------------------------------------------------------


@pytest.fixture
def pki(tmp_path: Path):
    ca = CA.create()
    cert, key, serial = ca.issue("webhook-1")
    cert_path, key_path = write_pair(tmp_path, cert, key)
    ca_path = tmp_path / "ca.crt"
    ca_path.write_bytes(ca.pem)
    return {"ca": ca, "cert": cert_path, "key": key_path, "ca_path": ca_path, "serial": serial, "dir": tmp_path}


def serve(pki, client_ca: str = "", interval: float = 0.05, **limits) -> Listener:
    tls = ReloadingContext(str(pki["cert"]), str(pki["key"]), client_ca, check_interval=interval)
    listener = webhook_listener("127.0.0.1:0", tls, P, GATES, max_body_bytes=1 << 20, **limits).start()
    listener.tls = tls  # the tests look at its reloads
    return listener


def client_context(pki, client_cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca_path"]))
    if client_cert is not None:
        ctx.load_cert_chain(*map(str, client_cert))
    return ctx


def post(port: int, ctx: ssl.SSLContext, body: bytes, path: str = "/validate",
         timeout: float = 5.0) -> tuple[int, bytes, int]:
    """(status, body, serial of the server certificate) over a new connection."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    try:
        der = None

        def peer(*args, **kwargs):  # the certificate, before a closing answer drops the socket
            nonlocal der
            http.client.HTTPSConnection.connect(conn, *args, **kwargs)
            der = conn.sock.getpeercert(binary_form=True)

        conn.connect = peer
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        from cryptography import x509

        return resp.status, resp.read(), x509.load_der_x509_certificate(der).serial_number
    finally:
        conn.close()


def test_https_validate_round_trip(pki):
    listener = serve(pki)
    try:
        ctx = client_context(pki)
        status, body, serial = post(listener.port, ctx, admission(pod({f"{P}/tolerations": BAD_TOLS}), uid="abc"))
        assert status == 200 and serial == pki["serial"]
        answer = json.loads(body)["response"]
        assert answer["uid"] == "abc" and answer["allowed"] is False
        status, body, _ = post(listener.port, ctx, b"{")
        assert status == 400 and "not JSON" in json.loads(body)["error"]
        status, _, _ = post(listener.port, ctx, b"{}", path="/nope")
        assert status == 404
    finally:
        listener.stop()


def test_plain_http_client_is_refused(pki):
    listener = serve(pki)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", listener.port, timeout=5)
        with pytest.raises((OSError, http.client.HTTPException)):
            conn.request("POST", "/validate", body=b"{}")
            conn.getresponse().read()
        conn.close()
    finally:
        listener.stop()


def test_serving_certificate_rotates_while_requests_flow(pki):
    listener = serve(pki)
    ctx = client_context(pki)
    body = admission(pod())
    seen: list[list[int]] = [[], [], []]  # each worker's serials, in order
    failures: list[BaseException] = []
    stop = threading.Event()

    def load(mine: list[int]) -> None:
        while not stop.is_set():
            try:
                status, _, serial = post(listener.port, ctx, body)
                assert status == 200
                mine.append(serial)
            except BaseException as exc:  # noqa: BLE001 - every failure is reported below
                failures.append(exc)

    def until(condition, what: str) -> None:  # a condition, not a clock
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline and not failures, f"{what}; failures: {failures[:3]}"
            time.sleep(0.02)

    workers = [threading.Thread(target=load, args=(mine,)) for mine in seen]
    try:
        for w in workers:
            w.start()
        until(lambda: all(seen), "a worker never got an answer before the rotation")
        new_cert, new_key, new_serial = pki["ca"].issue("webhook-2")
        # cert-manager replaces both files; a request may land between the two writes
        tmp = pki["dir"] / "next"
        tmp.mkdir()
        write_pair(tmp, new_cert, new_key)
        os.replace(tmp / "tls.key", pki["key"])
        time.sleep(0.1)
        os.replace(tmp / "tls.crt", pki["cert"])
        # every worker has made a connection since the reload (the new serial), and one more
        rotated = lambda mine: new_serial in mine and len(mine) > mine.index(new_serial) + 1  # noqa: E731
        until(lambda: all(rotated(mine) for mine in seen), "not every worker got the new certificate")
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=10)
        listener.stop()
    assert failures == []
    for mine in seen:
        assert mine[0] == pki["serial"] and new_serial in mine
        # once rotated, new connections get the new certificate
        assert set(mine[mine.index(new_serial):]) == {new_serial}
    assert listener.tls.reloads == 1


def test_client_certificates_are_required_with_a_client_ca(pki):
    client_cert, client_key, _ = pki["ca"].issue("kube-apiserver", server=False)
    client_dir = pki["dir"] / "client"
    client_dir.mkdir()
    pair = write_pair(client_dir, client_cert, client_key)
    listener = serve(pki, client_ca=str(pki["ca_path"]))
    try:
        status, _, _ = post(listener.port, client_context(pki, pair), admission(pod()))
        assert status == 200
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            post(listener.port, client_context(pki), admission(pod()))
        other = CA.create("other CA")
        rogue_cert, rogue_key, _ = other.issue("rogue", server=False)
        rogue_dir = pki["dir"] / "rogue"
        rogue_dir.mkdir()
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            post(listener.port, client_context(pki, write_pair(rogue_dir, rogue_cert, rogue_key)), admission(pod()))
    finally:
        listener.stop()


def test_a_stalled_client_does_not_block_others(pki):
    """Answered while the stalled client is still connected: its deadline is ten minutes
    off, so an answer that waited for it would not come (the post's timeout is a hang
    guard), whatever this machine's speed."""
    import socket

    listener = serve(pki, timeout=600.0)
    try:
        stalled = socket.create_connection(("127.0.0.1", listener.port))  # never sends a ClientHello
        status, _, _ = post(listener.port, client_context(pki), admission(pod()), timeout=60.0)
        assert status == 200 and not closed(stalled)
        stalled.close()
    finally:
        listener.stop()


@pytest.mark.gunicorn
def test_extender_serve_runs_the_webhook_next_to_the_verbs(pki, tmp_path):
    from conftest import EXAMPLES

    from testing.live import free_port, request, start, stop

    hook_port = free_port()
    port, proc = start(EXAMPLES / "cluster.yaml", "--webhook-listen", f"127.0.0.1:{hook_port}",
                       "--tls-cert-file", str(pki["cert"]), "--tls-private-key-file", str(pki["key"]),
                       tmpdir=tmp_path)
    try:
        status, body, _ = post(hook_port, client_context(pki), admission(pod({f"{P}/tolerations": BAD_TOLS})))
        assert status == 200 and json.loads(body)["response"]["allowed"] is False
        assert request(port, "GET", "/healthz")[0] == 200  # the verbs' listener is unaffected
        # the worker that answered exports the review in its /metrics
        metrics = request(port, "GET", "/metrics")[1].decode()
        assert 'controller_runtime_webhook_requests_total{code="200",webhook="/validate"} 1.0' in metrics
        assert ('extender_admission_reviews_total{allowed="false",kind="Pod",operation="CREATE"} 1.0'
                in metrics)
    finally:
        stop(proc)


def test_serve_refuses_a_webhook_without_tls_files():
    from extender.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="HTTPS only"):
        build_config({"webhook_listen": "127.0.0.1:9443"}, env={})


def test_each_review_is_logged(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="extender.webhook")
    response(admission(pod({f"{P}/tolerations": BAD_TOLS}), uid="logged"))
    (record,) = [r for r in caplog.records if r.name == "extender.webhook"]
    assert (record.uid, record.kind, record.allowed, record.errors) == ("logged", "Pod", False, 2)


def _https_ready(port: int, ctx: ssl.SSLContext, proc) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not become ready over HTTPS")


@pytest.mark.gunicorn
def test_verbs_over_https_with_client_certificates(pki, tmp_path):
    import subprocess
    import sys

    from conftest import EXAMPLES

    from testing.live import free_port, stop

    client_dir = pki["dir"] / "client"
    client_dir.mkdir()
    client_cert, client_key, _ = pki["ca"].issue("kube-scheduler", server=False)
    pair = write_pair(client_dir, client_cert, client_key)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--cluster", str(EXAMPLES / "cluster.yaml"),
         "--listen", f"127.0.0.1:{port}", "--verbs-tls", "true", "--tls-cert-file", str(pki["cert"]),
         "--tls-private-key-file", str(pki["key"]), "--client-ca-file", str(pki["ca_path"])],
        env={k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"} | {"TMPDIR": str(tmp_path)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ctx = client_context(pki, pair)
        _https_ready(port, ctx, proc)
        args = json.dumps({"Pod": pod(), "Nodes": None, "NodeNames": ["od-a1"]}).encode()
        status, body, serial = post(port, ctx, args, path="/filter")
        assert status == 200 and json.loads(body)["NodeNames"] == ["od-a1"] and serial == pki["serial"]
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            post(port, client_context(pki), args, path="/filter")
    finally:
        stop(proc)


def test_serve_reports_unloadable_tls_files(tmp_path, capsys, monkeypatch):
    from conftest import EXAMPLES

    import extender.logs
    from extender.cli import main

    monkeypatch.setattr(extender.logs, "setup_logging", lambda level: None)  # keep pytest's handlers
    missing = str(tmp_path / "nope.crt")
    code = main(["serve", "--cluster", str(EXAMPLES / "cluster.yaml"), "--verbs-tls", "true",
                 "--tls-cert-file", missing, "--tls-private-key-file", missing])
    assert code == 2
    assert "extender: error: TLS / webhook listener: [Errno 2] No such file or directory" in capsys.readouterr().err


def test_a_new_connection_replaces_a_stalled_one_beyond_the_limit(pki):
    """Accepts are never refused: at the connection limit the oldest connection not
    being answered makes room (it was closed on accept, issue #28). The stalled one's
    deadline is ten minutes off: an answer that waited for it would not come."""
    import socket

    tls = ReloadingContext(str(pki["cert"]), str(pki["key"]))
    listener = webhook_listener("127.0.0.1:0", tls, P, GATES, max_connections=1, timeout=600.0).start()
    try:
        stalled = socket.create_connection(("127.0.0.1", listener.port))  # holds the only slot
        deadline = time.monotonic() + 60
        while not listener.conns:  # accepted
            assert time.monotonic() < deadline, "the stalled connection was never accepted"
            time.sleep(0.01)
        assert post(listener.port, client_context(pki), admission(pod()), timeout=60.0)[0] == 200
        stalled.settimeout(60)
        assert stalled.recv(1) == b""  # the stalled one was closed to make room
        stalled.close()
    finally:
        listener.stop()


def test_webhook_requests_are_counted_by_code():
    from prometheus_client import REGISTRY

    from extender.server.webhook import VALIDATE, validate_route

    def sample(name, **labels):
        return REGISTRY.get_sample_value(name, labels) or 0.0

    route = validate_route(P, GATES)
    before = {code: sample("controller_runtime_webhook_requests_total", webhook=VALIDATE, code=code)
              for code in ("200", "400")}
    denied = sample("extender_admission_reviews_total", kind="Pod", operation="CREATE", allowed="false")
    observed = sample("controller_runtime_webhook_latency_seconds_count", webhook=VALIDATE)
    assert route(b"{not json")[0] == 400
    assert route(admission(pod({f"{P}/tolerations": BAD_TOLS})))[0] == 200
    assert sample("controller_runtime_webhook_requests_total", webhook=VALIDATE, code="400") == before["400"] + 1
    assert sample("controller_runtime_webhook_requests_total", webhook=VALIDATE, code="200") == before["200"] + 1
    assert sample("extender_admission_reviews_total", kind="Pod", operation="CREATE",
                  allowed="false") == denied + 1
    assert sample("controller_runtime_webhook_latency_seconds_count", webhook=VALIDATE) == observed + 2
    assert sample("controller_runtime_webhook_requests_in_flight", webhook=VALIDATE) == 0


# --- by the pod's own profile (--scheduler-config) ---------------------------------------

# web disables TaintToleration and NodeAffinity (the extender reads both annotations for
# its pods); batch disables NodeAffinity only (kube-scheduler's TaintToleration reads spec)
PROFILES = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: web
  plugins:
    multiPoint:
      disabled: [{name: TaintToleration}, {name: NodeAffinity}, {name: NodeUnschedulable},
                 {name: PodTopologySpread}]
- schedulerName: batch
  plugins:
    multiPoint:
      disabled: [{name: NodeAffinity}]
"""
TOLS = '[{"key": "k", "operator": "Gt", "value": "8"}]'
AFFINITY = ('{"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": '
            '[{"key": "kernel", "operator": "SemverGt", "values": ["5.10.0"]}]}]}}')
UNREAD = (f"metadata.annotations[{P}/tolerations]: profile \"batch\" runs TaintToleration in kube-scheduler (it "
          "does not disable it), which reads spec only: this annotation is ignored when these pods are placed")


def of_profile(scheduler: str | None, annotations: dict) -> dict:
    obj = pod(annotations)
    if scheduler is not None:
        obj["spec"]["schedulerName"] = scheduler
    return obj


def test_warnings_by_the_pods_own_profile():
    from extender.schedconfig import decode

    profiles = decode(PROFILES)
    both = {f"{P}/tolerations": TOLS, f"{P}/node-affinity": AFFINITY}

    def answer(obj: dict, kind: str = "Pod") -> dict:
        return review(admission(obj, kind=kind), P, GATES, profiles)["response"]

    assert answer(of_profile("web", both)) == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert answer(of_profile("batch", both))["warnings"] == [UNREAD]  # its NodeAffinity is the extender's
    assert answer(of_profile(None, both))["warnings"] == [
        'spec.schedulerName: "default-scheduler" is not a profile of the scheduler configuration (profiles: web, '
        f"batch): the scheduler that places these pods does not ask the extender, so {P}/tolerations and "
        f"{P}/node-affinity are ignored"]
    assert "warnings" not in answer(of_profile("other", {}))  # no annotation: nothing unread
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"template": of_profile("batch", {f"{P}/tolerations": TOLS})}}
    assert answer(deployment, kind="Deployment")["warnings"] == [f"spec.template.{UNREAD}"]
    # without --scheduler-config the one profile reads every annotation: no such warning
    assert "warnings" not in review(admission(of_profile("batch", both)), P, GATES)["response"]
    # errors stay errors, whatever the profile
    denied = answer(of_profile("batch", {f"{P}/tolerations": BAD_TOLS}))
    assert denied["allowed"] is False and denied["warnings"] == [UNREAD]


def test_extender_serve_s_webhook_reads_the_scheduler_configuration(pki, tmp_path):
    from extender.config import Config
    from extender.server.webhook import _listener_for

    path = tmp_path / "kube-scheduler-config.yaml"
    path.write_text(PROFILES)
    config = Config(webhook_listen="127.0.0.1:0", tls_cert_file=str(pki["cert"]), tls_private_key_file=str(pki["key"]),
                    scheduler_config=str(path))
    listener = _listener_for(config).start()
    try:
        status, body, _ = post(listener.port, client_context(pki), admission(of_profile("batch", {f"{P}/tolerations": TOLS})))
        assert status == 200 and json.loads(body)["response"]["warnings"] == [UNREAD]
    finally:
        listener.stop()
