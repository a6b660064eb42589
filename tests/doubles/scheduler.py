"""A kube-scheduler simulator that drives a real extender over HTTP.

Written from kube-scheduler v1.35's `schedule_one.go`, `extender.go` and
`framework/preemption/preemption.go` (read, not copied). What it keeps of them:

* one scheduling cycle at a time (`schedule_one`): the in-tree filters this profile
  still runs (NodeResourcesFit on cpu/memory; the four plugins the extender replaces
  are disabled), then the extender's `filter` on the survivors (`nodeCacheCapable`:
  NodeNames), FailedNodes -> Unschedulable, FailedAndUnresolvableNodes ->
  UnschedulableAndUnresolvable;
* one feasible node: taken without scoring; several: in-tree NodeResourcesFit
  (LeastAllocated, weight 1) + extender score x weight x 10, `selectHost` (uniformly at
  random among the top scores, as upstream's reservoir sampling);
* assume in the scheduler's cache, then the binding cycle in another thread: a random
  0-5 ms delay (PreBind work), then the extender's `bind`; a failure forgets the pod
  and re-queues it;
* PostFilter (DefaultPreemption): candidates are nodes not UnschedulableAndUnresolvable;
  victims per node by removing every lower-priority pod, checking the in-tree filters
  and reprieving the most important victims that still allow a fit; then the
  extender's `preempt` (NodeNameToMetaVictims; a node it leaves out is dropped); pick
  the candidate (lowest top victim priority, then sum, then count), evict its victims,
  set the preemptor's nominatedNodeName and re-queue it;
* failed pods are retried with an exponential backoff, a bounded number of times.

`percentageOfNodesToScore` is 100 (as in manifests/): every node is checked and every
feasible one goes to the extender. The in-tree work is vectorised with numpy (requested
and allocatable cpu/memory as one array per cluster), so at 5,000 nodes the simulator's
own cost per pod stays small next to the extender's; `Stats` and `ExtenderClient.timings`
split a cycle's wall clock into the extender's round trips and the simulator's own work.

The cluster truth lives in the API-server double (`tests.doubles.apiserver`); the
simulator's cache is its own (truth plus assumed pods), as kube-scheduler's is.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import orjson

from tests.doubles.apiserver import FakeApiServer

MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"
ERR_FIT = "Insufficient cpu or memory"

_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(text: Any, milli: bool = False) -> int:
    """A resource quantity as an integer (millicores when `milli`, else units)."""
    s = str(text)
    if s.endswith("m"):
        value = float(s[:-1]) / 1000
    else:
        for suffix, factor in _UNITS.items():
            if s.endswith(suffix):
                value = float(s[: -len(suffix)]) * factor
                break
        else:
            value = float(s)
    return round(value * 1000) if milli else round(value)


def requests_of(pod: dict) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the pod requests (sum of its containers)."""
    cpu = mem = 0
    for c in pod.get("spec", {}).get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += quantity(req.get("cpu", 0), milli=True)
        mem += quantity(req.get("memory", 0))
    return cpu, mem


def allocatable_of(node: dict) -> tuple[int, int]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return quantity(alloc.get("cpu", "1000"), milli=True), quantity(alloc.get("memory", "1Ti"))


def key_of(pod: dict) -> tuple[str, str]:
    md = pod["metadata"]
    return md.get("namespace") or "default", md["name"]


def priority_of(pod: dict) -> int:
    return int(pod.get("spec", {}).get("priority") or 0)


