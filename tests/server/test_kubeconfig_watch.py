"""`extender serve --kubeconfig FILE` follows FILE. The replace-default static pod reads
kube-scheduler's own /etc/kubernetes/scheduler.conf, whose client certificate kubeadm
renews in that file (a copy of it would expire, and every pod then stay Pending): a
changed file stops the server in a container, whose restart reads it; elsewhere it is
logged."""

from __future__ import annotations

import json
import logging
import os

import pytest
from conftest import EXAMPLES

from extender.config import build_config
from extender.state import load_objects
from extender.state.kubeconfig_watch import KubeconfigWatch
from testing.apiserver import FakeApiServer
from testing.harness import Process, extender_command, wait_extender_ready, wait_for
from testing.live import free_port


def renew(path, token: str) -> None:
    """The same kubeconfig with other credentials, written in place as kubeadm does."""
    config = json.loads(path.read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(json.dumps(config))


def test_the_watch_reports_another_complete_kubeconfig_once(tmp_path):
    path = tmp_path / "scheduler.conf"
    path.write_text(json.dumps({"clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
                                "users": [{"name": "u", "user": {"token": "a"}}]}))
    first = path.read_bytes()
    watch = KubeconfigWatch(path, lambda _: None)
    assert not watch.changed()
    path.write_bytes(first)  # rewritten, the same content
    assert not watch.changed()
    for partial in (b"", b"clusters:\n- name: c\n  cluster: {server: ", b'{"clusters": [{"name": "c"}]}'):
        path.write_bytes(partial)  # half written: not a change yet
        assert not watch.changed()
    path.unlink()
    assert not watch.changed()
    path.write_bytes(first)  # back as it was: nothing to follow
    assert not watch.changed()
    renew(path, "b")
    assert watch.changed() and not watch.changed()


def test_outside_a_container_a_change_is_logged_and_serving_goes_on(tmp_path, monkeypatch, caplog):
    from extender import cli
    from extender.server import opening

    path = FakeApiServer().write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setattr(opening, "in_container", lambda: False)
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    watch = cli._kubeconfig_watch(build_config({"kubeconfig": str(path)}, env={}))
    renew(path, "b")
    assert watch.changed()
    with caplog.at_level(logging.WARNING, logger="extender.state"):
        watch.on_change(path)
    assert "keeps the credentials it started with until it is restarted" in caplog.text and killed == []
    assert cli._kubeconfig_watch(build_config({"kubeconfig": "default"}, env={})) is None


@pytest.mark.gunicorn
def test_in_a_container_a_renewed_kubeconfig_restarts_serve_which_reads_it(tmp_path):
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.load(load_objects(EXAMPLES / "cluster.yaml"))
        kubeconfig = api.write_kubeconfig(tmp_path / "scheduler.conf")
        env = {**{k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBECONFIG")},
               "KUBERNETES_SERVICE_HOST": "10.96.0.1"}  # in a pod, as the static pod is

        def serve(log: str) -> tuple[Process, int]:
            metrics_port = free_port()
            proc = Process("extender", [*extender_command(), "serve", "--kubeconfig", str(kubeconfig),
                                        "--listen", f"127.0.0.1:{free_port()}",
                                        "--metrics-listen", f"127.0.0.1:{metrics_port}"], tmp_path / log, env)
            wait_extender_ready(proc, metrics_port)
            return proc, metrics_port

        proc, _ = serve("first.log")
        try:
            renew(kubeconfig, "renewed")  # kubeadm certs renew
            assert wait_for(lambda: not proc.alive(), timeout=120), proc.tail()
            assert proc.proc.returncode == 0, proc.tail()  # a graceful stop, as on SIGTERM
            assert "the kubeconfig changed (renewed credentials): stopping gracefully" in proc.tail()
        finally:
            proc.stop()
        # the kubelet restarts the container: the new process reads the renewed file
        again, _ = serve("second.log")
        try:
            assert again.alive() and "kubeconfig changed" not in again.tail()
        finally:
            again.stop()
