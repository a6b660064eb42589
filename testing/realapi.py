"""The API-server double's Python interface over a real kube-apiserver.

Scenario code written for `testing.apiserver.FakeApiServer` (`create`, `update`,
`patch`, `delete`, `get`, `objects`, `scheduling_states`, `journal` for the truth's
replay) runs unchanged against a real control plane through `RealApi`. What differs is
what a real cluster needs and the double does not:

- **No kubelet**: an object's `status` is written through the status subresource after
  it is created (nodes' allocatable, a bound volume's phase), and a pod that gets a
  `deletionTimestamp` (a preemption victim, a graceful delete) is force-deleted
  (grace period 0), as a kubelet confirms a pod's end.
- **Priority admission**: a pod may not state `spec.priority` itself; a pod built with
  one gets a PriorityClass of that value (`prio-N`) instead, which admission turns into
  the same `spec.priority`.
- **Namespaces** are created before the first object in them (there is no namespace
  controller to delete them again, so they are kept between tests).
- **The journal** is recorded from watches of nodes and pods (`Recorder`): each change
  with its resourceVersion and the time it was seen, the double's `Change` records,
  appended as each watch delivers (so not in resourceVersion order across the two:
  the truth sorts them, `truth.in_version_order`).

Events: a real server serves one store under two APIs (core/v1 and events.k8s.io/v1),
so `objects("events")` lists them once, in the core form, and `objects("events.events.k8s.io")`
is empty (the double keeps the two apart).
"""

from __future__ import annotations

import copy
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testing.apiserver import RESOURCES, ApiError, Change, Resource
from testing.controlplane import TEST_USERS, ControlPlane, KubeClient

Key = tuple[str, str]

EXTRA = [
    Resource("deployments", "Deployment", "apps/v1"),
    Resource("daemonsets", "DaemonSet", "apps/v1"),
    Resource("jobs", "Job", "batch/v1"),
    Resource("cronjobs", "CronJob", "batch/v1"),
    Resource("serviceaccounts", "ServiceAccount", "v1"),
    Resource("configmaps", "ConfigMap", "v1"),
    Resource("endpoints", "Endpoints", "v1"),
    Resource("priorityclasses", "PriorityClass", "scheduling.k8s.io/v1", namespaced=False),
    Resource("validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
             "admissionregistration.k8s.io/v1", namespaced=False),
    Resource("clusterroles", "ClusterRole", "rbac.authorization.k8s.io/v1", namespaced=False),
    Resource("clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io/v1", namespaced=False),
    Resource("roles", "Role", "rbac.authorization.k8s.io/v1"),
    Resource("rolebindings", "RoleBinding", "rbac.authorization.k8s.io/v1"),
]
KINDS: dict[str, Resource] = {**RESOURCES, **{r.plural: r for r in EXTRA}}
WITH_STATUS = {"nodes", "pods", "persistentvolumes", "persistentvolumeclaims", "deployments", "jobs",
               "cronjobs", "replicasets", "statefulsets", "daemonsets", "replicationcontrollers"}
FORCE = {"gracePeriodSeconds": 0}


def resource_of(obj: dict) -> str:
    """The KINDS key of a kind-tagged object."""
    kind, version = obj.get("kind"), obj.get("apiVersion")
    for key, r in KINDS.items():
        if r.kind == kind and (not version or r.group_version == version):
            return key
    raise ValueError(f"no resource known for {version} {kind}")


def path_of(resource: str, namespace: str = "", name: str = "", sub: str = "") -> str:
    r = KINDS[resource]
    parts = [r.prefix]
    if r.namespaced and namespace:
        parts += ["namespaces", namespace]
    parts.append(r.plural)
    if name:
        parts.append(name)
    if sub:
        parts.append(sub)
    return "/".join(parts)


def _tagged(resource: str, obj: dict) -> dict:
    r = KINDS[resource]
    return {"apiVersion": r.group_version, "kind": r.kind, **obj}


def _scheduling_state(pod: dict) -> tuple[str, str, str, str]:
    cond = next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == "PodScheduled"), {})
    return ((pod.get("spec") or {}).get("nodeName") or "", cond.get("reason", ""), cond.get("message", ""),
            (pod.get("status") or {}).get("nominatedNodeName") or "")


@dataclass
class _Watched:
    resource: str
    cache: dict[Key, dict]
    synced: threading.Event


