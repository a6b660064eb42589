"""The extender under test, served over HTTP on 127.0.0.1, with its cluster state
mirrored from the API-server double and `bind` posting to that double.

`MirrorSource` plays the informer: it rebuilds the extender's snapshot from the
double's truth on a thread, at most every `lag` seconds, so the extender lags the
truth as a watch does (which is what makes pods in flight matter).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

from werkzeug.serving import WSGIRequestHandler, make_server

from extender.binding import ApiBinder
from extender.config import Config
from extender.server.app import create_app
from extender.service import Extender
from extender.state import ClusterSnapshot
from tests.doubles.apiserver import FakeApiServer
from tests.doubles.scheduler import Scheduler

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


class MirrorSource:
    def __init__(self, api: FakeApiServer, lag: float = 0.02) -> None:
        self.api = api
        self.lag = lag
        self._rv = -1
        self._snapshot = self._build()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mirror", daemon=True)
        self._thread.start()

    def _build(self) -> ClusterSnapshot:
        self._rv = self.api.resource_version
        return ClusterSnapshot.from_objects(self.api.all_objects(), self._rv)

    def _loop(self) -> None:
        while not self._stop.wait(self.lag):
            if self.api.resource_version != self._rv:
                self._snapshot = self._build()

    def refresh(self) -> None:
        self._snapshot = self._build()

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def ready(self) -> bool:
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class QuietHandler(WSGIRequestHandler):
    def log_request(self, *args, **kwargs) -> None:  # no access log in test output
        pass


class Served:
    """An extender app on a threaded WSGI server (every request on its own thread)."""

    def __init__(self, engine: Extender, config: Config) -> None:
        self.engine = engine
        self.server = make_server("127.0.0.1", 0, create_app(config, engine.source.base, engine), threaded=True,
                                  request_handler=QuietHandler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="extender-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


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
def cluster(objects: list[dict], tmp: Path, lag: float = 0.02, inflight_wait: float = 1.0, **scheduler_kw):
    """(api, served extender, scheduler) over `objects`; everything stopped afterwards."""
    api = FakeApiServer().start()
    api.load(objects)
    mirror = MirrorSource(api, lag)
    config = Config(inflight_wait=inflight_wait)
    binder = ApiBinder(kubeconfig=str(api.write_kubeconfig(tmp / "kubeconfig")))
    engine = Extender(config, mirror, binder=binder)
    served = Served(engine, config)
    sched = Scheduler(api, served.url, **scheduler_kw)
    try:
        yield api, served, sched
    finally:
        sched.close()
        served.stop()
        binder.close()
        mirror.stop()
        api.stop()


def wait_for(predicate, timeout: float = 5.0) -> bool:
    """Poll `predicate` until true ("doesn't hang" bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()
