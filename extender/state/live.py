"""Live cluster state: list and watch the API server, like kube-scheduler's informers.

One `Reflector` thread per kind (Nodes, Pods in all namespaces, Services, ReplicaSets,
StatefulSets, ReplicationControllers, PersistentVolumes, PersistentVolumeClaims) lists in pages (`limit` + `continue`), then
watches from the list's resourceVersion with bookmarks, renewing the watch when the
server ends it (`timeoutSeconds`), resuming from the last resourceVersion seen after a
dropped stream, relisting on `410 Gone`/`Expired`, and backing off (exponential,
jittered) on errors. Responses are read raw (`_preload_content=False`) and decoded with
orjson straight into the store's slim models: the client's generated models would cost
seconds and hundreds of MB at 50,000 pods.

Readiness: every kind's initial list has synced, and no kind has been failing for
longer than `max_staleness` seconds.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from extender import metrics
from extender.model.parse import ModelError
from extender.state.heap import freeze_state
from extender.state.snapshot import ClusterSnapshot
from extender.state.store import KINDS, Store, object_key

log = logging.getLogger("extender.state")

PAGE_SIZE = 500
WATCH_SECONDS = (300, 600)  # client-go's reflector: a random 5-10 minutes per watch
CONNECT_TIMEOUT = 10.0
READ_SLACK = 60.0  # a watch read silent this long past its timeout is a dead stream


class Expired(Exception):
    """410 Gone / Expired: the resourceVersion is too old, relist."""


class WatchError(Exception):
    """The server sent an ERROR event or an unreadable line."""


@dataclass
class Backoff:
    """Jittered exponential backoff (client-go's wait.Backoff with jitter 1.0)."""

    initial: float = 0.8
    maximum: float = 30.0
    _next: float = 0.0

    def next(self) -> float:
        self._next = self.initial if not self._next else min(self._next * 2, self.maximum)
        return min(self._next * (1.0 + random.random()), self.maximum)

    def reset(self) -> None:
        self._next = 0.0


def _timestamp(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def api_lister(api_client: Any, kind: str) -> Callable[..., Any]:
    """The generated client's list-or-watch call for `kind` across all namespaces."""
    from kubernetes import client

    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    return {
        "Node": core.list_node,
        "Pod": core.list_pod_for_all_namespaces,
        "Service": core.list_service_for_all_namespaces,
        "ReplicationController": core.list_replication_controller_for_all_namespaces,
        "ReplicaSet": apps.list_replica_set_for_all_namespaces,
        "StatefulSet": apps.list_stateful_set_for_all_namespaces,
        "PersistentVolume": core.list_persistent_volume,
        "PersistentVolumeClaim": core.list_persistent_volume_claim_for_all_namespaces,
    }[kind]


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class Reflector:
    """List then watch one kind into the store (see the module docstring)."""

    freeze_after_sync = False  # freeze the heap after a pod relist (`heap.freeze_state`)

    def __init__(
        self, kind: str, lister: Callable[..., Any], store: Store, page_size: int = PAGE_SIZE,
        backoff: Backoff | None = None, watch_seconds: tuple[int, int] = WATCH_SECONDS,
    ) -> None:
        self.kind = kind
        self.lister = lister
        self.store = store
        self.page_size = page_size
        self.backoff = backoff or Backoff()
        self.watch_seconds = watch_seconds
        self.resource_version = ""
        self.synced = threading.Event()
        self.last_ok = time.monotonic()
        self.failing_since: float | None = None
        self._response: Any = None
        self._stop = threading.Event()

    # --- health ----------------------------------------------------------------------

    def _ok(self) -> None:
        self.last_ok = time.monotonic()
        self.failing_since = None

    def _failed(self, reason: str, exc: BaseException) -> None:
        metrics.WATCH_ERRORS_TOTAL.labels(self.kind, reason).inc()
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        log.warning("watch failed; retrying", extra={"kind": self.kind, "reason": reason, "error": str(exc)[:300]})

    def failing_for(self) -> float:
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since

    # --- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.resource_version:
                    self.relist()
                self.watch()
            except Expired as exc:
                metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "expired").inc()
                log.info("resourceVersion expired; relisting", extra={"kind": self.kind, "error": str(exc)})
                self.resource_version = ""
                self._stop.wait(self.backoff.next())  # a server expiring every watch is not hammered
            except Exception as exc:  # noqa: BLE001 - any failure: back off and retry
                if self._stop.is_set():
                    break
                status = _status_of(exc)
                if status == 410:  # a list's continue token expired: start the list over
                    metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "expired").inc()
                    self.resource_version = ""
                else:
                    self._failed(f"http {status}" if status else type(exc).__name__, exc)
                self._stop.wait(self.backoff.next())

    def stop(self) -> None:
        self._stop.set()
        time.sleep(0)  # let a watch that just connected publish its response
        response = self._response
        if response is not None:
            try:
                response.close()  # unblocks a read in the watch
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def relist(self) -> None:
        """List every page, apply it to the store, remember the list's resourceVersion."""
        metrics.WATCH_RELISTS_TOTAL.labels(self.kind).inc()
        rv_box: list[str] = []
        changed, rejected = self.store.replace(self.kind, self._pages(rv_box))
        self.resource_version = rv_box[0] if rv_box else ""
        self.store.publish()
        if self.freeze_after_sync and self.synced.is_set() and self.kind == "Pod":  # most of the state is new
            freeze_state("pods relisted")
        self._ok()
        self.backoff.reset()
        if not self.synced.is_set():
            log.info("initial list synced", extra={"kind": self.kind, "changed": changed, "rejected": rejected})
        self.synced.set()

    def _pages(self, rv_box: list[str]) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False,
                                      "_request_timeout": (CONNECT_TIMEOUT, 60.0)}
            if token:
                kwargs["_continue"] = token
            response = self.lister(**kwargs)
            try:
                page = orjson.loads(response.data)
            finally:
                response.release_conn()
            meta = page.get("metadata") or {}
            items = page.get("items") or []
            page = None
            for item in items:
                item.setdefault("kind", self.kind)
                yield item
            token = meta.get("continue")
            if not token:
                rv_box.append(meta.get("resourceVersion") or "")
                return

    def watch(self) -> None:
        """One watch request from `resource_version`, applying events until the server
        ends it; raises on errors (the caller backs off) and Expired (relist)."""
        timeout = random.randint(*self.watch_seconds)
        response = self.lister(
            watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
            timeout_seconds=timeout, _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, timeout + READ_SLACK),
        )
        self._response = response
        self._ok()
        try:
            buffer = b""
            for chunk in response.stream(None, decode_content=False):
                if self._stop.is_set():  # stop() raced with the request: nothing closed it
                    return
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._event(line)
                self.store.publish()
                self.backoff.reset()
            if buffer.strip():  # the last event had no newline: still a whole JSON document
                self._event(buffer)
                self.store.publish()
        finally:
            self._response = None
            response.release_conn()

    def _event(self, line: bytes) -> None:
        try:
            event = orjson.loads(line)
            type_, obj = event["type"], event["object"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise WatchError(f"unreadable watch event: {line[:200]!r}") from exc
        metrics.WATCH_EVENTS_TOTAL.labels(self.kind, type_).inc()
        if type_ == "ERROR":
            if obj.get("code") == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise Expired(obj.get("message") or "expired")
            raise WatchError(f"watch error: {obj.get('code')} {obj.get('message')}")
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if type_ == "BOOKMARK":
            if rv:
                self.resource_version = rv
            self._ok()
            return
        if type_ in ("ADDED", "MODIFIED"):
            try:
                changed = self.store.upsert(self.kind, obj)
            except ModelError as exc:
                metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "unparseable object").inc()
                log.error("object rejected", extra={"kind": self.kind, "object": "/".join(object_key(obj)),
                                                    "error": str(exc)})
                changed = True
            if not changed:
                metrics.WATCH_EVENTS_DROPPED_TOTAL.labels(self.kind).inc()
            stamp = _timestamp(meta.get("creationTimestamp")) if type_ == "ADDED" else None
        elif type_ == "DELETED":
            namespace, name = object_key(obj)
            self.store.delete(self.kind, "" if self.kind == "Node" else namespace, name)
            stamp = _timestamp(meta.get("deletionTimestamp"))
        else:
            raise WatchError(f"unknown watch event type {type_!r}")
        if stamp is not None:
            metrics.WATCH_EVENT_LAG.labels(self.kind).observe(max(0.0, time.time() - stamp))
        if rv:
            self.resource_version = rv
        self._ok()


