"""Helpers for the live-state tests: the double's truth vs the extender's state, and
/filter answers from the live source vs a fresh cluster file of the truth."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from extender.config import Config
from extender.model.parse import existing_pod_from_dict, node_from_dict
from extender.server.app import create_app
from extender.state.kubeapi import Backoff
from extender.state.layers import WORKLOAD_KINDS, slim_workload
from extender.state.live import LiveSource
from extender.state.store import node_fingerprint, pod_fingerprint
from testing.apiserver import RESOURCES, FakeApiServer
from testing.client import Client

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PODS = ("plain", "sla-gt", "spread-spot", "cel-rack-regex", "cordon-toleration", "annotation-affinity")


def plural(kind: str) -> str:
    return next(r.plural for r in RESOURCES.values() if r.kind == kind)


def truth_state(api: FakeApiServer) -> dict[str, Any]:
    """What the extender should hold, object by object, in the store's terms."""
    state: dict[str, Any] = {
        "Node": {o["metadata"]["name"]: node_fingerprint(node_from_dict(o)) for o in api.objects("nodes")},
        "Pod": {(o["metadata"]["namespace"], o["metadata"]["name"]): pod_fingerprint(existing_pod_from_dict(o))
                for o in api.objects("pods")},
    }
    for kind in WORKLOAD_KINDS:
        state[kind] = {(o["metadata"]["namespace"], o["metadata"]["name"]): slim_workload(o)
                       for o in api.objects(plural(kind))}
    return state


def held_state(source: LiveSource) -> dict[str, Any]:
    snap = source.snapshot()
    state: dict[str, Any] = {
        "Node": {n.name: node_fingerprint(n) for n in snap.nodes.nodes},
        "Pod": {(p.namespace, p.name): pod_fingerprint(p) for p in snap.pods},
    }
    for kind in WORKLOAD_KINDS:
        state[kind] = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in snap.workloads[kind]}
    return state


def wait_converged(source: LiveSource, api: FakeApiServer, timeout: float = 20.0) -> float:
    """Wait until the held state equals the truth (object by object); returns seconds."""
    start = time.monotonic()
    while True:
        truth, held = truth_state(api), held_state(source)
        if truth == held:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            for kind in truth:
                missing = truth[kind].keys() - held[kind].keys()
                extra = held[kind].keys() - truth[kind].keys()
                wrong = [k for k in truth[kind].keys() & held[kind].keys() if truth[kind][k] != held[kind][k]]
                assert not (missing or extra or wrong), (
                    f"{kind}: missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}, "
                    f"different {sorted(wrong)[:5]} after {timeout}s")
            raise AssertionError("state differs from the truth")
        time.sleep(0.02)


def example_pod_bodies() -> list[dict]:
    from conftest import example_pod

    return [example_pod(name) for name in EXAMPLE_PODS]


def assert_filter_matches_fresh_file(source: LiveSource, api: FakeApiServer, tmp_path: Path) -> None:
    """`/filter` over the live state answers as `/filter` over a fresh file of the truth."""
    path = tmp_path / "truth.json"
    path.write_bytes(orjson.dumps({"kind": "List", "apiVersion": "v1", "items": api.all_objects()}))
    fresh = Client(create_app(Config(cluster=str(path), reload_interval=0)))
    live = Client(create_app(Config(reload_interval=0), source=source))
    names = sorted(n["metadata"]["name"] for n in api.objects("nodes")) + ["never-seen"]
    for body in example_pod_bodies():
        for verb in ("filter", "prioritize"):
            request = orjson.dumps({"Pod": body, "NodeNames": names})
            want = fresh.post(f"/{verb}", data=request, content_type="application/json")
            got = live.post(f"/{verb}", data=request, content_type="application/json")
            assert got.status_code == want.status_code == 200
            assert orjson.loads(got.data) == orjson.loads(want.data), (verb, body["metadata"]["name"])


@contextmanager
def synced_live(api: FakeApiServer, tmp_path: Path, **kw: Any) -> Iterator[LiveSource]:
    """A started live source whose every kind has listed once; stopped afterwards."""
    source = start_live(api, tmp_path, **kw)
    try:
        assert source.wait_synced(20), source.readiness()
        yield source
    finally:
        source.stop()


def start_live(api: FakeApiServer, tmp_path: Path, **kw: Any) -> LiveSource:
    kw.setdefault("page_size", 4)
    kw.setdefault("backoff", lambda: Backoff(0.01, 0.2))
    kw.setdefault("watch_seconds", (3, 6))
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    return LiveSource.connect(str(kubeconfig), False, **kw).start()