class Recorder:
    """Watches nodes and pods from the moment it starts: a cache of each (what
    `scheduling_states` reads) and the journal of every change. Acts as the kubelet
    for terminating pods (force-deletes them)."""

    def __init__(self, client: KubeClient, kubelet: bool = True) -> None:
        self.client = client
        self.kubelet = kubelet
        self.journal: list[Change] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watched = {r: _Watched(r, {}, threading.Event()) for r in ("nodes", "pods")}
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True, name=f"recorder-{r}")
                         for r, w in self._watched.items()]
        self._killing: set[str] = set()
        self._deleting: dict[str, float] = {}  # uid -> when its force delete was sent
        self._writing: dict[tuple[str, Key], float] = {}  # a test's node write -> when it was sent
        self._conns: list = []  # the open watch connections

    def writing(self, resource: str, key: Key) -> None:
        """A node write is being sent now: the next event of that node is dated now, not
        when this watch delivers it (kube-scheduler and the extender may see it first)."""
        if resource == "nodes":
            with self._lock:
                self._writing.setdefault((resource, key), time.monotonic())

    def _opened(self, conn) -> None:
        with self._lock:
            self._conns.append(conn)

    def start(self, timeout: float = 60.0) -> Recorder:
        for t in self._threads:
            t.start()
        for w in self._watched.values():
            if not w.synced.wait(timeout):
                raise RuntimeError(f"the {w.resource} watch did not start: {self.errors[-3:]}")
        return self

    def stop(self) -> None:
        """End the watches now (an open watch would hold up the API server's shutdown)."""
        self._stop.set()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:  # the reading thread sees the end of its stream and returns
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cache(self, resource: str) -> dict[Key, dict]:
        return self._watched[resource].cache

    def _record(self, w: _Watched, type_: str, obj: dict, rv: str = "") -> None:
        """One change into the cache and the journal; `rv`: its resourceVersion when not
        the object's own (a deletion a relist found: the list's)."""
        md = obj["metadata"]
        key = (md.get("namespace") or "", md["name"])
        obj = _tagged(w.resource, obj)
        at = time.monotonic()
        with self._lock:
            # what its own force delete did to a pod (the last update, the deletion) is
            # dated when it asked: the scheduler may see the pod gone, and place the
            # preemptor, before this watch delivers it (both at one time: journal order)
            asked = self._deleting.get(md.get("uid", ""), self._writing.pop((w.resource, key), None))
            if asked is not None:
                at = min(at, asked)
            if type_ == "DELETED":
                w.cache.pop(key, None)
                self._deleting.pop(md.get("uid", ""), None)
            else:
                w.cache[key] = obj
            self.journal.append(Change(int(rv or md["resourceVersion"]), at, w.resource, type_, obj))
        if (self.kubelet and w.resource == "pods" and type_ != "DELETED" and md.get("deletionTimestamp")
                and md["uid"] not in self._killing):
            self._killing.add(md["uid"])
            threading.Thread(target=self._force_delete, args=(obj,), daemon=True).start()

    def _force_delete(self, pod: dict) -> None:
        md = pod["metadata"]
        body = {"kind": "DeleteOptions", "apiVersion": "v1", **FORCE, "preconditions": {"uid": md["uid"]}}
        with self._lock:
            self._deleting[md["uid"]] = time.monotonic()
        try:
            self.client.call("DELETE", path_of("pods", md["namespace"], md["name"]), body)
        except (ApiError, OSError) as exc:
            if getattr(exc, "code", 0) not in (404, 409):
                self.errors.append(f"force delete {md['namespace']}/{md['name']}: {exc}")

    def _relist(self, w: _Watched) -> str:
        listed = self.client.call("GET", path_of(w.resource))
        seen = set()
        for item in listed["items"]:
            md = item["metadata"]
            key = (md.get("namespace") or "", md["name"])
            seen.add(key)
            old = w.cache.get(key)
            if old is None or old["metadata"]["resourceVersion"] != md["resourceVersion"]:
                self._record(w, "ADDED" if old is None else "MODIFIED", item)
        # gone by the list's version (its own is when it was last written): the journal
        # is read in resourceVersion order (`truth.in_version_order`)
        for key in [k for k in w.cache if k not in seen]:
            self._record(w, "DELETED", w.cache[key], listed["metadata"]["resourceVersion"])
        return listed["metadata"]["resourceVersion"]

    def _run(self, w: _Watched) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist(w)
                    w.synced.set()
                for event in self.client.watch(path_of(w.resource), rv, timeout_seconds=60, opened=self._opened):
                    if self._stop.is_set():
                        return
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        rv = ""  # 410 Gone: list again
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if event.get("type") != "BOOKMARK":
                        self._record(w, event["type"], obj)
            except Exception as exc:  # a broken stream, whatever its symptom: watch again
                if self._stop.is_set():
                    return
                self.errors.append(f"{w.resource}: {exc}")
                time.sleep(0.5)


