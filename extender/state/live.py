"""Live cluster state: list and watch the API server, like kube-scheduler's informers.

One `Reflector` thread per kind (Nodes, Pods in all namespaces, Services, ReplicaSets,
StatefulSets, ReplicationControllers, PersistentVolumes, PersistentVolumeClaims) lists in pages (`limit` + `continue`), then
watches from the list's resourceVersion with bookmarks, renewing the watch when the
server ends it (`timeoutSeconds`), resuming from the last resourceVersion seen after a
dropped stream, relisting on `410 Gone`/`Expired`, and backing off (exponential,
jittered) on errors. Responses are read raw (`_preload_content=False`) and decoded with
orjson straight into the store's slim models: the client's generated models would cost
seconds and hundreds of MB at 50,000 pods.

A watch can also fall silent without failing (a stuck proxy, a half-dead TCP
connection): nothing arrives, and on a quiet cluster nothing would arrive anyway. A
real API server sends a bookmark about once a minute, and the resourceVersion is
global (etcd's revision: Leases and Events move it every few seconds), so neither
silence nor a newer resourceVersion elsewhere says that *this* kind changed. Each
reflector therefore has a watchdog: once its stream has been silent for
`probe_interval` (a third of what `--max-staleness` leaves after a probe), it asks the
server the exact question with a one-second watch from the stream's resourceVersion
(`probe`): no event means nothing of this kind changed since, and the state is
confirmed current; an event the stream has not delivered (after a short grace) means
the stream is dead, and it is restarted from its resourceVersion (the server replays
what was missed; `410` relists). The sockets use TCP keep-alive, and a watch read
gives up after `WATCH_READ_TIMEOUT`.

A bind this extender made is a liveness probe of the watches as well (`check_binds`):
the Pod watch must show a pod the API bound within `bind_watch_timeout` seconds; so is
each pod kube-scheduler asks about (`await_version`): its informer's copy carries a
resourceVersion our Pod watch must reach within that time. When one does not, every
kind is suspect at once (`suspect`): each is probed right away, in
parallel, and verdicts that read a suspect kind are refused (`unconfirmed`) until a
probe that started after the suspicion (or a relist) has found it current. A kind
being relisted is unconfirmed the same way: its objects are mid-replacement.

After an etcd restore the API server's resourceVersion is behind ours: a watch (or a
probe) from our resourceVersion is answered 504 "Too large resource version" (cause
`ResourceVersionTooLarge`); the kind is relisted, as client-go's reflector does. Not
every server refuses (a plain watch ahead of the watch cache may be accepted and
resume once the restored server passes our resourceVersion, skipping what it wrote
before), so a watch that resumes first asks for the server's resourceVersion (a
one-item list): behind ours, the kind relists the same way.

Readiness (and whether the verbs may answer at all, `unready`): every kind's initial
list has synced, and every kind was confirmed current (a list, an event, a bookmark or
a probe) within `max_staleness` seconds. Liveness (`liveness`): the state was ready
within the last `max_unready` seconds; a process whose state cannot recover (a wedged
client, a watch that never comes back) fails `/healthz` and is restarted.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from extender import metrics
from extender.model.parse import ModelError
from extender.state.gcfreeze import freeze_state
from extender.state.snapshot import ClusterSnapshot
from extender.state.source import ClusterSource
from extender.state.store import KINDS, Store, object_key

log = logging.getLogger("extender.state")

PAGE_SIZE = 500
WATCH_SECONDS = (300, 600)  # client-go's reflector: a random 5-10 minutes per watch
CONNECT_TIMEOUT = 10.0
# a watch read that waits this long is a dead connection (the watchdog finds dead
# streams much sooner when something changed; this only reclaims the socket)
WATCH_READ_TIMEOUT = 90.0
PROBE_WATCH_SECONDS = 1  # a probe's timeoutSeconds (the API counts in whole seconds)
PROBE_READ_SLACK = 2.0  # a probe that has not ended this long after that failed
DELIVERY_GRACE = 0.5  # seconds the stream gets to deliver what a probe saw
RECHECK_PAUSE, RECHECK_MAX_PAUSE = 0.1, 5.0  # between rounds of probes while a kind is unconfirmed
AWAIT_STEP = 0.002  # seconds between looks while a verdict waits for the watch to catch up
# TCP keep-alive on every API connection: idle seconds, probe interval, probe count
KEEPALIVE = (15, 5, 3)


class Expired(Exception):
    """410 Gone / Expired, or 504 Too large resource version: the resourceVersion is not
    one the server can resume from; relist."""


def too_large(status: Any) -> bool:
    """A `metav1.Status` (dict) saying "Too large resource version" (504 Timeout with the
    cause ResourceVersionTooLarge, or that message from older servers): the server is
    behind the resourceVersion asked for, as after an etcd restore."""
    if not isinstance(status, dict) or status.get("code") not in (504, None):
        return False
    causes = (status.get("details") or {}).get("causes") or []
    if any(isinstance(c, dict) and (c.get("reason") == "ResourceVersionTooLarge"
                                    or c.get("message") == "Too large resource version") for c in causes):
        return True
    return status.get("code") == 504 and "Too large resource version" in str(status.get("message") or "")


def _expired_or_too_large(status: Any) -> bool:
    return isinstance(status, dict) and (status.get("code") == 410 or status.get("reason") in ("Expired", "Gone")
                                         or too_large(status))


def _status_body(exc: BaseException) -> Any:
    body = getattr(exc, "body", None)
    try:
        return orjson.loads(body) if body else None
    except (orjson.JSONDecodeError, TypeError):
        return None


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


def probe_interval(max_staleness: float) -> float:
    """How long a stream may be silent before its watchdog probes: a third of what
    `max_staleness` leaves after one probe, so a quiet, healthy kind is confirmed
    (silence + check tick + probe <= max_staleness) before it could look stale."""
    return max(0.2, (max_staleness - PROBE_WATCH_SECONDS - PROBE_READ_SLACK / 2) / 3)


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """urllib3's default socket options (TCP_NODELAY) plus TCP keep-alive (`KEEPALIVE`):
    a peer that vanished without a FIN or RST is noticed in ~30 s, not after the
    kernel's two hours."""
    import urllib3

    idle, interval, count = KEEPALIVE
    options = list(urllib3.connection.HTTPConnection.default_socket_options)
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def _abort(response: Any) -> None:
    """End a streaming response from another thread: shutting the socket down wakes a
    read blocked on it (closing alone does not, on Linux)."""
    if response is None:
        return
    conn = getattr(response, "connection", None) or getattr(response, "_connection", None)
    sock = getattr(conn, "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        response.close()
    except Exception:  # noqa: BLE001 - ending it is best effort; it may be gone already
        pass


class Reflector:
    """List then watch one kind into the store (see the module docstring)."""

    freeze_after_sync = False  # freeze the heap after a pod relist (`gcfreeze.freeze_state`)

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
        now = time.monotonic()
        self.confirmed_at = now  # the state was last known current (list, event, bookmark, probe)
        self.heard_at = now  # the stream last delivered something (or connected)
        self.failing_since: float | None = None
        # a suspicion (`LiveSource.suspect`) since then: unconfirmed until a probe or a
        # relist that started after it finds the kind current
        self.unconfirmed_since: float | None = None
        self.relisting = False  # a relist after the initial sync is replacing the objects
        self._response: Any = None
        self._restart: str | None = None  # why the watchdog ended the stream
        self._relist = False  # the watchdog asks for a relist (a probe got 410)
        self._stop = threading.Event()

    # --- health ----------------------------------------------------------------------

    def _ok(self) -> None:
        """The stream delivered something: the state is current as of now."""
        self.confirmed_at = self.heard_at = time.monotonic()
        self.failing_since = None

    def confirmed(self, since: float) -> None:
        """A check that started at `since` found the kind current: a suspicion raised
        before then is cleared."""
        suspected = self.unconfirmed_since
        if suspected is not None and since >= suspected:
            self.unconfirmed_since = None

    def _failed(self, reason: str, exc: BaseException) -> None:
        metrics.WATCH_ERRORS_TOTAL.labels(self.kind, reason).inc()
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        log.warning("watch failed; retrying", extra={"kind": self.kind, "reason": reason, "error": str(exc)[:300]})

    def unconfirmed_for(self) -> float:
        """Seconds since the state of this kind was last known current."""
        return time.monotonic() - self.confirmed_at

    # --- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        resuming = False  # a watch ended: the next one resumes from its resourceVersion
        while not self._stop.is_set():
            try:
                if not self.resource_version or self._relist:
                    self._relist = False
                    self.relist()
                elif resuming and self._server_behind():
                    raise Expired(f"Too large resource version: the API server is behind {self.resource_version} "
                                  "(restored from a backup)")
                resuming = True
                self.watch()
            except Expired as exc:
                reason = "too large" if "Too large" in str(exc) else "expired"
                metrics.WATCH_ERRORS_TOTAL.labels(self.kind, reason).inc()
                log.info("resourceVersion not resumable; relisting",
                         extra={"kind": self.kind, "reason": reason, "error": str(exc)})
                self.resource_version = ""
                self._stop.wait(self.backoff.next())  # a server expiring every watch is not hammered
            except Exception as exc:  # noqa: BLE001 - any failure: back off and retry
                if self._stop.is_set():
                    break
                if self._restart is not None:  # the watchdog ended the stream: resume now
                    self._restart = None
                    continue
                status = _status_of(exc)
                if status == 410:  # a list's continue token expired: start the list over
                    metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "expired").inc()
                    self.resource_version = ""
                elif status == 504 and too_large(_status_body(exc)):  # the server is behind us
                    metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "too large").inc()
                    log.info("resourceVersion too large for the server; relisting", extra={"kind": self.kind})
                    self.resource_version = ""
                else:
                    self._failed(f"http {status}" if status else type(exc).__name__, exc)
                self._stop.wait(self.backoff.next())
            else:
                self._restart = None

    def stop(self) -> None:
        self._stop.set()
        time.sleep(0)  # let a watch that just connected publish its response
        _abort(self._response)

    def relist(self) -> None:
        """List every page, apply it to the store, remember the list's resourceVersion."""
        metrics.WATCH_RELISTS_TOTAL.labels(self.kind).inc()
        rv_box: list[str] = []
        started = time.monotonic()
        self.relisting = self.synced.is_set()
        try:
            changed, rejected = self.store.replace(self.kind, self._pages(rv_box))
        finally:
            self.relisting = False
        self.resource_version = rv_box[0] if rv_box else ""
        self.store.advance(self.kind, self.resource_version)
        self.store.publish()
        self.confirmed(started)
        if self.freeze_after_sync and self.synced.is_set() and self.kind == "Pod":  # most of the state is new
            freeze_state("pods relisted")
        self._ok()
        self.backoff.reset()
        if not self.synced.is_set():
            log.info("initial list synced", extra={"kind": self.kind, "changed": changed, "rejected": rejected})
        self.synced.set()

    def _server_behind(self) -> bool:
        """Is the API server's resourceVersion (a one-item list, a consistent read) older
        than ours? Only after an etcd restore: resuming there would skip whatever the
        restored server writes before it reaches ours again (a watch ahead of the
        server is not always refused). Asked before a watch resumes, never per event."""
        if not self.resource_version.isdigit():
            return False
        response = self.lister(limit=1, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, 30.0))
        try:
            server = (orjson.loads(response.data).get("metadata") or {}).get("resourceVersion") or ""
        finally:
            response.release_conn()
        return server.isdigit() and int(server) < int(self.resource_version)

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
            _request_timeout=(CONNECT_TIMEOUT, WATCH_READ_TIMEOUT),
        )
        self._response = response
        # the server answered; its replay of what we missed follows (not proof yet
        # that the state is current: the watchdog asks when the stream stays silent)
        self.heard_at = time.monotonic()
        self.failing_since = None
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
            if _expired_or_too_large(obj):
                raise Expired(obj.get("message") or "expired")
            raise WatchError(f"watch error: {obj.get('code')} {obj.get('message')}")
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if type_ == "BOOKMARK":
            if rv:
                self.resource_version = rv
                self.store.advance(self.kind, rv)
            self._ok()
            return
        if type_ in ("ADDED", "MODIFIED"):
            try:
                changed = self.store.upsert(self.kind, obj, rv=rv or "")
            except ModelError as exc:
                metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "unparseable object").inc()
                log.error("object rejected", extra={"kind": self.kind, "object": "/".join(object_key(obj)),
                                                    "error": str(exc)})
                self.store.advance(self.kind, rv or "")
                changed = True
            if not changed:
                metrics.WATCH_EVENTS_DROPPED_TOTAL.labels(self.kind).inc()
            stamp = _timestamp(meta.get("creationTimestamp")) if type_ == "ADDED" else None
        elif type_ == "DELETED":
            namespace, name = object_key(obj)
            self.store.delete(self.kind, "" if self.kind == "Node" else namespace, name, rv=rv or "")
            stamp = _timestamp(meta.get("deletionTimestamp"))
        else:
            raise WatchError(f"unknown watch event type {type_!r}")
        if stamp is not None:
            metrics.WATCH_EVENT_LAG.labels(self.kind).observe(max(0.0, time.time() - stamp))
        if rv:
            self.resource_version = rv
        self._ok()

    # --- the watchdog: silent streams ----------------------------------------------------

    def watchdog(self, interval: float) -> None:
        """(its own thread) Probe whenever the open stream has been silent for
        `interval` seconds; see the module docstring."""
        while not self._stop.wait(interval / 2):
            if self._response is None or not self.synced.is_set():
                continue  # listing, connecting or backing off: the loop reports on those
            if time.monotonic() - max(self.heard_at, self.confirmed_at) >= interval:
                self.probe()

    def probe(self) -> str:
        """Ask the server whether this kind changed after the stream's resourceVersion;
        returns what was concluded: "current" (nothing changed, the state is confirmed),
        "delivered" (the stream caught up meanwhile), "restarted" (the stream missed
        events: it is ended and resumed), "relist" (the resourceVersion is too old for
        the server) or "failed" (no answer: the state stays unconfirmed)."""
        since = self.resource_version
        if not since:
            return "failed"
        started = time.monotonic()
        try:
            seen = self._probe_events(since)
        except Expired:
            self._end_stream("expired", "the server cannot resume the stream's resourceVersion; relisting",
                             relist=True)
            return "relist"
        except Exception as exc:  # noqa: BLE001 - unreachable, timed out, refused
            status = _status_of(exc)
            if status == 504 and too_large(_status_body(exc)):
                self._end_stream("too large", "the server is behind the stream's resourceVersion; relisting",
                                 relist=True)
                return "relist"
            self._failed(f"probe: http {status}" if status else f"probe: {type(exc).__name__}", exc)
            return "failed"
        if seen is None:  # nothing of this kind after `since`, as of the probe's end
            self.confirmed_at = max(self.confirmed_at, time.monotonic())
            self.failing_since = None
            self.confirmed(started)
            return "current"
        if self._stop.wait(DELIVERY_GRACE) or self._delivered(seen, started):
            self.confirmed(started)
            return "delivered"
        self._end_stream("silent", "the watch stream is silent while the server has newer events; resuming it")
        return "restarted"

    def _probe_events(self, since: str) -> str | None:
        """A one-second watch from `since`: the resourceVersion of the first event it
        sees (read as it arrives: a stream that missed events is found at once), None
        if there was none. Raises Expired on 410 and on 504 Too large."""
        response = self.lister(
            watch=True, resource_version=since, allow_watch_bookmarks=False,
            timeout_seconds=PROBE_WATCH_SECONDS, _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, PROBE_WATCH_SECONDS + PROBE_READ_SLACK),
        )
        buffer = b""
        try:
            for chunk in response.stream(None, decode_content=False):  # ends after timeoutSeconds
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    seen = _probe_line(line)
                    if seen is not None:
                        return seen
            return _probe_line(buffer)
        finally:
            response.close()  # not drained when an event came early: never back to the pool

    def _delivered(self, rv: str, since: float) -> bool:
        """Has the stream delivered the event with resourceVersion `rv` (numbers, as
        etcd's are; otherwise: has it delivered anything since `since`)?"""
        try:
            return int(self.resource_version or 0) >= int(rv)
        except ValueError:
            return self.heard_at > since

    def _end_stream(self, reason: str, message: str, relist: bool = False) -> None:
        metrics.WATCH_ERRORS_TOTAL.labels(self.kind, reason).inc()
        log.warning(message, extra={"kind": self.kind, "resource_version": self.resource_version,
                                    "silent_for": round(time.monotonic() - self.heard_at, 1)})
        self._restart = reason
        self._relist = relist
        _abort(self._response)


