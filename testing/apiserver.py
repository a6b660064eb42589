"""An in-memory Kubernetes API server speaking the real wire protocol on 127.0.0.1.

There is no kube-apiserver binary on the build machines, so the live state source, the
`bind` verb and the real kube-scheduler (tests/e2e) run against this double. It holds the
truth (objects by kind/namespace/name) in memory and answers what the real server
answers, in the shapes of `kubectl get --raw` output:

- list: ``GET /api/v1/pods`` (all namespaces) and ``/api/v1/namespaces/{ns}/pods``,
  with ``limit``/``continue`` paging over one consistent snapshot and
  ``metadata.resourceVersion``; items carry no ``kind``/``apiVersion``.
- watch: ``?watch=true`` with ``resourceVersion``, ``allowWatchBookmarks`` and
  ``timeoutSeconds`` as a chunked stream of ``{"type":..,"object":..}`` lines
  (ADDED/MODIFIED/DELETED/BOOKMARK, and ERROR with a 410 ``Expired`` Status when the
  resourceVersion is older than the retained history); ``sendInitialEvents=true`` (a
  streaming list) ends the current objects with the ``k8s.io/initial-events-end``
  bookmark.
- ``POST .../pods/{name}/binding`` (201; 404 missing pod; 409 already bound),
  ``GET``/``DELETE`` of one object (DELETE honours a ``preconditions.uid``), ``POST``
  to create one (``generateName`` too), ``PATCH`` of an object or its ``status``
  subresource (strategic merge, JSON merge and apply patches: `testing.patching`).
- ``POST`` of a TokenReview or SubjectAccessReview, answered from the tokens and grants
  a test gives ``api.reviews`` (`testing.auth_reviews`).
- ``fieldSelector`` on list and watch (``status.phase!=Succeeded`` ...): a watched
  object that stops matching arrives as DELETED, one that starts matching as ADDED,
  as the real watch cache sends them.

It serves every kind a real kube-scheduler v1.30 (or v1.36) lists and watches (the informers of
its framework: storage, policy and workload kinds as empty lists when a test creates
none), core and ``events.k8s.io/v1`` events, and accepts anonymous requests (client-go
sends no credentials over plain http). ``journal=True`` keeps every change, never
compacted, for truth checks that replay a run in resourceVersion order (`journal`).

Tests change the truth from Python (`create`/`update`/`delete`/`bind`/`terminate`) and
inject faults through `server.faults` (cut streams mid-event, expire history, fail or
slow requests (a write whose client gave up during the delay is not applied, as the
API server cancels a request's context when its client goes away, unless
`late_writes`: etcd had it already; `request_timeout`: a write slower than that is
answered 504 at the timeout), hang new watch streams, events for objects never listed)
and `freeze_watches()` (the open streams fall silent, their TCP connections stay
open). Every change gets the next global resourceVersion, as etcd's revision does.

`checkpoint()` / `restore(checkpoint)` play an etcd backup and restore: the truth and
the resourceVersion go back to the checkpoint's, history is gone and every watch
stream ends (the API server restarts). A client that resumes a watch (or lists) from a
resourceVersion newer than the restored one is answered, after `too_large_wait`
seconds (the watch cache's 3 s), a 504 `Timeout` whose cause is
`ResourceVersionTooLarge` ("Too large resource version"): on a watch as an ERROR
event, on a list as the response. The journal records the restore as a marker and the
changes it made, in a new `epoch` (resourceVersions repeat older ones there).

Usage::

    with FakeApiServer() as api:
        api.create("nodes", {"metadata": {"name": "n1"}})
        api.write_kubeconfig(tmp_path / "kubeconfig")
"""

from __future__ import annotations

import base64
import copy
import io
import itertools
import json
import select
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testing.auth_reviews import PATHS as REVIEW_PATHS
from testing.auth_reviews import Reviews
from testing.patching import JSON_PATCH, PatchError, apply_patch, field_selector


@dataclass(frozen=True)
class Resource:
    """One served resource: where it lives on the wire and what its objects are called."""

    plural: str
    kind: str
    group_version: str  # "v1" (core) or "apps/v1"
    namespaced: bool = True

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"


    @property
    def key(self) -> str:
        """The double's name for the resource: the plural, `plural.group` outside core
        and apps (`events` is core, `events.events.k8s.io` the newer API)."""
        group = self.group_version.rpartition("/")[0]
        return self.plural if group in ("", "apps") or self.plural != "events" else f"{self.plural}.{group}"