class RealReviews:
    """`FakeApiServer.reviews` against a real API server: the users are the control
    plane's static-token ones (`TEST_USERS`), and a grant is RBAC (a ClusterRole and its
    binding, or a RoleBinding in `namespace`), waited for until the authorizer applies it
    (the extender's SubjectAccessReview must see it)."""

    def __init__(self, api: RealApi) -> None:
        self.api = api
        self.granted: set[tuple] = set()

    def token(self, token: str, username: str, groups: list[str] | None = None, uid: str = "") -> None:
        if TEST_USERS.get(token) != username or groups:
            raise ValueError(f"a real API server knows only the static test users {TEST_USERS} "
                             f"(testing.controlplane.TEST_USERS), not {token!r} as {username!r}")

    def grant(self, subject: str, verb: str, resource: str = "", namespace: str = "", name: str = "",
              path: str = "") -> None:
        key = (subject, verb, resource, namespace, name, path)
        if key in self.granted:
            return
        role = f"test-grant-{zlib.crc32(repr(key).encode()):08x}"
        rule: dict[str, Any] = ({"nonResourceURLs": [path], "verbs": [verb]} if path else
                                {"apiGroups": [""], "resources": [resource or "*"], "verbs": [verb]})
        if name:
            rule["resourceNames"] = [name]
        kind, who = ("Group", subject.removeprefix("group:")) if subject.startswith("group:") else ("User", subject)
        binding = {"metadata": {"name": role}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                          "kind": "ClusterRole", "name": role},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": who}]}
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        where = f"{rbac}/namespaces/{namespace}/rolebindings" if namespace else f"{rbac}/clusterrolebindings"
        if namespace:
            self.api.ensure_namespace(namespace)
        for url, body in ((f"{rbac}/clusterroles", {"metadata": {"name": role}, "rules": [rule]}),
                          (where, binding)):
            try:
                self.api.client.call("POST", url, body)
            except ApiError as exc:
                if exc.code != 409:
                    raise
        attributes = ({"nonResourceAttributes": {"path": path, "verb": verb}} if path else
                      {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace,
                                              "name": name}})
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user" if kind == "User" else "groups": who if kind == "User" else [who],
                           **attributes}}
        deadline = time.monotonic() + 60
        while not self.api.client.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                       review)["status"].get("allowed"):
            if time.monotonic() > deadline:
                raise AssertionError(f"RBAC grant {key} not in effect after 60 s")
            time.sleep(0.05)
        self.granted.add(key)