def _probe_line(line: bytes) -> str | None:
    """A probe's event line: the event's resourceVersion ("?" without one), None for a
    bookmark or an empty line; Expired / WatchError for an ERROR."""
    if not line.strip():
        return None
    try:
        event = orjson.loads(line)
        type_, obj = event["type"], event["object"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise WatchError(f"unreadable probe event: {line[:200]!r}") from exc
    if type_ == "ERROR":
        if _expired_or_too_large(obj):
            raise Expired(obj.get("message") or "expired")
        raise WatchError(f"probe error: {obj.get('code')} {obj.get('message')}")
    if type_ == "BOOKMARK":
        return None
    return (obj.get("metadata") or {}).get("resourceVersion") or "?"


class LiveSource(ClusterSource):
    """The `ClusterSource` fed by the API server (see the module docstring)."""

    def __init__(
        self, api_client: Any, max_staleness: float = 20.0, store: Store | None = None,
        page_size: int = PAGE_SIZE, backoff: Callable[[], Backoff] = Backoff,
        watch_seconds: tuple[int, int] = WATCH_SECONDS, freeze_after_sync: bool = False,
        bind_watch_timeout: float = 1.0, max_unready: float = 300.0,
    ) -> None:
        """`freeze_after_sync`: the serving process's choice (`gcfreeze.freeze_state` once
        every kind has listed, and after a pod relist); off for embedders and tests.
        `bind_watch_timeout`: seconds the Pod watch may take to show a pod we bound (0:
        not checked). `max_unready`: seconds unready before `liveness` fails (0: never)."""
        self.store = store or Store()
        self.freeze_after_sync = freeze_after_sync
        self.max_staleness = max_staleness
        self.bind_watch_timeout = bind_watch_timeout
        self.max_unready = max_unready
        self._ready_at = time.monotonic()  # the state was last ready (or the process started)
        self._suspicion = threading.Lock()  # one round of probes at a time
        self._suspected_binds = 0.0  # binds before this were looked into already
        self.probe_interval = probe_interval(max_staleness)
        self.api_client = api_client
        self.reflectors = {
            kind: Reflector(kind, api_lister(api_client, kind), self.store, page_size, backoff(), watch_seconds)
            for kind in KINDS
        }
        for reflector in self.reflectors.values():
            reflector.freeze_after_sync = freeze_after_sync
        self._threads: list[threading.Thread] = []
        self._all_synced = False
        for kind in KINDS:
            metrics.WATCH_SECONDS_SINCE_SYNC.labels(kind).set_function(self.reflectors[kind].unconfirmed_for)

    @classmethod
    def connect(cls, kubeconfig: str | None, in_cluster: bool, **kw: Any) -> LiveSource:
        """Build the API client from a kubeconfig (the file, $KUBECONFIG or
        ~/.kube/config) or the in-cluster service account: TCP keep-alive on its
        sockets, and a pool with room for every kind's watch and probe."""
        from kubernetes import client, config

        configuration = client.Configuration()
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        configuration.socket_options = keepalive_socket_options()
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 2 * len(KINDS) + 4)
        return cls(client.ApiClient(configuration), **kw)

    def start(self) -> LiveSource:
        for kind, reflector in self.reflectors.items():
            for target, name in ((reflector.run, "watch"), (lambda r=reflector: r.watchdog(self.probe_interval),
                                                             "watchdog")):
                thread = threading.Thread(target=target, name=f"{name}-{kind}", daemon=True)
                thread.start()
                self._threads.append(thread)
        if self.freeze_after_sync:
            threading.Thread(target=self._freeze_when_synced, name="freeze-state", daemon=True).start()
        return self

    def _freeze_when_synced(self) -> None:
        """Once every kind has listed, take the state out of full GC passes (`gcfreeze`)."""
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

    def unready(self) -> tuple[str, str] | None:
        """Why no verdict may be computed now, as (reason, message), or None: a kind has
        not listed once yet ("not_synced"), or a kind was last confirmed current more
        than `max_staleness` seconds ago ("stale"). Cheap: called on every verb."""
        reflectors = self.reflectors
        if not self._all_synced:
            waiting = [k for k, r in reflectors.items() if not r.synced.is_set()]
            if waiting:
                return "not_synced", "cluster state not synced yet: initial list pending for " + ", ".join(waiting)
            self._all_synced = True  # as an informer's HasSynced: a later relist keeps it
        now = time.monotonic()
        limit = self.max_staleness
        stale = [k for k, r in reflectors.items() if now - r.confirmed_at > limit]
        if not stale:
            self._ready_at = now
            return None
        detail = ", ".join(f"{k} ({now - reflectors[k].confirmed_at:.0f}s"
                           + (", failing" if reflectors[k].failing_since is not None else "") + ")" for k in stale)
        return "stale", f"cluster state stale: not confirmed by the API server within {limit:g}s: {detail}"

    def unconfirmed(self, kinds: Iterable[str] = KINDS) -> tuple[str, str] | None:
        """("unconfirmed", message) when a verdict reading `kinds` may not be computed
        now: one of them is suspect (`suspect`) or relisting; else None. Looks at the
        binds first (`check_binds`). Cheap: called on every verdict."""
        self.check_binds()
        now = time.monotonic()
        doubtful = []
        for kind in kinds:
            reflector = self.reflectors[kind]
            if reflector.relisting:
                doubtful.append(f"{kind} (relisting)")
            elif reflector.unconfirmed_since is not None:
                doubtful.append(f"{kind} (rechecking for {now - reflector.unconfirmed_since:.1f}s)")
        if not doubtful:
            return None
        return "unconfirmed", ("cluster state not confirmed current: " + ", ".join(doubtful)
                               + (f"; {self._suspect_why}" if self._suspect_why else ""))

    _suspect_why = ""

    def check_binds(self) -> None:
        """A pod the API bound for us that the Pod watch has not shown within
        `bind_watch_timeout`: the watches may be stuck; `suspect` every kind."""
        if self.bind_watch_timeout <= 0:
            return
        oldest = self.store.oldest_unconfirmed_bind(after=self._suspected_binds)
        if oldest is None:
            return
        (namespace, name), bound_at = oldest
        waited = time.monotonic() - bound_at
        if waited > self.bind_watch_timeout:
            self.suspect(f"the watch has not shown pod {namespace}/{name}, bound {waited:.1f}s ago")

    def behind(self, kind: str, rv: str) -> bool:
        """Is our `kind` state older than resourceVersion `rv` (an object's, as the
        scheduler holds it)? False when either is not a number (an API server whose
        resourceVersions are not etcd revisions) or `bind_watch_timeout` is off."""
        ours = self.store.version_of(kind)
        if self.bind_watch_timeout <= 0 or not ours.isdigit() or not rv.isdigit():
            return False
        return int(ours) < int(rv)

    def await_version(self, kind: str, rv: str, what: str) -> bool:
        """Wait until our `kind` state reaches `rv` (at most `bind_watch_timeout`): the
        scheduler's informer already saw `what` there, so a watch that cannot catch up
        is stuck, and every kind is suspected (`suspect`). True when caught up."""
        deadline = time.monotonic() + self.bind_watch_timeout
        while self.behind(kind, rv):
            if time.monotonic() >= deadline:
                self.suspect(f"the scheduler has {what} at resourceVersion {rv}; the {kind} watch is at "
                             f"{self.store.version_of(kind)}")
                return False
            time.sleep(AWAIT_STEP)
        return True

    def suspect(self, why: str) -> bool:
        """Every kind is unconfirmed from now until a probe (or relist) that starts
        after now finds it current; the probes start at once, in parallel. False when a
        round is already running."""
        if not self._suspicion.acquire(blocking=False):
            return False
        now = time.monotonic()
        self._suspected_binds = now
        self._suspect_why = why
        for reflector in self.reflectors.values():
            if reflector.unconfirmed_since is None:
                reflector.unconfirmed_since = now
        metrics.WATCH_SUSPICIONS_TOTAL.inc()
        log.warning("the watches may be behind; probing every kind and refusing verdicts that read an "
                    "unconfirmed one", extra={"why": why})
        threading.Thread(target=self._recheck, name="recheck", daemon=True).start()
        return True

    def _recheck(self) -> None:
        """Probe the unconfirmed kinds in parallel until every one is confirmed."""
        try:
            pause = RECHECK_PAUSE
            while True:
                waiting = [r for r in self.reflectors.values()
                           if r.unconfirmed_since is not None and not r._stop.is_set()]
                if not waiting:
                    break
                threads = [threading.Thread(target=r.probe, name=f"recheck-{r.kind}", daemon=True)
                           for r in waiting if r.synced.is_set() and not r.relisting and r.resource_version]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                if any(r.unconfirmed_since is not None for r in waiting):
                    if any(r._stop.wait(pause) for r in waiting[:1]):
                        break
                    pause = min(pause * 2, RECHECK_MAX_PAUSE)
            log.info("every kind confirmed current again", extra={"why": self._suspect_why})
        finally:
            self._suspect_why = ""
            self._suspicion.release()

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): the verbs' condition (`unready`)."""
        metrics.CLUSTER_STATE_AGE.set(self.age())
        why = self.unready()
        return (True, "ok") if why is None else (False, why[1])

    def liveness(self) -> tuple[bool, str]:
        """(alive, why): false once the state has been unready for `max_unready` seconds
        (a process that cannot recover is better restarted)."""
        why = self.unready()
        if why is None or self.max_unready <= 0:
            return True, "ok"
        unready_for = time.monotonic() - self._ready_at
        if unready_for < self.max_unready:
            return True, "ok"
        return False, (f"cluster state unready for {unready_for:.0f}s (--max-unready {self.max_unready:g}): "
                       f"{why[1]}")

    def ready(self) -> bool:
        return self.readiness()[0]

    def age(self) -> float:
        """Seconds since the least recently confirmed kind was last confirmed current."""
        return max((r.unconfirmed_for() for r in self.reflectors.values()), default=0.0)