RESOURCES: dict[str, Resource] = {
    r.key: r
    for r in (
        Resource("nodes", "Node", "v1", namespaced=False),
        Resource("pods", "Pod", "v1"),
        Resource("services", "Service", "v1"),
        Resource("replicationcontrollers", "ReplicationController", "v1"),
        Resource("replicasets", "ReplicaSet", "apps/v1"),
        Resource("statefulsets", "StatefulSet", "apps/v1"),
        # the rest of what kube-scheduler's informers list and watch (empty unless a
        # test creates some), and the events it writes
        Resource("namespaces", "Namespace", "v1", namespaced=False),
        Resource("persistentvolumes", "PersistentVolume", "v1", namespaced=False),
        Resource("persistentvolumeclaims", "PersistentVolumeClaim", "v1"),
        Resource("storageclasses", "StorageClass", "storage.k8s.io/v1", namespaced=False),
        Resource("csinodes", "CSINode", "storage.k8s.io/v1", namespaced=False),
        Resource("csidrivers", "CSIDriver", "storage.k8s.io/v1", namespaced=False),
        Resource("csistoragecapacities", "CSIStorageCapacity", "storage.k8s.io/v1"),
        Resource("poddisruptionbudgets", "PodDisruptionBudget", "policy/v1"),
        # what kube-scheduler v1.34+ lists too (dynamic resource allocation, attachments)
        Resource("resourceclaims", "ResourceClaim", "resource.k8s.io/v1"),
        Resource("resourceslices", "ResourceSlice", "resource.k8s.io/v1", namespaced=False),
        Resource("deviceclasses", "DeviceClass", "resource.k8s.io/v1", namespaced=False),
        Resource("volumeattachments", "VolumeAttachment", "storage.k8s.io/v1", namespaced=False),
        Resource("events", "Event", "v1"),
        Resource("events", "Event", "events.k8s.io/v1"),
        # leader election (kube-scheduler with leaderElect: true)
        Resource("leases", "Lease", "coordination.k8s.io/v1"),
    )
}
# (group/version, plural) -> the double's key, for request paths
_BY_PATH: dict[tuple[str, str], str] = {(r.group_version, r.plural): k for k, r in RESOURCES.items()}

Key = tuple[str, str]  # (namespace or "", name)


def status(code: int, reason: str, message: str) -> dict:
    """A `metav1.Status` failure body, as the API server sends for errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class ApiError(Exception):
    """A request the double refuses; carries the HTTP code and a Status body."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.body = status(code, reason, message)
        if details:
            self.body["details"] = details


@dataclass
class Faults:
    """Fault-injection knobs; tests set them, handler threads consume them.

    All counters count down as the faults fire, so a test sets ``cut_events = 1`` and
    the next event written to any watch stream is cut in the middle of its line and
    the connection dropped.
    """

    cut_events: int = 0  # next N event writes: send half a line, then drop the connection
    expire_watches: int = 0  # next N watch requests: ERROR 410 Expired whatever their RV
    fail_requests: int = 0  # next N matching requests answer `fail_status`
    fail_status: int = 500
    fail_match: str = ""  # substring of "METHOD /path?query" the failure applies to
    delay_seconds: float = 0.0  # sleep before answering every request (slow server)
    delay_match: str = ""  # only requests whose "METHOD /path?query" contains this
    # per request "METHOD /path?query" -> seconds to sleep first (0: none), besides the above
    delay_for: Any = None
    late_writes: bool = False  # a delayed write is applied even if its client went away meanwhile
    request_timeout: float = 0.0  # a write delayed past this is answered 504 then (0: never)
    hang_watches: bool = False  # new watch streams: headers, then nothing, never ended
    hang_agent: str = ""  # ... only those whose User-Agent contains this
    fired: Counter = field(default_factory=Counter)  # faults that fired, by counter name
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, name: str) -> bool:
        """Consume one unit of the counter `name`; True when the fault fires."""
        with self.lock:
            n = getattr(self, name)
            if n > 0:
                setattr(self, name, n - 1)
                self.fired[name] += 1
                return True
            return False

    def delay_of(self, request_line: str) -> float:
        """Seconds `request_line` sleeps before it is served."""
        delay = self.delay_seconds if self.delay_seconds and self.delay_match in request_line else 0.0
        if self.delay_for is not None:
            delay = max(delay, float(self.delay_for(request_line) or 0.0))
        return delay

    def take_failure(self, request_line: str) -> int | None:
        with self.lock:
            if self.fail_requests > 0 and self.fail_match in request_line:
                self.fail_requests -= 1
                self.fired["fail_requests"] += 1
                return self.fail_status
            return None


@dataclass
class _Event:
    rv: int
    type: str
    namespace: str
    obj: dict  # full object with kind/apiVersion, never mutated after creation
    prev: dict | None = None  # the object before a MODIFIED/DELETED (field-selector watches)
    lines: dict[str, bytes] = field(default_factory=dict)  # encoded once per type, for every watcher

    def line(self, type_: str) -> bytes:
        """The watch line of this event as `type_`, encoded once for all watchers (as
        the real API server's watch cache does), not once per watcher."""
        encoded = self.lines.get(type_)
        if encoded is None:
            encoded = self.lines[type_] = json.dumps({"type": type_, "object": self.obj}).encode() + b"\n"
        return encoded


@dataclass(frozen=True)
class Change:
    """One entry of the journal: a write to the truth, in resourceVersion order (within
    an epoch: a restore starts the next one, with a RESTORED marker of resource "")."""

    rv: int
    at: float  # time.monotonic() of the write
    resource: str
    type: str  # ADDED, MODIFIED, DELETED (RESTORED: the marker)
    obj: dict  # the object after the write (before it, for DELETED); never mutated
    epoch: int = 0
    restore: bool = False  # written by a restore: the checkpoint's object, whatever came before


@dataclass(frozen=True)
class Checkpoint:
    """The truth at one resourceVersion (`FakeApiServer.checkpoint`)."""

    rv: int
    objects: dict