class RealApi:
    """`FakeApiServer`'s methods for the tests, against a real API server (see the
    module docstring). `start()` begins recording; `stop()` ends the watches."""

    def __init__(self, plane: ControlPlane, kubelet: bool = True) -> None:
        self.plane = plane
        self.client = plane.admin()
        self.recorder = Recorder(plane.admin(), kubelet)
        self.on_stop: list[Callable[[], None]] = []  # what tests started beside it (forwarders)
        self._namespaces: set[str] = set()
        self.reviews = RealReviews(self)  # the users /explain and /drift are asked for

    # -- lifecycle (what E2ECluster calls on the double)

    def start(self) -> RealApi:
        self.recorder.start()
        return self

    def stop(self) -> None:
        self.recorder.stop()
        self.client.close()
        for stop in self.on_stop:
            stop()

    @property
    def journal(self) -> list[Change]:
        return self.recorder.journal

    @property
    def url(self) -> str:
        return self.plane.url

    def write_kubeconfig(self, path: str | Path) -> Path:
        """The admin's kubeconfig (the user in a test: kubectl, `kubectl extender`)."""
        return self.plane.kubeconfig(Path(path))

    # -- writes

    def ensure_namespace(self, namespace: str) -> None:
        if not namespace or namespace in self._namespaces:
            return
        try:
            self.client.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                             "metadata": {"name": namespace}})
        except ApiError as exc:
            if exc.code != 409:
                raise
        self._namespaces.add(namespace)

    def _priority_class(self, value: int) -> str:
        name = f"prio-{value}"
        try:
            self.client.call("POST", path_of("priorityclasses"), {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value})
        except ApiError as exc:
            if exc.code != 409:
                raise
        return name

    def _admissible(self, resource: str, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        obj.pop("status", None)
        md = obj.setdefault("metadata", {})
        for field in ("resourceVersion", "uid", "creationTimestamp"):
            md.pop(field, None)
        if resource == "pods":
            spec = obj.get("spec") or {}
            priority = spec.pop("priority", None)
            if priority and not spec.get("priorityClassName"):
                spec["priorityClassName"] = self._priority_class(int(priority))
        return _tagged(resource, obj)

    def _namespace_of(self, resource: str, obj: dict) -> str:
        if not KINDS[resource].namespaced:
            return ""
        namespace = obj.get("metadata", {}).get("namespace") or "default"
        obj.setdefault("metadata", {})["namespace"] = namespace
        return namespace

    def create(self, resource: str, obj: dict) -> dict:
        """POST the object, then its `status` through the status subresource."""
        status = obj.get("status")
        body = self._admissible(resource, obj)
        namespace = self._namespace_of(resource, body)
        self.ensure_namespace(namespace)
        stored = self._post(resource, namespace, body)
        if status and resource in WITH_STATUS:
            stored = self.client.call("PATCH", path_of(resource, namespace, body["metadata"]["name"], "status"),
                                      {"status": status}, content_type="application/merge-patch+json")
        return stored

    def _post(self, resource: str, namespace: str, body: dict, timeout: float = 60.0) -> dict:
        """POST; a PriorityClass just created may not be in the admission plugin's cache
        yet ("no PriorityClass with name ... was found"): asked again until it is."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.client.call("POST", path_of(resource, namespace), body)
            except ApiError as exc:
                if "no PriorityClass with name" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def update(self, resource: str, obj: dict, precondition: str | None = None) -> dict:
        """PUT (the stored resourceVersion unless `precondition` names one)."""
        namespace = self._namespace_of(resource, obj)
        name = obj["metadata"]["name"]
        self.recorder.writing(resource, (namespace, name))
        body = _tagged(resource, copy.deepcopy(obj))
        if precondition:
            body["metadata"]["resourceVersion"] = precondition
        elif not body["metadata"].get("resourceVersion"):
            body["metadata"]["resourceVersion"] = self.client.call(
                "GET", path_of(resource, namespace, name))["metadata"]["resourceVersion"]
        return self.client.call("PUT", path_of(resource, namespace, name), body)

    def apply(self, resource: str, obj: dict) -> dict:
        try:
            return self.create(resource, obj)
        except ApiError as exc:
            if exc.code != 409:
                raise
            current = self.get(resource, obj["metadata"]["name"], obj["metadata"].get("namespace", ""))
            body = copy.deepcopy(obj)
            body.pop("status", None)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return self.update(resource, body)

    def delete(self, resource: str, name: str, namespace: str = "") -> dict:
        """A forced delete (grace period 0: no kubelet waits for it)."""
        namespace = (namespace or "default") if KINDS[resource].namespaced else ""
        self.recorder.writing(resource, (namespace, name))
        return self.client.call("DELETE", path_of(resource, namespace, name),
                                {"kind": "DeleteOptions", "apiVersion": "v1", **FORCE})

    def patch(self, resource: str, name: str, namespace: str, body: dict, content_type: str,
              subresource: str = "") -> dict:
        namespace = (namespace or "default") if KINDS[resource].namespaced else ""
        self.recorder.writing(resource, (namespace, name))
        return self.client.call("PATCH", path_of(resource, namespace, name, subresource), body,
                                content_type=content_type)

    def bind(self, namespace: str, name: str, node: str) -> dict:
        return self.client.call("POST", path_of("pods", namespace, name, "binding"), {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    def load(self, objects: Iterable[dict], skip_unknown: bool = False) -> int:
        n = 0
        for obj in objects:
            if obj.get("kind") == "List":
                n += self.load(obj.get("items") or [], skip_unknown)
                continue
            try:
                resource = resource_of(obj)
            except ValueError:
                if skip_unknown:
                    continue
                raise
            self.apply(resource, obj)
            n += 1
        return n

    # -- reads

    def get(self, resource: str, name: str, namespace: str = "") -> dict | None:
        namespace = (namespace or "default") if KINDS[resource].namespaced else ""
        try:
            return _tagged(resource, self.client.call("GET", path_of(resource, namespace, name)))
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def objects(self, resource: str) -> list[dict]:
        """Every object of a kind, listed now (kind-tagged, sorted by namespace/name)."""
        if resource == "events.events.k8s.io":
            return []
        items = self.client.call("GET", path_of(resource))["items"]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return [_tagged(resource, o) for o in items]

    def scheduling_states(self, keys: Iterable[Key]) -> dict[Key, tuple[str, str, str, str]]:
        """From the recorder's watch cache (cheap enough to poll)."""
        pods = self.recorder.cache("pods")
        return {k: _scheduling_state(p) for k in keys if (p := pods.get(k)) is not None}

    def wait_seen(self, resource: str, keys: Iterable[Key], timeout: float = 60.0) -> None:
        """Until the recorder's cache holds every key (after a create)."""
        deadline = time.monotonic() + timeout
        keys = list(keys)
        while any(k not in self.recorder.cache(resource) for k in keys):
            if time.monotonic() > deadline:
                raise AssertionError(f"{resource} never seen by the watch: {keys[:3]}")
            time.sleep(0.05)