class LiveSource:
    """The `ClusterSource` fed by the API server (see the module docstring)."""

    def __init__(
        self, api_client: Any, max_staleness: float = 60.0, store: Store | None = None,
        page_size: int = PAGE_SIZE, backoff: Callable[[], Backoff] = Backoff,
        watch_seconds: tuple[int, int] = WATCH_SECONDS, freeze_after_sync: bool = False,
    ) -> None:
        """`freeze_after_sync`: the serving process's choice (`heap.freeze_state` once
        every kind has listed, and after a pod relist); off for embedders and tests."""
        self.store = store or Store()
        self.freeze_after_sync = freeze_after_sync
        self.max_staleness = max_staleness
        self.api_client = api_client
        self.reflectors = {
            kind: Reflector(kind, api_lister(api_client, kind), self.store, page_size, backoff(), watch_seconds)
            for kind in KINDS
        }
        for reflector in self.reflectors.values():
            reflector.freeze_after_sync = freeze_after_sync
        self._threads: list[threading.Thread] = []
        for kind in KINDS:
            metrics.WATCH_SECONDS_SINCE_SYNC.labels(kind).set_function(
                lambda r=self.reflectors[kind]: time.monotonic() - r.last_ok
            )

    @classmethod
    def connect(cls, kubeconfig: str | None, in_cluster: bool, **kw: Any) -> LiveSource:
        """Build the API client from a kubeconfig (the file, $KUBECONFIG or
        ~/.kube/config) or the in-cluster service account."""
        from kubernetes import client, config

        configuration = client.Configuration()
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return cls(client.ApiClient(configuration), **kw)

    def start(self) -> LiveSource:
        for kind, reflector in self.reflectors.items():
            thread = threading.Thread(target=reflector.run, name=f"watch-{kind}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.freeze_after_sync:
            threading.Thread(target=self._freeze_when_synced, name="freeze-state", daemon=True).start()
        return self

    def _freeze_when_synced(self) -> None:
        """Once every kind has listed, take the state out of full GC passes (`heap`)."""
        while not self.wait_synced(60.0):
            if all(r._stop.is_set() for r in self.reflectors.values()):
                return
        if not any(r._stop.is_set() for r in self.reflectors.values()):
            freeze_state("initial sync")

    def stop(self, timeout: float = 5.0) -> None:
        for reflector in self.reflectors.values():
            reflector.stop()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(r.synced.wait(max(0.0, deadline - time.monotonic())) for r in self.reflectors.values())

    def snapshot(self) -> ClusterSnapshot:
        return self.store.snapshot()

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): every kind listed once, none failing longer than max staleness."""
        metrics.CLUSTER_STATE_AGE.set(max(r.failing_for() for r in self.reflectors.values()))
        waiting = [k for k, r in self.reflectors.items() if not r.synced.is_set()]
        if waiting:
            return False, "initial list not synced yet: " + ", ".join(waiting)
        stale = [f"{k} ({r.failing_for():.0f}s)" for k, r in self.reflectors.items()
                 if r.failing_for() > self.max_staleness]
        if stale:
            return False, f"watch failing longer than {self.max_staleness:g}s: " + ", ".join(stale)
        return True, "ok"

    def ready(self) -> bool:
        return self.readiness()[0]

    def age(self) -> float:
        """Seconds since the least recently confirmed kind was last confirmed."""
        now = time.monotonic()
        return max((now - r.last_ok for r in self.reflectors.values()), default=0.0)
