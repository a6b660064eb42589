"""List and watch one kind into the store, as client-go's reflector does.

One `Reflector` thread per kind lists in pages (`limit` + `continue`), then watches from
the list's resourceVersion with bookmarks, renewing the watch when the server ends it
(`timeoutSeconds`), resuming from the last resourceVersion seen after a dropped stream,
relisting on `410 Gone`/`Expired`, and backing off (exponential, jittered) on errors.
Responses are read raw (`_preload_content=False`) and decoded with orjson straight into
the store's slim models: the client's generated models would cost seconds and hundreds
of MB at 50,000 pods.

After an etcd restore the API server's resourceVersion is behind ours: a watch from our
resourceVersion is answered 504 "Too large resource version" (cause
`ResourceVersionTooLarge`); the kind is relisted, as client-go's reflector does. Not
every server refuses (a plain watch ahead of the watch cache may be accepted and
resume once the restored server passes our resourceVersion, skipping what it wrote
before), so a watch that resumes first asks for the server's resourceVersion (a
one-item list): behind ours, the kind relists the same way.

The reflector also keeps its kind's health marks (when the state was last confirmed
current, since when it fails, whether a suspicion is pending), which the watchdog
(`extender.state.watchdog`) and readiness (`extender.state.readiness`) read and set.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import orjson

from extender import metrics
from extender.model.parse import ModelError
from extender.state.gcfreeze import freeze_state
from extender.state.kubeapi import (
    CONNECT_TIMEOUT,
    WATCH_READ_TIMEOUT,
    Backoff,
    Expired,
    WatchError,
    abort_stream,
    expired_or_too_large,
    status_body,
    status_of,
    too_large,
)
from extender.state.store import Store, object_key

log = logging.getLogger("extender.state")

PAGE_SIZE = 500
WATCH_SECONDS = (300, 600)  # client-go's reflector: a random 5-10 minutes per watch


def _timestamp(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


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
        # a suspicion (`Readiness.suspect`) since then: unconfirmed until a probe or a
        # relist that started after it finds the kind current
        self.unconfirmed_since: float | None = None
        self.relisting = False  # a relist after the initial sync is replacing the objects
        self._response: Any = None
        self._restart: str | None = None  # why the watchdog ended the stream
        self._relist = False  # the watchdog asks for a relist (a probe got 410)
        self.stopping = threading.Event()

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

    def failed(self, reason: str, exc: BaseException) -> None:
        """A call to the server failed: counted, logged, and the kind failing from now."""
        metrics.WATCH_ERRORS_TOTAL.labels(self.kind, reason).inc()
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        log.warning("watch failed; retrying", extra={"kind": self.kind, "reason": reason, "error": str(exc)[:300]})

    @property
    def streaming(self) -> bool:
        """A watch stream is open (not listing, connecting or backing off)."""
        return self._response is not None

    def unconfirmed_for(self) -> float:
        """Seconds since the state of this kind was last known current."""
        return time.monotonic() - self.confirmed_at

    # --- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        resuming = False  # a watch ended: the next one resumes from its resourceVersion
        while not self.stopping.is_set():
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
                self.stopping.wait(self.backoff.next())  # a server expiring every watch is not hammered
            except Exception as exc:  # noqa: BLE001 - any failure: back off and retry
                if self.stopping.is_set():
                    break
                if self._restart is not None:  # the watchdog ended the stream: resume now
                    self._restart = None
                    continue
                status = status_of(exc)
                if status == 410:  # a list's continue token expired: start the list over
                    metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "expired").inc()
                    self.resource_version = ""
                elif status == 504 and too_large(status_body(exc)):  # the server is behind us
                    metrics.WATCH_ERRORS_TOTAL.labels(self.kind, "too large").inc()
                    log.info("resourceVersion too large for the server; relisting", extra={"kind": self.kind})
                    self.resource_version = ""
                else:
                    self.failed(f"http {status}" if status else type(exc).__name__, exc)
                self.stopping.wait(self.backoff.next())
            else:
                self._restart = None

    def stop(self) -> None:
        self.stopping.set()
        time.sleep(0)  # let a watch that just connected publish its response
        abort_stream(self._response)

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
                if self.stopping.is_set():  # stop() raced with the request: nothing closed it
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
            if expired_or_too_large(obj):
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

    def end_stream(self, reason: str, message: str, relist: bool = False) -> None:
        """End the open stream from another thread (the watchdog's): the loop resumes
        it from its resourceVersion at once, or relists when `relist`."""
        metrics.WATCH_ERRORS_TOTAL.labels(self.kind, reason).inc()
        log.warning(message, extra={"kind": self.kind, "resource_version": self.resource_version,
                                    "silent_for": round(time.monotonic() - self.heard_at, 1)})
        self._restart = reason
        self._relist = relist
        abort_stream(self._response)