TOO_LARGE = "Too large resource version"


class _Snapshot:
    """A list's consistent view, kept so that later pages come from the same moment."""

    def __init__(self, rv: int, items: list[dict]):
        self.rv = rv
        self.items = items  # the objects the list selected, in key order


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up (a watcher stopped, a process killed at teardown) ends
    its connection's thread quietly instead of printing a traceback. The listen backlog
    is socketserver's 5 otherwise: two dozen binds connecting at once on a loaded machine
    (parallel test runs) overflowed it and the kernel reset connections."""

    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeApiServer:
    """The truth plus an HTTP front end; see the module docstring."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        history: int = 100_000,
        bookmark_interval: float = 1.0,
        default_watch_timeout: float = 1800.0,
        journal: bool = False,
    ):
        self.faults = Faults()
        self.reviews = Reviews()  # TokenReview, SubjectAccessReview (testing.auth_reviews)
        self.journal: list[Change] | None = [] if journal else None
        self.history = history
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.requests: deque[str] = deque(maxlen=10_000)  # "METHOD /path?query" seen
        self.agents: deque[tuple[str, str]] = deque(maxlen=10_000)  # (User-Agent, request line)
        # requests ever put in `agents`: once it is full a position in it moves, so "the
        # requests since now" is a count (`agents_since`), never a position
        self.agents_total = 0
        # watch streams the server accepted (agent, resource, epoch): a watch from a
        # resourceVersion ahead of a restore is accepted once writes reach it (the watch
        # cache's catch-up), so the request line alone cannot say whether it was
        self.accepted_watches: deque[tuple[str, str, int]] = deque(maxlen=10_000)
        self._agents_lock = threading.Lock()
        self._cond = threading.Condition()
        self._rv = 1000
        self._objects: dict[str, dict[Key, dict]] = {p: {} for p in RESOURCES}
        self._log: dict[str, deque[_Event]] = {p: deque() for p in RESOURCES}
        self._oldest: dict[str, int] = {p: self._rv for p in RESOURCES}  # compacted below
        self._snapshots: dict[str, _Snapshot] = {}
        self._snap_ids = itertools.count(1)
        self._stopped = False
        # close_watches and restore calls so far: a stream or a wait that began before
        # one ends when it sees the count move (however long its thread took to run)
        self._closes = 0
        self._epoch = 0  # restores so far
        self.too_large_wait = 3.0  # the watch cache's wait for a resourceVersion it has not reached
        self._freezes: list[tuple[str, str]] = []  # freeze_watches calls (agent, resource), in order
        self._httpd = QuietServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        self._thread = threading.Thread(
            # a short poll: stop() returns at once instead of within up to 0.5 s
            target=self._httpd.serve_forever, args=(0.05,), name="fake-apiserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig pointing at this server (no auth) and return its path."""
        path = Path(path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "double", "user": {}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "double"}}],
            "current-context": "double",
        }
        path.write_text(json.dumps(config))
        return path

    # ---- the truth, from Python --------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def create(self, resource: str, obj: dict) -> dict:
        """Add an object (ADDED event); 409 ApiError if it exists. Returns the stored copy."""
        return self._write(resource, obj, create=True)

    def update(self, resource: str, obj: dict, precondition: str | None = None) -> dict:
        """Replace an object (MODIFIED event); 404 ApiError if missing. With a
        `precondition` resourceVersion (what an HTTP PUT carries), 409 Conflict unless it
        is the stored one, atomically: optimistic concurrency, which leader election
        relies on."""
        return self._write(resource, obj, create=False, precondition=precondition)

    def apply(self, resource: str, obj: dict) -> dict:
        """Create or replace, whichever applies."""
        with self._cond:
            exists = self._key(resource, obj) in self._objects[resource]
            return self._write(resource, obj, create=not exists)

    def delete(self, resource: str, name: str, namespace: str = "") -> dict:
        """Remove an object (DELETED event); 404 ApiError if missing."""
        with self._cond:
            key = (namespace if RESOURCES[resource].namespaced else "", name)
            old = self._objects[resource].pop(key, None)
            if old is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            self._rv += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._emit(resource, "DELETED", gone, old)
            return gone

    def patch(self, resource: str, name: str, namespace: str, body: dict, content_type: str,
              subresource: str = "") -> dict:
        """What `PATCH` does (see `testing.patching`): through the `status`
        subresource only `status` changes, otherwise everything but `status`."""
        with self._cond:
            key = (namespace if RESOURCES[resource].namespaced else "", name)
            old = self._objects[resource].get(key)
            if old is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            try:
                new = apply_patch(old, body, content_type)
            except PatchError as e:
                code = 415 if "content type" in str(e) or "JSON patch" in str(e) else 422
                raise ApiError(code, "UnsupportedMediaType" if code == 415 else "Invalid", str(e)) from None
            if subresource == "status":
                new = {**old, "status": new.get("status", {})}
            elif subresource:
                raise ApiError(404, "NotFound", f"PATCH of {resource}/{subresource} is not served")
            elif "status" in old:
                new["status"] = old["status"]
            new["metadata"] = {**new.get("metadata", {}), "name": name}
            return self._write(resource, new, create=False)

    def get(self, resource: str, name: str, namespace: str = "") -> dict | None:
        with self._cond:
            key = (namespace if RESOURCES[resource].namespaced else "", name)
            obj = self._objects[resource].get(key)
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, resource: str) -> list[dict]:
        """Deep copies of every object of a kind, with kind/apiVersion set."""
        with self._cond:
            return [copy.deepcopy(o) for _, o in sorted(self._objects[resource].items())]

    def scheduling_states(self, keys: Iterable[Key]) -> dict[Key, tuple[str, str, str, str]]:
        """(namespace, name) -> (spec.nodeName, the PodScheduled condition's reason and
        message, status.nominatedNodeName) for those of `keys` that exist, without
        copying the pods."""
        out = {}
        with self._cond:
            pods = self._objects["pods"]
            for k in keys:
                p = pods.get(k)
                if p is None:
                    continue
                cond = next((c for c in (p.get("status") or {}).get("conditions") or []
                             if c.get("type") == "PodScheduled"), {})
                out[k] = ((p.get("spec") or {}).get("nodeName") or "", cond.get("reason", ""),
                          cond.get("message", ""), (p.get("status") or {}).get("nominatedNodeName") or "")
        return out

    def all_objects(self) -> list[dict]:
        """Every object of every kind (the same documents a cluster file holds)."""
        return [o for r in RESOURCES for o in self.objects(r)]

    def bind(self, namespace: str, name: str, node: str) -> dict:
        """What `POST pods/{name}/binding` does: set spec.nodeName once (404/409 ApiError)."""
        with self._cond:
            pod = self._objects["pods"].get((namespace, name))
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            bound = pod.get("spec", {}).get("nodeName")
            if bound:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": '
                    f'pod {name} is already assigned to node "{bound}"',
                )
            new = copy.deepcopy(pod)
            new.setdefault("spec", {})["nodeName"] = node
            return self._write("pods", new, create=False)

    def terminate(self, namespace: str, name: str) -> dict:
        """Mark a pod terminating (deletionTimestamp set), as a graceful delete does."""
        with self._cond:
            pod = self.get("pods", name, namespace)
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            pod["metadata"]["deletionTimestamp"] = _now()
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
            return self._write("pods", pod, create=False)

    def load(self, objects: Iterable[dict], skip_unknown: bool = False) -> int:
        """Create many objects (kind-tagged documents, e.g. a cluster file); returns count.
        Kinds the double does not serve raise ValueError, or are skipped if asked."""
        served = {r.kind for r in RESOURCES.values()}
        n = 0
        for obj in objects:
            if skip_unknown and obj.get("kind") not in served:
                continue
            self.apply(plural_of(obj), obj)
            n += 1
        return n

    def agents_since(self, mark: int) -> list[tuple[str, str]]:
        """The (User-Agent, request line) pairs recorded after `agents_total` was `mark`
        (those still kept: the newest 10,000)."""
        with self._agents_lock:
            kept = list(self.agents)
            first = self.agents_total - len(kept)  # the count the oldest kept one was recorded at
        return kept[max(0, mark - first):]

    def watching_since_restore(self, agent: str, resource: str) -> bool:
        """Has a client whose User-Agent contains `agent` had a `resource` watch accepted
        since the last restore (from a resourceVersion the restored server holds or has
        reached since)?"""
        with self._agents_lock:
            return any(agent in who and r == resource and e == self._epoch
                       for who, r, e in self.accepted_watches)

    # ---- faults --------------------------------------------------------------------------

    def compact(self) -> int:
        """Forget all history (etcd compaction): watches from any older RV get 410."""
        with self._cond:
            for r in RESOURCES:
                self._log[r].clear()
                self._oldest[r] = self._rv
            self._snapshots.clear()
            return self._rv

    def checkpoint(self) -> Checkpoint:
        """The truth now (an etcd backup)."""
        with self._cond:
            return Checkpoint(self._rv, copy.deepcopy(self._objects))

    def restore(self, checkpoint: Checkpoint) -> int:
        """Put the truth and the resourceVersion back to `checkpoint` (an etcd restore
        and an API server restart): history is gone, every watch stream ends; clients
        holding a newer resourceVersion get 504 Too large resource version (see the
        module docstring). Returns how many objects changed."""
        with self._cond:
            self._epoch += 1
            self._rv = checkpoint.rv
            now = time.monotonic()
            if self.journal is not None:
                self.journal.append(Change(self._rv, now, "", "RESTORED", {}, self._epoch, True))
            changed = 0
            for resource in RESOURCES:
                before, after = self._objects[resource], checkpoint.objects[resource]
                for key in sorted(before.keys() | after.keys()):
                    old, new = before.get(key), after.get(key)
                    if old == new:
                        continue
                    changed += 1
                    if self.journal is not None:
                        type_ = "DELETED" if new is None else "ADDED" if old is None else "MODIFIED"
                        self.journal.append(Change(self._rv, now, resource, type_, copy.deepcopy(new or old),
                                                   self._epoch, True))
                self._objects[resource] = copy.deepcopy(after)
                self._log[resource].clear()
                self._oldest[resource] = self._rv
            self._snapshots.clear()
            self._closes += 1  # every watch stream ends; a new one starts from here
            self._cond.notify_all()
        return changed

    def _too_large(self, since: int, closes: int | None = None) -> dict | None:
        """Wait up to `too_large_wait` for the resourceVersion to reach `since`; the
        504 Status if it does not, or at once when the watches are closed (a restore)
        after the request began (`closes`: the count it began at; default now)."""
        deadline = time.monotonic() + self.too_large_wait
        with self._cond:
            if closes is None:
                closes = self._closes
            while self._rv < since:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed_since(closes):
                    body = status(504, "Timeout", f"Timeout: {TOO_LARGE}: {since}, current: {self._rv}")
                    body["details"] = {"causes": [{"reason": "ResourceVersionTooLarge", "message": TOO_LARGE}],
                                       "retryAfterSeconds": 1}
                    return body
                self._cond.wait(timeout=min(left, 0.2))
        return None

    def inject_event(self, resource: str, type_: str, obj: dict) -> int:
        """Send an event to watchers WITHOUT changing the truth (e.g. a MODIFIED or
        DELETED for an object no list ever returned). Returns its resourceVersion."""
        with self._cond:
            self._rv += 1
            obj = self._stamp(resource, copy.deepcopy(obj))
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._emit(resource, type_, obj)
            return self._rv

    def freeze_watches(self, agent: str = "", resource: str = "") -> None:
        """Every watch stream open now (whose client's User-Agent contains `agent`; only
        those of `resource`, e.g. "nodes", if given) falls silent for good: no events,
        no bookmarks, no end, the TCP connection open (a stuck proxy, a half-dead
        connection). New streams are served normally (unless `faults.hang_watches`)."""
        with self._cond:
            self._freezes.append((agent, resource))
            self._cond.notify_all()

    def close_watches(self) -> None:
        """End every open watch stream cleanly (as an API server restart would): each
        ends when its thread next looks, however busy the machine (a stream opened
        after this call is served normally)."""
        with self._cond:
            self._closes += 1
            self._cond.notify_all()

    def _closed_since(self, closes: int) -> bool:
        """Whether the server stopped or closed its watches since the count was
        `closes` (call with `_cond` held)."""
        return self._stopped or self._closes != closes

    # ---- internals -------------------------------------------------------------------------

    def _key(self, resource: str, obj: dict) -> Key:
        md = obj.get("metadata") or {}
        ns = md.get("namespace") or "default" if RESOURCES[resource].namespaced else ""
        return (ns, md.get("name", ""))

    def _stamp(self, resource: str, obj: dict) -> dict:
        res = RESOURCES[resource]
        obj["kind"] = res.kind
        obj["apiVersion"] = res.group_version
        md = obj.setdefault("metadata", {})
        if res.namespaced:
            md["namespace"] = md.get("namespace") or "default"
        else:
            md.pop("namespace", None)
        return obj

    def _write(self, resource: str, obj: dict, create: bool, precondition: str | None = None) -> dict:
        if resource not in RESOURCES:
            raise ApiError(404, "NotFound", f"the server could not find resource {resource!r}")
        obj = self._stamp(resource, copy.deepcopy(obj))
        md = obj["metadata"]
        if create and not md.get("name") and md.get("generateName"):
            md["name"] = f"{md['generateName']}{next(self._snap_ids):05x}"
        if not md.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        with self._cond:
            key = self._key(resource, obj)
            old = self._objects[resource].get(key)
            if create and old is not None:
                raise ApiError(409, "AlreadyExists", f'{resource} "{key[1]}" already exists')
            if not create and old is None:
                raise ApiError(404, "NotFound", f'{resource} "{key[1]}" not found')
            if precondition and old is not None and old["metadata"].get("resourceVersion") != precondition:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{key[1]}": the '
                                                "object has been modified; please apply your changes to the "
                                                "latest version and try again")
            self._rv += 1
            md["resourceVersion"] = str(self._rv)
            if old is None:
                md.setdefault("uid", f"uid-{resource}-{key[0]}-{key[1]}-{self._rv}")
                md.setdefault("creationTimestamp", _now())
            else:
                md["uid"] = old["metadata"].get("uid")
                md["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            self._objects[resource][key] = obj
            self._emit(resource, "ADDED" if old is None else "MODIFIED", obj, old)
            return copy.deepcopy(obj)

    def _emit(self, resource: str, type_: str, obj: dict, prev: dict | None = None) -> None:
        """Append to the history (caller holds the lock) and wake the watchers."""
        log = self._log[resource]
        log.append(_Event(self._rv, type_, obj["metadata"].get("namespace", ""), obj, prev))
        if self.journal is not None:
            self.journal.append(Change(self._rv, time.monotonic(), resource, type_, obj, self._epoch))
        while len(log) > self.history:
            self._oldest[resource] = log.popleft().rv
        self._cond.notify_all()

    def _list(self, resource: str, namespace: str, query: dict[str, str]) -> dict:
        res = RESOURCES[resource]
        selected = _selector(query)
        limit = int(query.get("limit") or 0)
        if limit < 0:
            raise ApiError(400, "BadRequest", "limit must be non-negative")
        token = query.get("continue")
        asked = query.get("resourceVersion") or ""
        if asked.isdigit() and int(asked) > 0 and not token:
            too_large = self._too_large(int(asked))
            if too_large is not None:
                raise ApiError(504, "Timeout", too_large["message"], too_large["details"])
        if token:
            snap_id, start = _decode_continue(token)
            with self._cond:
                snap = self._snapshots.get(snap_id)
            if snap is None:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter.",
                )
        else:
            with self._cond:
                rv, items = self._rv, sorted(self._objects[resource].items())
            # selected once, at the first page (stored objects are never mutated), and
            # later pages slice it: selecting the whole list again for every page made a
            # paged list of n objects cost n^2 / limit
            snap = _Snapshot(rv, [o for k, o in items
                                  if (not namespace or k[0] == namespace) and (selected is None or selected(o))])
            snap_id, start = f"s{next(self._snap_ids)}", 0
            if limit:
                with self._cond:
                    self._snapshots[snap_id] = snap
                    while len(self._snapshots) > 64:
                        self._snapshots.pop(next(iter(self._snapshots)))
        items = snap.items
        end = len(items) if not limit else start + limit
        page = items[start:end]
        metadata: dict[str, Any] = {"resourceVersion": str(snap.rv)}
        if end < len(items):
            metadata["continue"] = _encode_continue(snap_id, end)
            metadata["remainingItemCount"] = len(items) - end
        else:
            with self._cond:
                self._snapshots.pop(snap_id, None)
        return {
            "kind": f"{res.kind}List",
            "apiVersion": res.group_version,
            "metadata": metadata,
            "items": [_without_type(o) for o in page],
        }

    def _initial_events(self, resource: str, namespace: str, selected=None) -> tuple[int, list[_Event]]:
        """A watch without a resourceVersion starts with ADDED for everything that exists."""
        with self._cond:
            events = [
                _Event(int(o["metadata"]["resourceVersion"]), "ADDED", k[0], o)
                for k, o in sorted(self._objects[resource].items())
                if (not namespace or k[0] == namespace) and (selected is None or selected(o))
            ]
            return self._rv, events


