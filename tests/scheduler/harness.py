"""The extender under test: a real `extender serve` (gunicorn, InlineWorker) in live
mode against the API-server double, driven by the kube-scheduler simulator. The
extender's state comes from list/watch, so it lags the truth as in a cluster (which is
what makes pods in flight matter), and its `bind` posts to the double.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from tests.doubles.apiserver import FakeApiServer
from tests.doubles.scheduler import Scheduler
from tests.server.live import free_port, request

HISTORY = 5000  # retained watch events; the extender's watches are never that far behind
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


class Served:
    """A real `extender serve` process in live mode against the API-server double (its
    state from list/watch, its bindings through the double), on a loopback port."""

    def __init__(self, kubeconfig: Path, log: Path, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBECONFIG")}
        cmd = [sys.executable, "-m", "extender", "serve", "--kubeconfig", str(kubeconfig),
               "--listen", f"127.0.0.1:{self.port}", *flags]
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self._log_file)
        if not wait_for(self._ready, timeout=30):
            self.stop()
            raise AssertionError(f"extender serve did not become ready: {log.read_text()[-2000:]}")

    def _ready(self) -> bool:
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False

    def get(self, path: str) -> tuple[int, bytes]:
        return request(self.port, "GET", path)

    def metric(self, name: str) -> float:
        """One unlabelled sample from /metrics."""
        for line in self.get("/metrics")[1].decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"metric {name} not exported")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


def node(name: str, zone: str, cpu: str = "4", memory: str = "16Gi", taints=(), labels=None) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {HOST: name, ZONE: zone, **(labels or {})}},
            "spec": {"taints": [dict(t) for t in taints]},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def pod(name: str, labels=None, cpu: str = "100m", priority: int = 0, node_name: str = "",
        spread=(), tolerations=(), node_selector=None, namespace: str = "default") -> dict:
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
            "priority": priority, "schedulerName": "default-scheduler"}
    if node_name:
        spec["nodeName"] = node_name
    if spread:
        spec["topologySpreadConstraints"] = list(spread)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node_selector:
        spec["nodeSelector"] = node_selector
    status = {"phase": "Running" if node_name else "Pending"}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": spec, "status": status}


def hard_spread(key: str, labels: dict, max_skew: int = 1) -> dict:
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": labels}}


@contextmanager
def cluster(objects: list[dict], tmp: Path, inflight_wait: float = 1.0, **scheduler_kw):
    """(api, served extender, scheduler) over `objects`; everything stopped afterwards."""
    # a short watch history: the double finds a watcher's events by walking the retained
    # log, so 100k events would make every event cost O(all events) at 20,000 pods
    api = FakeApiServer(history=HISTORY).start()
    api.load(objects)
    served = sched = None
    try:
        served = Served(api.write_kubeconfig(tmp / "kubeconfig"), tmp / "extender.log",
                        "--inflight-wait", str(inflight_wait))
        sched = Scheduler(api, served.url, **scheduler_kw)
        yield api, served, sched
    finally:
        if sched is not None:
            sched.close()
        if served is not None:
            served.stop()
        api.stop()


def wait_for(predicate, timeout: float = 5.0) -> bool:
    """Poll `predicate` until true ("doesn't hang" bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()