class ExtenderClient:
    """HTTP/1.1 keep-alive calls to the extender's verbs, one connection per thread.

    `timings[verb]` = [calls, seconds] of the round trips alone (request written to
    response read); encoding and decoding the JSON is the caller's (the scheduler's) work."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.prefix = parts.hostname, parts.port, parts.path.rstrip("/")
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self.timings: dict[str, list[float]] = {}
        self._timing_lock = threading.Lock()

    def call(self, verb: str, args: dict) -> Any:
        body = orjson.dumps(args)  # compact, as Go writes it
        for attempt in (1, 2):  # a kept-alive connection the server closed: reconnect once
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self._all.append(conn)
            try:
                started = time.perf_counter()
                conn.request("POST", f"{self.prefix}/{verb}", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                elapsed = time.perf_counter() - started
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                continue
            with self._timing_lock:
                slot = self.timings.setdefault(verb, [0, 0.0])
                slot[0] += 1
                slot[1] += elapsed
            if resp.status != 200:  # extender.go: any other code is an error
                raise RuntimeError(f"{verb}: HTTP {resp.status}: {data[:300]!r}")
            return orjson.loads(data)
        raise AssertionError("unreachable")

    def close(self) -> None:
        for conn in self._all:
            conn.close()


@dataclass
class Stats:
    scheduled: int = 0
    bind_errors: int = 0
    unschedulable: int = 0
    preemptions: int = 0
    evicted: list[str] = field(default_factory=list)
    cycles: int = 0
    cycle_seconds: float = 0.0  # wall clock inside schedule_one, extender calls included
    cycle_cpu_seconds: float = 0.0  # the scheduling thread's CPU time in there (the rest is waiting)


class Scheduler:
    """See the module docstring. `on_bind(pod_key, node)` runs after every successful
    bind, in the binding thread (tests check the truth there); `on_assume(pod_key,
    node)` runs for every placement decision, in order, under the cache lock;
    `on_unschedulable(pod_key)` runs when a pod is given up on (its last attempt
    failed), under the cache lock, before anything else is scheduled or assumed."""

    def __init__(
        self, api: FakeApiServer, extender_url: str, weight: int = 1, seed: int = 0,
        bind_delay: tuple[float, float] = (0.0, 0.005), max_attempts: int = 6,
        backoff: float = 0.02, on_bind: Callable[[tuple[str, str], str], None] | None = None,
        use_bind_verb: bool = True, on_assume: Callable[[tuple[str, str], str], None] | None = None,
        on_unschedulable: Callable[[tuple[str, str]], None] | None = None,
    ) -> None:
        self.api = api
        self.ext = ExtenderClient(extender_url)
        self.weight = weight
        self.rand = random.Random(seed)
        self.bind_delay = bind_delay
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.on_bind = on_bind
        self.on_assume = on_assume  # (key, node) under the cache lock, in decision order
        self.on_unschedulable = on_unschedulable  # (key) under the cache lock, when given up
        self.use_bind_verb = use_bind_verb
        self.stats = Stats()
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._nodes = {n["metadata"]["name"]: n for n in api.objects("nodes")}
        # the scheduler's cache: every pod we know, with assumed ones placed
        self._pods: dict[tuple[str, str], dict] = {key_of(p): p for p in api.objects("pods")}
        # how many known pods have each priority: "is any pod lower?" without a scan of
        # every pod per failed cycle (that made late bursts of failing pods O(pods) each)
        self._priorities = Counter(map(priority_of, self._pods.values()))
        self._assumed: dict[tuple[str, str], str] = {}
        # nodes are fixed for the simulator's life: row i of the arrays is _names[i]
        self._names = list(self._nodes)
        self._names_array = np.array(self._names, dtype=object)
        self._index = {name: i for i, name in enumerate(self._names)}
        self._alloc = np.array([allocatable_of(self._nodes[n]) for n in self._names], dtype=np.int64
                               ).reshape(-1, 2)
        # requested cpu/memory per node of bound and assumed pods, kept up to date
        self._requests = {k: requests_of(p) for k, p in self._pods.items()}
        self._used = np.zeros_like(self._alloc)
        for k, p in self._pods.items():
            self._charge(k, p.get("spec", {}).get("nodeName"), 1)
        self._active: deque[tuple[str, str]] = deque()
        self._backoff: list[tuple[float, tuple[str, str]]] = []
        self._attempts: dict[tuple[str, str], int] = {}
        self._binding = 0
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="binding-cycle")

    # --- what the tests do ---------------------------------------------------------------

    def submit(self, pods: list[dict]) -> None:
        """Create pods in the API and queue them (the informer's add event)."""
        for pod in pods:
            stored = self.api.create("pods", pod)
            with self._lock:
                self._pods[key_of(stored)] = stored
                self._priorities[priority_of(stored)] += 1
                self._requests[key_of(stored)] = requests_of(stored)
                self._active.append(key_of(stored))

    def run(self, timeout: float = 60.0) -> Stats:
        """Schedule until nothing is queued, backing off or binding (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            key = self._next()
            if key is None:
                with self._lock:
                    idle = not self._binding and not self._backoff and not self._active
                if idle:
                    return self.stats
                time.sleep(0.001)
                continue
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                self.schedule_one(key)
            except Exception as exc:  # an extender error fails the cycle: retried
                self.errors.append(f"{key}: {exc}")
                self._retry(key)
            self.stats.cycle_seconds += time.perf_counter() - started
            self.stats.cycle_cpu_seconds += time.thread_time() - cpu
        raise AssertionError(f"scheduler did not settle within {timeout}s: {self.stats}")

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.ext.close()

    def placed(self) -> dict[tuple[str, str], str]:
        """Every pod the scheduler has placed (bound or assumed): key -> node."""
        with self._lock:
            out = {k: p["spec"]["nodeName"] for k, p in self._pods.items() if p.get("spec", {}).get("nodeName")}
            out.update(self._assumed)
            return out

    # --- the queue ---------------------------------------------------------------------------

    def _next(self) -> tuple[str, str] | None:
        with self._lock:
            now = time.monotonic()
            due = [item for item in self._backoff if item[0] <= now]
            for item in due:
                self._backoff.remove(item)
                self._active.append(item[1])
            return self._active.popleft() if self._active else None

    def _retry(self, key: tuple[str, str]) -> None:
        with self._lock:
            n = self._attempts[key] = self._attempts.get(key, 0) + 1
            if n >= self.max_attempts or key not in self._pods:
                self.stats.unschedulable += key in self._pods
                if key in self._pods and self.on_unschedulable is not None:
                    self.on_unschedulable(key)
                return
            self._backoff.append((time.monotonic() + self.backoff * 2 ** (n - 1), key))

    # --- one scheduling cycle --------------------------------------------------------------

    def _charge(self, key: tuple[str, str], node: str | None, sign: int) -> None:
        """Add (1) or remove (-1) a pod's requests on `node` (under the lock)."""
        i = self._index.get(node) if node else None
        if i is not None:
            cpu, mem = self._requests[key]
            self._used[i, 0] += sign * cpu
            self._used[i, 1] += sign * mem

    def _fits(self, request: tuple[int, int], node: str, used: tuple[int, int]) -> bool:
        """In-tree NodeResourcesFit (cpu and memory) of `request` on `node` already using `used`."""
        acpu, amem = self._alloc[self._index[node]]
        return used[0] + request[0] <= acpu and used[1] + request[1] <= amem

    def _least_allocated(self, rows: np.ndarray, request: tuple[int, int], free: np.ndarray) -> np.ndarray:
        """In-tree NodeResourcesFit score, LeastAllocated strategy, cpu and memory weight 1,
        for the nodes at `rows`: per resource (capacity - requested) * 100 // capacity, 0
        when the capacity is 0 or exceeded; the node's score is their mean (integer)."""
        alloc = self._alloc[rows]
        left = free[rows] - np.array(request, dtype=np.int64)
        parts = np.where((alloc > 0) & (left >= 0), left * MAX_NODE_SCORE // np.maximum(alloc, 1), 0)
        return parts.sum(axis=1) // 2

    def schedule_one(self, key: tuple[str, str]) -> None:
        with self._lock:
            pod = self._pods.get(key)
            if pod is None or pod.get("spec", {}).get("nodeName") or key in self._assumed:
                return
            request = self._requests[key]
            free = self._alloc - self._used  # a copy to work on, as the cycle's snapshot
        self.stats.cycles += 1
        fits = (free[:, 0] >= request[0]) & (free[:, 1] >= request[1])
        feasible = self._names_array[fits].tolist()
        result: dict = {}
        if feasible:
            result = self.ext.call("filter", {"Pod": pod, "Nodes": None, "NodeNames": feasible})
            if result.get("Error"):
                raise RuntimeError(f"extender filter: {result['Error']}")
            feasible = result.get("NodeNames") or []
            rows = list(map(self._index.get, feasible))
            if None in rows:  # only names of nodes the scheduler knows count (as upstream)
                feasible = [n for n, i in zip(feasible, rows, strict=True) if i is not None]
                rows = [i for i in rows if i is not None]
        if not feasible:
            statuses = dict.fromkeys(self._names_array[~fits].tolist(), UNSCHEDULABLE)
            statuses.update(dict.fromkeys(result.get("FailedNodes") or {}, UNSCHEDULABLE))
            statuses.update(dict.fromkeys(result.get("FailedAndUnresolvableNodes") or {}, UNRESOLVABLE))
            if not self._preempt(key, pod, statuses):
                self._retry(key)
            return
        host = feasible[0] if len(feasible) == 1 else self._select_host(pod, request, feasible, rows, free)
        with self._lock:
            self._assumed[key] = host
            self._charge(key, host, 1)
            self._binding += 1
            if self.on_assume is not None:
                self.on_assume(key, host)
        self._pool.submit(self._binding_cycle, key, pod, host)

    def _select_host(self, pod: dict, request: tuple[int, int], feasible: list[str], rows: list[int],
                     free: np.ndarray) -> str:
        """`rows`: the feasible nodes' rows in the arrays, in `feasible`'s order."""
        totals = self._least_allocated(np.array(rows, dtype=np.int64), request, free)
        entries = self.ext.call("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": feasible}) or []
        if list(map(itemgetter("Host"), entries)) == feasible:  # the usual answer: same order
            extender = np.fromiter(map(itemgetter("Score"), entries), dtype=np.int64, count=len(entries))
        else:
            position = {name: i for i, name in enumerate(feasible)}
            extender = np.zeros(len(feasible), dtype=np.int64)
            for entry in entries:
                i = position.get(entry["Host"])
                if i is not None:
                    extender[i] += entry["Score"]
        totals += extender * (self.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY))
        # selectHost: uniformly at random among the top scores (upstream samples a reservoir)
        top = np.flatnonzero(totals == totals.max())
        return feasible[int(top[self.rand.randrange(len(top))])]

    # --- the binding cycle ----------------------------------------------------------------

    def _binding_cycle(self, key: tuple[str, str], pod: dict, host: str) -> None:
        try:
            time.sleep(random.uniform(*self.bind_delay))
            ns, name = key
            if self.use_bind_verb:
                result = self.ext.call("bind", {"PodName": name, "PodNamespace": ns,
                                                "PodUID": pod["metadata"].get("uid", ""), "Node": host})
                error = result.get("Error", "")
            else:
                try:
                    self.api.bind(ns, name, host)
                    error = ""
                except Exception as exc:
                    error = str(exc)
            if error:
                self.errors.append(f"bind {key}: {error}")
                with self._lock:
                    self._forget(key)
                    self.stats.bind_errors += 1
                self._retry(key)
                return
            with self._lock:
                stored = self._pods.get(key)
                if stored is not None:
                    stored.setdefault("spec", {})["nodeName"] = host
                self._assumed.pop(key, None)
                self.stats.scheduled += 1
            if self.on_bind is not None:
                self.on_bind(key, host)
        except Exception as exc:
            self.errors.append(f"binding cycle {key}: {exc!r}")
            with self._lock:
                self._forget(key)
            self._retry(key)
        finally:
            with self._lock:
                self._binding -= 1

    def _forget(self, key: tuple[str, str]) -> None:
        """Drop an assumption (under the lock), as the scheduler cache's ForgetPod."""
        node = self._assumed.pop(key, None)
        if node is not None:
            self._charge(key, node, -1)

    # --- PostFilter: DefaultPreemption -----------------------------------------------------

    def _victims_on(self, pod: dict, node: str, on_node: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
        """SelectVictimsOnNode with the in-tree filters: None when no eviction helps.
        `on_node`: the pods placed on `node` (bound or assumed)."""
        prio = priority_of(pod)
        request = self._requests[key_of(pod)]
        with self._lock:
            lower = [k for k in on_node if k in self._pods and priority_of(self._pods[k]) < prio]
            if not lower:
                return None
            used = [int(x) for x in self._used[self._index[node]]]
            for k in lower:
                used[0] -= self._requests[k][0]
                used[1] -= self._requests[k][1]
            if not self._fits(request, node, (used[0], used[1])):
                return None
            victims = []
            for k in sorted(lower, key=lambda k: -priority_of(self._pods[k])):  # reprieve
                cpu, mem = self._requests[k]
                used[0] += cpu
                used[1] += mem
                if not self._fits(request, node, (used[0], used[1])):
                    used[0] -= cpu
                    used[1] -= mem
                    victims.append(k)
            return victims or None

    def _preempt(self, key: tuple[str, str], pod: dict, statuses: dict[str, str]) -> bool:
        if pod.get("spec", {}).get("preemptionPolicy") == "Never":
            return False
        with self._lock:  # PodEligibleToPreemptOthers, cheaply: is any pod lower at all?
            if not any(n and prio < priority_of(pod) for prio, n in self._priorities.items()):
                return False
        with self._lock:  # the pods on each node, once for all candidates
            by_node: dict[str, list[tuple[str, str]]] = {}
            for k, p in self._pods.items():
                where = self._assumed.get(k) or p.get("spec", {}).get("nodeName")
                if where:
                    by_node.setdefault(where, []).append(k)
        candidates: dict[str, list[tuple[str, str]]] = {}
        for name in self._nodes:
            if statuses.get(name) == UNRESOLVABLE:
                continue
            victims = self._victims_on(pod, name, by_node.get(name, []))
            if victims:
                candidates[name] = victims
        if not candidates:
            return False
        meta = {node: {"Pods": [{"UID": self._pods[k]["metadata"].get("uid", "")} for k in victims],
                       "NumPDBViolations": 0} for node, victims in candidates.items()}
        result = self.ext.call("preempt", {"Pod": pod, "NodeNameToMetaVictims": meta})
        kept = result.get("NodeNameToMetaVictims") or {}
        candidates = {n: v for n, v in candidates.items() if n in kept}
        if not candidates:
            return False

        def cost(node: str) -> tuple:
            prios = [priority_of(self._pods[k]) for k in candidates[node]]
            return (max(prios), sum(prios), len(prios), node)

        node = min(candidates, key=cost)
        for k in candidates[node]:
            self.api.delete("pods", k[1], k[0])
            with self._lock:
                self._forget(k)
                gone = self._pods.pop(k, None)
                if gone is not None:
                    self._priorities[priority_of(gone)] -= 1
                    self._charge(k, gone.get("spec", {}).get("nodeName"), -1)
            self.stats.evicted.append(f"{k[0]}/{k[1]}@{node}")
        self.stats.preemptions += 1
        stored = self.api.get("pods", key[1], key[0])
        if stored is not None:
            stored.setdefault("status", {})["nominatedNodeName"] = node
            self.api.update("pods", stored)
        self._retry(key)
        return True