def plural_of(obj: dict) -> str:
    """The resource name for a kind-tagged object ("Pod" -> "pods"); an `apiVersion`,
    when the object has one, picks between kinds of the same name ("Event")."""
    kind, version = obj.get("kind"), obj.get("apiVersion")
    for key, r in RESOURCES.items():
        if r.kind == kind and (not version or r.group_version == version):
            return key
    raise ValueError(f"the API-server double does not serve kind {kind!r}")


def _selector(query: dict[str, str]):
    """The `fieldSelector` of a request as a predicate (None: everything); 400 when the
    double cannot evaluate it. A `labelSelector` is refused: nothing here sends one."""
    if query.get("labelSelector"):
        raise ApiError(400, "BadRequest", "the double does not support labelSelector")
    try:
        return field_selector(query.get("fieldSelector") or "")
    except PatchError as e:
        raise ApiError(400, "BadRequest", str(e)) from None


def _without_type(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _encode_continue(snap_id: str, start: int) -> str:
    raw = json.dumps({"s": snap_id, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[str, int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(data["s"]), int(data["start"])
    except (ValueError, KeyError, TypeError) as e:
        raise ApiError(400, "BadRequest", f"invalid continue token: {e}") from None


def _parse_path(path: str) -> tuple[str, str, str, str]:
    """Split an API path into (resource, namespace, name, subresource); 404 otherwise."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest, gv = parts[2:], "v1"
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        rest, gv = parts[3:], f"{parts[1]}/{parts[2]}"
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":  # (namespaces/NAME alone is a Namespace)
        namespace, rest = rest[1], rest[2:]
    resource = _BY_PATH.get((gv, rest[0])) if rest else None
    if resource is None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    if namespace and not RESOURCES[resource].namespaced:
        raise ApiError(404, "NotFound", f"{resource} is not namespaced")
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    return resource, namespace, name, sub


def _handler_for(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fake-apiserver"
        # TCP_NODELAY, as Go's net/http (the real API server) sets it: headers and body
        # go out in two writes, and with Nagle the second waits for the client's delayed
        # ACK (~40 ms on Linux), which made every binding POST look 40 ms slow
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        # -- plumbing

        def _send_json(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _raw_body(self) -> bytes:
            cached = getattr(self, "_cached_body", None)
            if cached is not None:
                self._cached_body = None
                return cached
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _client_gone(self) -> bool:
            """The client closed its connection (its request context would be cancelled:
            a real API server does not apply a write whose client went away before it
            reached storage)."""
            try:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _body(self) -> dict:
            raw = self._raw_body()
            try:
                body = json.loads(raw or b"{}")
            except ValueError as e:
                raise ApiError(400, "BadRequest", f"request body is not JSON: {e}") from None
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "request body must be a JSON object")
            return body

        def _dispatch(self, method: str) -> None:
            line = f"{method} {self.path}"
            api.requests.append(line)
            with api._agents_lock:
                api.agents.append((self.headers.get("User-Agent") or "", line))
                api.agents_total += 1
            delay = api.faults.delay_of(line)
            if delay:
                self._cached_body = self._raw_body()  # read, so a closed client shows as EOF
                if method != "GET" and not self._slow_write(method, line, delay):
                    return
                if method == "GET":
                    time.sleep(delay)
            try:
                code = api.faults.take_failure(line)
                if code is not None:
                    self._raw_body()  # read: the kept-alive connection stays in step
                    raise ApiError(code, "InternalError", f"injected failure {code}")
                url = urlsplit(self.path)
                if method == "POST" and url.path in REVIEW_PATHS:
                    review = self._body()
                    review["status"] = api.reviews.answer(REVIEW_PATHS[url.path], review.get("spec") or {})
                    return self._send_json(201, review)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                resource, ns, name, sub = _parse_path(url.path)
                getattr(self, f"_{method.lower()}")(resource, ns, name, sub, query)
            except ApiError as e:
                self._send_json(e.code, e.body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _slow_write(self, method: str, line: str, delay: float) -> bool:
            """Sleep `delay` before a write; False when it is answered here: past the
            server's `request_timeout` (504 then; the write lands at the end of the
            delay only with `late_writes`), or its client went away meanwhile (not
            applied unless `late_writes`)."""
            faults = api.faults
            timeout = faults.request_timeout
            if timeout and delay > timeout:
                time.sleep(timeout)
                self._send_json(504, status(504, "Timeout", "Timeout: request did not complete within "
                                            "requested timeout - context deadline exceeded"))
                self.close_connection = True
                with faults.lock:
                    faults.fired["timed_out_writes"] += 1
                if faults.late_writes:
                    time.sleep(delay - timeout)
                    self._apply_unanswered(method, line)
                return False
            time.sleep(delay)
            if self._client_gone():
                late = faults.late_writes
                self.close_connection = True
                if late:
                    self._apply_unanswered(method, line)
                with faults.lock:  # counted once decided and done: a test waits for the count
                    faults.fired["late_writes" if late else "aborted_writes"] += 1
                return False
            return True

        def _apply_unanswered(self, method: str, line: str) -> None:
            """Apply a write whose answer nobody reads (its client left, or was already
            answered): the response goes nowhere."""
            self.wfile = io.BytesIO()
            try:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                getattr(self, f"_{method.lower()}")(*_parse_path(url.path), query)
            except ApiError:
                pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        # -- verbs

        def _get(self, resource: str, ns: str, name: str, sub: str, query: dict) -> None:
            if sub == "status" and name:
                sub = ""  # GET pods/NAME/status: the object, as the real server answers
            if sub:
                raise ApiError(405, "MethodNotAllowed", f"GET {sub} is not supported")
            if name:
                obj = api.get(resource, name, ns)
                if obj is None:
                    raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
                return self._send_json(200, obj)
            if query.get("watch") in ("true", "1"):
                return self._watch(resource, ns, query)
            self._send_json(200, api._list(resource, ns, query))

        def _post(self, resource: str, ns: str, name: str, sub: str, query: dict) -> None:
            body = self._body()
            if resource == "pods" and name and sub == "binding":
                target = (body.get("target") or {}).get("name")
                if not target:
                    raise ApiError(422, "Invalid", "target.name: Required value")
                api.bind(ns or "default", name, target)
                return self._send_json(
                    201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
                )
            if name or sub:
                raise ApiError(405, "MethodNotAllowed", "POST is only for collections and pods/binding")
            if ns:
                body.setdefault("metadata", {})["namespace"] = ns
            self._send_json(201, api.create(resource, body))

        def _put(self, resource: str, ns: str, name: str, sub: str, query: dict) -> None:
            body = self._body()
            if not name or sub:
                raise ApiError(405, "MethodNotAllowed", "PUT needs an object path")
            body.setdefault("metadata", {})["name"] = name
            if ns:
                body["metadata"]["namespace"] = ns
            self._send_json(200, api.update(resource, body, precondition=body["metadata"].get("resourceVersion")))

        def _delete(self, resource: str, ns: str, name: str, sub: str, query: dict) -> None:
            options = self._body()  # DeleteOptions (read it all: the connection is kept alive)
            if not name or sub:
                raise ApiError(405, "MethodNotAllowed", "DELETE needs an object path")
            uid = (options.get("preconditions") or {}).get("uid")
            if uid:
                current = api.get(resource, name, ns)
                if current is not None and current["metadata"].get("uid") != uid:
                    raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                   f"UID in object meta: {current['metadata'].get('uid')}")
            self._send_json(200, api.delete(resource, name, ns))

        def _patch(self, resource: str, ns: str, name: str, sub: str, query: dict) -> None:
            content_type = self.headers.get("Content-Type") or ""
            if content_type.startswith(JSON_PATCH):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                raise ApiError(415, "UnsupportedMediaType", "the double does not support JSON patch")
            body = self._body()
            if not name:
                raise ApiError(405, "MethodNotAllowed", "PATCH needs an object path")
            self._send_json(200, api.patch(resource, name, ns, body, content_type, sub))

        # -- watch

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _watch(self, resource: str, ns: str, query: dict) -> None:
            closes = api._closes  # a close_watches or restore from now on ends this stream
            res = RESOURCES[resource]
            bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
            timeout = float(query.get("timeoutSeconds") or api.default_watch_timeout)
            selected = _selector(query)
            rv_arg = query.get("resourceVersion") or ""
            try:
                since = int(rv_arg) if rv_arg else 0
            except ValueError:
                raise ApiError(400, "BadRequest", f"invalid resourceVersion {rv_arg!r}") from None
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if api.faults.take("expire_watches") or (since and since < api._oldest[resource]):
                with api._cond:
                    current = api._rv
                err = status(410, "Expired", f"too old resource version: {since} ({current})")
                self._chunk(json.dumps({"type": "ERROR", "object": err}).encode() + b"\n")
                return self._chunk(b"")
            too_large = api._too_large(since, closes) if since else None
            if too_large is not None:
                self._chunk(json.dumps({"type": "ERROR", "object": too_large}).encode() + b"\n")
                return self._chunk(b"")
            agent = self.headers.get("User-Agent") or ""
            with api._cond:
                epoch = len(api._freezes)
                restores = api._epoch if api._closes == closes else None  # None: ends at once
            if restores is not None:
                with api._agents_lock:
                    api.accepted_watches.append((agent, resource, restores))
            if api.faults.hang_watches and api.faults.hang_agent in agent:
                return self._silent(closes)
            pending: list[_Event] = []
            if since == 0:
                since, pending = api._initial_events(resource, ns, selected)
            # a streaming list (client-go's WatchList, kube-scheduler v1.34+): the current
            # objects, then a bookmark that says they are all there
            initial_end = query.get("sendInitialEvents") in ("true", "1")
            deadline = time.monotonic() + timeout
            next_bookmark = time.monotonic() + api.bookmark_interval
            while True:
                for ev in pending:
                    type_ = ev.type if selected is None else _selected_type(ev, selected)
                    if type_ and not self._send_event(type_, ev.obj, ev.line(type_)):
                        return
                pending = []
                if initial_end:
                    initial_end = False
                    mark = {"kind": res.kind, "apiVersion": res.group_version, "metadata": {
                        "resourceVersion": str(since), "annotations": {"k8s.io/initial-events-end": "true"}}}
                    if not self._send_event("BOOKMARK", mark):
                        return
                now = time.monotonic()
                if now >= deadline:
                    return self._chunk(b"")
                if bookmarks and now >= next_bookmark:
                    next_bookmark = now + api.bookmark_interval
                    mark = {
                        "kind": res.kind,
                        "apiVersion": res.group_version,
                        "metadata": {"resourceVersion": str(since)},
                    }
                    if not self._send_event("BOOKMARK", mark):
                        return
                with api._cond:
                    if api._closed_since(closes):
                        return self._chunk(b"")
                    if any(a in agent and r in ("", resource) for a, r in api._freezes[epoch:]):
                        break
                    log = api._log[resource]
                    if since < api._oldest[resource]:
                        err = status(410, "Expired", f"too old resource version: {since}")
                        self._send_event("ERROR", err)
                        return self._chunk(b"")
                    if not log or log[-1].rv <= since:
                        # Nothing new for this resource up to the global RV: progress
                        # (what a BOOKMARK reports) moves on, as the watch cache's does.
                        since = max(since, api._rv)
                        wait = min(deadline, next_bookmark if bookmarks else deadline) - now
                        api._cond.wait(timeout=max(0.0, min(wait, 0.5)))
                        continue
                    pending = _events_after(log, since, ns)
                    since = log[-1].rv
            self._silent(closes)

        def _silent(self, closes: int) -> None:
            """Send nothing more and keep the connection open until the server stops or
            closes its watches (since the count was `closes`)."""
            with api._cond:
                while not api._closed_since(closes):
                    api._cond.wait(timeout=0.5)
            self.close_connection = True

        def _send_event(self, type_: str, obj: dict, line: bytes = b"") -> bool:
            line = line or json.dumps({"type": type_, "object": obj}).encode() + b"\n"
            if type_ != "BOOKMARK" and api.faults.take("cut_events"):
                half = line[: max(1, len(line) // 2)]
                self.wfile.write(b"%x\r\n%s" % (len(line), half))
                self.wfile.flush()
                self.close_connection = True
                return False
            try:
                self._chunk(line)
            except (BrokenPipeError, ConnectionResetError):
                return False
            return True

    return Handler


def _selected_type(ev: _Event, selected) -> str:
    """The event a field-selector watch sends for `ev` ("" for none): an object entering
    the selection is ADDED, one leaving it DELETED, as the watch cache filters."""
    now = ev.type != "DELETED" and selected(ev.obj)
    before = ev.prev is not None and selected(ev.prev)
    if ev.type == "ADDED" or ev.prev is None:
        return ev.type if (selected(ev.obj)) else ""
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    return "DELETED" if before else ""


def _events_after(log: deque[_Event], since: int, namespace: str) -> list[_Event]:
    """The retained events newer than `since`, walking back from the newest (the log
    is in RV order): a watch that keeps up costs what it receives, as with the real API
    server's watch cache, not the length of the history (up to 100,000 events; reading
    a deque from the front, or by index, costs that length on every wake-up)."""
    newer: list[_Event] = []
    for event in reversed(log):
        if event.rv <= since:
            break
        if not namespace or event.namespace == namespace:
            newer.append(event)
    newer.reverse()
    return newer
