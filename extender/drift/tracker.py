"""The drift report, kept up to date event by event (`DriftTracker`).

The store tells the tracker of every change it applies (`StoreObserver`, its one hook:
`Store._observe`). The tracker keeps, per running pod, its node and constraint shape
(`extender.drift.shapes`), indexed by node and by claim, and marks what a change can
affect:

* a pod's event: that pod (when its node, uid, constraints or claims changed);
* a node's taints or labels: the pods on that node only;
* a claim's event: the pods using the claim; a PersistentVolume's: the pods whose
  claims are bound to it.

Marked pods are evaluated by the tracker's own thread (`settle`, after a short batching
pause), on a snapshot taken after the marks, so every change a mark stands for is in
it: one evaluation per distinct (node, shape, claims) among them, with the plugins'
verdicts (`extender.drift.evaluate`). Nothing here runs on the verbs' path, and the
store's hook only does set operations (and parses a pod's constraint text the first
time it is seen).

What is reported: pods whose node no longer satisfies them (`drifted`), with the
failing requirements in `extender explain`'s words; `extender_pods_violating{plugin,
reason,severity}` counts them (pods, not violations: a pod failing two volumes counts
once). Pods are reported as of the last settle; `pending` says how many changes wait.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate, islice
from typing import Any

from extender import metrics
from extender.drift.evaluate import ByProfile, Labels, Violation, gauge_labels, gauge_reason
from extender.drift.report import Fragments
from extender.drift.shapes import Key, Running, Shapes
from extender.drift.spread import NAME as SPREAD
from extender.drift.spread import REASONS as SPREAD_REASONS
from extender.drift.spread import SPREAD_INTERVAL, SpreadDrift
from extender.request.foreground import FOREGROUND
from extender.state import gcfreeze

log = logging.getLogger("extender.drift")

BATCH_SECONDS = 0.05  # a burst of events (a relist, a node drain) is settled together
# The drifted pods' keys are kept sorted for the report (`first`): a settle that adds or
# removes at most this many is applied to the order in place (a bisection each), a bigger
# one has it sorted again, in runs of SORT_RUN keys, when the report is next read.
REORDER_AT = 256
# A settle that drifts at least this many pods moves what it made out of the cyclic
# collector's reach (`freeze`): see `DriftTracker.settle`.
FREEZE_AT = 1024
SORT_RUN = 1024
YIELD_RUNS = 8  # runs' worth of sorting or merging between two yields to the verbs


@dataclass(frozen=True, slots=True)
class Drifted:
    """A pod whose node fails at least one of its requirements."""

    node: str
    uid: str
    violations: tuple[Violation, ...]
    since: float  # wall-clock time these violations were first seen
    # its JSON text in the report (`report.pod_fragment`), written once when it drifts
    json: bytes = field(default=b"", compare=False, repr=False)

    def labels(self) -> set[Labels]:
        return {(v.plugin, gauge_reason(v), v.severity) for v in self.violations}


def _same(old: Drifted | None, running: Running, violations: tuple[Violation, ...]) -> bool:
    """Whether `old` is this pod (node, uid) drifted by these very violations."""
    return old is not None and old.violations == violations and old.node == running.node and old.uid == running.uid


def _spread_of(plugins: list | None) -> Any:
    return next((p for p in plugins or () if p.name == SPREAD), None)


def spread_checker(plugins: list | None, profiles: Mapping[str, list] | None = None) -> SpreadDrift | None:
    """The spread report's checker over each profile's PodTopologySpread (`bind`'s
    arguments), None when no profile has the extender run it."""
    by_profile = {name: _spread_of(found) for name, found in (profiles or {}).items()}
    if _spread_of(plugins) is None and all(p is None for p in by_profile.values()):
        return None
    return SpreadDrift(_spread_of(plugins), by_profile)


def spread_labels() -> list[Labels]:
    return [(SPREAD, reason, "required") for reason in SPREAD_REASONS]


class DriftTracker:
    """See the module docstring. `changed` is the store's hook (any thread); `settle`
    evaluates what changed (the tracker's thread, or a test); `report` reads."""

    def __init__(self, shapes: Shapes, snapshot: Callable[[], Any] | None = None) -> None:
        self.shapes = shapes
        self.snapshot = snapshot  # the store's `snapshot` (set by `attach`)
        self.evaluator: ByProfile | None = None  # set by `bind`, once the plugins exist
        self.spread: SpreadDrift | None = None  # the opt-in spread report (`bind(spread=True)`)
        self.on_drift: Callable[[Key, Drifted], None] | None = None  # newly drifted pods (events)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pods: dict[Key, Running] = {}
        # lists, not sets: ~10 pods a node, and a list of them costs a quarter of a set
        self._by_node: dict[str, list[Key]] = {}
        self._by_claim: dict[tuple[str, str], list[Key]] = {}
        self._volume_of_claim: dict[tuple[str, str], str] = {}
        self._claims_of_volume: dict[str, set[tuple[str, str]]] = {}
        self._dirty: set[Key] = set()
        self._marks = 0  # marks made so far (a mark that changed the marked set)
        self._settled_marks = 0  # marks covered by the last settle
        self.drifted: dict[Key, Drifted] = {}
        self._order: list[Key] | None = []  # drifted's keys sorted (None: to be sorted again)
        self._reorders = 0  # settles that changed drifted's keys
        self._version = 0  # settles that changed `drifted` at all (keys or entries)
        # (version, the first pods' JSON texts joined by commas, where each one ends)
        self._texts: tuple[int, bytes, list[int]] | None = None
        self.totals: Counter[Labels] = Counter()
        self.settles = 0  # completed settles
        self.settled_at = 0.0  # monotonic time of the last one
        self.last_generation = -1  # the snapshot generation the last settle read
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.freeze = False  # the serving process's choice (`extender.server.opening`)

    # --- wiring ----------------------------------------------------------------------------

    def attach(self, store: Any) -> DriftTracker:
        """Observe `store` (before any feed writes into it)."""
        store.observer = self
        self.snapshot = store.snapshot
        return self

    def bind(self, plugins: list | None, spread: bool = False, profiles: Mapping[str, list] | None = None) -> None:
        """Evaluate with these plugin instances (the engine's: same arguments, gates and
        CEL cache as `/filter`): each pod with those of its own profile (`profiles`,
        by schedulerName), `plugins` for a pod of any other profile (None: not judged);
        `spread`: keep the topology spread report too (for the profiles that have the
        extender run PodTopologySpread)."""
        self.evaluator = ByProfile(plugins, profiles)
        if spread:
            self.spread = spread_checker(plugins, profiles)
        with self._wake:
            self._wake.notify()

    def start(self) -> None:
        """The settling thread (in the serving process: threads do not survive a fork)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="drift", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def pending(self) -> int:
        """Pods marked for evaluation and not settled yet."""
        return len(self._dirty)

    @property
    def tracked(self) -> int:
        return len(self._pods)

    # --- the store's hook --------------------------------------------------------------------

    def changed(self, kind: str, namespace: str, name: str, raw: Mapping[str, Any] | None,
                model: Any | None) -> None:
        if kind == "Pod":
            self._pod(namespace, name, raw, model)
        elif kind == "Node":
            with self._wake:
                self._mark(self._by_node.get(name, ()))
        elif kind == "PersistentVolumeClaim":
            self._claim(namespace, name, model)
        elif kind == "PersistentVolume":
            with self._wake:
                for claim in self._claims_of_volume.get(name, ()):
                    self._mark(self._by_claim.get(claim, ()))

    def _pod(self, namespace: str, name: str, raw: Mapping[str, Any] | None, model: Any) -> None:
        if model is not None:  # share the store's strings: 150,000 keys add up
            namespace, name = model.namespace, model.name
        key = (namespace, name)
        running = None if raw is None else self.shapes.running(raw, getattr(model, "uid", ""))
        with self._wake:
            old = self._pods.get(key)
            if old == running:
                return
            if old is not None:
                self._unindex(key, old)
            if running is None:
                self._pods.pop(key, None)
            else:
                self._pods[key] = running
                self._index(key, running)
            self._mark((key,))

    def _claim(self, namespace: str, name: str, model: Any) -> None:
        claim = (namespace, name)
        volume = getattr(model, "volume_name", "") if model is not None else ""
        with self._wake:
            old = self._volume_of_claim.get(claim, "")
            if old != volume:
                if old:
                    self._discard(self._claims_of_volume, old, claim)
                    self._volume_of_claim.pop(claim, None)
                if volume:
                    self._claims_of_volume.setdefault(volume, set()).add(claim)
                    self._volume_of_claim[claim] = volume
            self._mark(self._by_claim.get(claim, ()))

    @staticmethod
    def _discard(index: dict, key: Any, member: Any) -> None:
        members = index.get(key)
        if members is not None and member in members:
            members.remove(member)
            if not members:
                del index[key]

    def _index(self, key: Key, running: Running) -> None:
        """Under the lock, for a pod not indexed yet (`_unindex` first on a change)."""
        self._by_node.setdefault(running.node, []).append(key)
        for claim, _ in running.claims:
            self._by_claim.setdefault((key[0], claim), []).append(key)

    def _unindex(self, key: Key, running: Running) -> None:
        self._discard(self._by_node, running.node, key)
        for claim, _ in running.claims:
            self._discard(self._by_claim, (key[0], claim), key)

    def _mark(self, keys: Iterable[Key]) -> None:
        """Under the lock: these pods need evaluating; wake the thread."""
        before = len(self._dirty)
        self._dirty.update(keys)
        if len(self._dirty) != before:
            self._marks += 1
            self._wake.notify()

    # --- settling ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                if not (self._dirty and self.evaluator is not None):
                    # the spread report also follows changes that mark no pod (a node
                    # added, a pod of another node): it checks for them on a timer
                    self._wake.wait(SPREAD_INTERVAL / 2 if self.spread is not None else None)
            if self._stop.wait(BATCH_SECONDS):
                return
            try:
                if self._dirty:
                    self.settle()
                if self.spread is not None:
                    self.run_spread()
            except Exception:  # noqa: BLE001 - a bug here must not end the report
                log.exception("evaluating the drift report failed")

    def settle(self) -> int:
        """Evaluate every marked pod on a snapshot taken after its marks; returns how
        many were evaluated. The lock is never held while the snapshot is taken (the
        store calls `changed` under its own lock)."""
        if self.evaluator is None or self.snapshot is None:
            return 0
        with self._lock:
            work = [(key, self._pods.get(key)) for key in self._dirty]
            self._dirty = set()
            marks = self._marks
        snapshot = self.snapshot()
        results = self._evaluate(work, snapshot)
        changed: set[Labels] = set()
        fresh: list[tuple[Key, Drifted]] = []
        added: list[Key] = []
        removed: list[Key] = []
        now = time.time()
        # each newly drifted pod's report text, written outside the lock (the store's
        # hook takes it); only `settle` changes `drifted`, so what it holds is read as is
        fragments = Fragments()
        written = {key: fragments.pod(key, running.node, running.uid, now, violations)
                   for key, (running, violations) in results.items()
                   if violations and not _same(self.drifted.get(key), running, violations)}
        with self._lock:
            for key, (running, violations) in results.items():
                if key in self._dirty:
                    continue  # changed again meanwhile: the next settle decides
                old = self.drifted.get(key)
                new = None
                if violations:
                    if _same(old, running, violations):  # the same pod, drifted the same way
                        continue
                    text = written.get(key) or fragments.pod(key, running.node, running.uid, now, violations)
                    new = Drifted(running.node, running.uid, violations, now, text)
                    if any(v.severity == "required" for v in violations):
                        fresh.append((key, new))
                if old == new:
                    continue
                for labels in old.labels() if old is not None else ():
                    self.totals[labels] -= 1
                    changed.add(labels)
                for labels in new.labels() if new is not None else ():
                    self.totals[labels] += 1
                    changed.add(labels)
                if new is None:
                    self.drifted.pop(key, None)
                    removed.append(key)
                else:
                    if old is None:
                        added.append(key)
                    self.drifted[key] = new
            if added or removed:
                self._reorder(added, removed)
            if changed:  # an entry replaced, added or removed changes its label counts
                self._version += 1
            self.settles += 1
            self.settled_at = time.monotonic()
            self.last_generation = snapshot.generation
            self._settled_marks = marks
        if self.freeze and len(written) >= FREEZE_AT:
            # tens of thousands of drifted pods (a relist, a retired pool) are that many
            # long-lived objects, which each full collection walked (0.1-0.25 s at 50,000,
            # the GIL held, in whichever /filter ran then); they hold no reference cycles
            # (what replaces them frees them), so they leave the collector's reach as
            # the loaded state does (`gcfreeze.freeze_loaded_state`)
            gcfreeze.freeze_loaded_state()
        self._publish(changed)
        if self.on_drift is not None:
            for key, drifted in fresh:
                self.on_drift(key, drifted)
        return len(results)

    def run_spread(self, interval: float = SPREAD_INTERVAL) -> bool:
        """The spread report again, when the state changed and `interval` has passed."""
        spread = self.spread
        if spread is None or self.snapshot is None:
            return False
        with self._lock:
            pods = list(self._pods.items())
        if not spread.maybe_run(self.snapshot(), pods, interval):
            return False
        totals: Counter[Labels] = Counter()
        for _, violations in spread.drifted.values():
            for labels in {(v.plugin, v.reason, v.severity) for v in violations}:
                totals[labels] += 1
        with self._lock:
            stale = [labels for labels in self.totals if labels[0] == SPREAD and labels not in totals]
            for labels in stale:
                del self.totals[labels]
            self.totals.update(totals)
        self._publish([*stale, *totals, *spread_labels()])
        return True

    def _evaluate(self, work: list[tuple[Key, Running | None]], snapshot: Any
                  ) -> dict[Key, tuple[Running | None, tuple[Violation, ...]]]:
        """One evaluation per distinct (node, shape, claims) among the marked pods."""
        evaluator = self.evaluator
        nodes = snapshot.nodes.by_name
        volumes = snapshot.volume_layer
        seen: dict[tuple, tuple[Violation, ...]] = {}
        out: dict[Key, tuple[Running | None, tuple[Violation, ...]]] = {}
        for key, running in work:
            node = nodes.get(running.node) if running is not None else None
            if node is None:  # gone, or its node is not in the state (yet): nothing to say
                out[key] = (running, ())
                continue
            group = (running.node, running.shape, key[0] if running.claims else "", running.claims)
            violations = seen.get(group)
            if violations is None:
                violations = seen[group] = evaluator.evaluate(running.shape, node, key[0], running.claims, volumes)
            out[key] = (running, violations)
        return out

    def _publish(self, labels: Iterable[Labels]) -> None:
        for plugin, reason, severity in labels:
            metrics.PODS_VIOLATING.labels(plugin, reason, severity).set(self.totals[(plugin, reason, severity)])

    def export_zeros(self) -> None:
        """Every label set at its current value (0 before any drift), so alerts and
        dashboards see series rather than nothing."""
        self._publish([*gauge_labels(), *(spread_labels() if self.spread is not None else ())])

    def wait_settled(self, timeout: float) -> bool:
        """Until every mark made before the call is settled (by the thread)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            wanted = self._marks
        while self._settled_marks < wanted:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    # --- reading ---------------------------------------------------------------------------------

    def _reorder(self, added: list[Key], removed: list[Key]) -> None:
        """Keep `_order` in step with `drifted`'s keys (under the lock): a few changes in
        place, many by sorting again when next read."""
        self._reorders += 1
        order = self._order
        if order is None or len(added) + len(removed) > REORDER_AT:
            self._order = None
            return
        for key in removed:
            at = bisect_left(order, key)
            if at == len(order) or order[at] != key:  # never: the order missed a key
                self._order = None
                return
            del order[at]
        for key in added:
            insort(order, key)

    def first(self, limit: int) -> tuple[list[tuple[Key, Drifted]], int, dict[Labels, int]]:
        """The first `limit` drifted pods by namespace and name, how many there are, and
        the gauge's totals (spread aside), as of one moment: read under the lock from the
        kept order, nothing the size of the report copied (a copy per read had the
        cyclic collector walk it in every young collection, and a full one run per read)."""
        for _ in range(3):
            self._sort_again()
            with self._lock:
                if self._order is not None:
                    return self._first(limit)
        with self._lock:  # big settles one after another: sorted here, at once
            if self._order is None:
                self._order = sorted(self.drifted)
            return self._first(limit)

    def first_text(self, limit: int) -> tuple[bytes, int, int, dict[Labels, int]]:
        """`first`'s answer as the report writes it: the JSON list of the first `limit`
        drifted pods, how many it holds, how many there are, the totals. Their texts are
        kept joined from the first read after a settle that changed the report on (up to
        the largest `limit` asked), so a read copies one slice of bytes: no Python work
        per pod per request."""
        with self._lock:
            version, kept = self._version, self._texts
            count = len(self.drifted)
            totals = {labels: n for labels, n in self.totals.items() if n and labels[0] != SPREAD}
        shown = min(limit, count)
        if kept is None or kept[0] != version or len(kept[2]) < shown:
            first, count, totals = self.first(max(limit, len(kept[2]) if kept and kept[0] == version else 0))
            if not first:
                return b"[]", 0, count, totals
            blob = b",".join(drifted.json for _, drifted in first)
            kept = (version, blob, list(accumulate(len(drifted.json) + 1 for _, drifted in first)))
            with self._lock:
                if self._version == version:  # else changed meanwhile: answered, not kept
                    self._texts = kept
            shown = min(limit, count)
        if not shown:
            return b"[]", 0, count, totals
        return b"[%b]" % memoryview(kept[1])[:kept[2][shown - 1] - 1], shown, count, totals

    def _first(self, limit: int) -> tuple[list[tuple[Key, Drifted]], int, dict[Labels, int]]:
        assert self._order is not None
        return ([(key, self.drifted[key]) for key in self._order[:limit]], len(self.drifted),
                {labels: n for labels, n in self.totals.items() if n and labels[0] != SPREAD})

    def _sort_again(self) -> None:
        """Sort the keys again after a big settle: outside the lock, in runs (one sort of
        every key would hold the GIL as long as it takes, delaying whichever `/filter`
        waits for it)."""
        with self._lock:
            if self._order is not None:
                return
            keys, reorders = list(self.drifted), self._reorders
        order = sorted_in_runs(keys)
        with self._lock:
            if self._order is None and self._reorders == reorders:
                self._order = order

    def entries(self, namespace: str | None = None) -> list[tuple[Key, Drifted]]:
        """The drifted pods (of one namespace), sorted by namespace and name."""
        self._sort_again()
        with self._lock:
            order = self._order if self._order is not None else sorted(self.drifted)
            return [(key, self.drifted[key]) for key in order if namespace is None or key[0] == namespace]

    def running_on(self, nodes: Iterable[str], volumes: Iterable[str] = ()) -> list[tuple[Key, Running]]:
        """The tracked pods on `nodes` and those whose claims are bound to `volumes`
        (what a change of those objects can affect), sorted by namespace and name."""
        with self._lock:
            keys = {key for name in nodes for key in self._by_node.get(name, ())}
            for volume in volumes:
                for claim in self._claims_of_volume.get(volume, ()):
                    keys.update(self._by_claim.get(claim, ()))
            return sorted((key, self._pods[key]) for key in keys if key in self._pods)

    def running_pods(self) -> list[tuple[Key, Running]]:
        """Every tracked pod (a copy)."""
        with self._lock:
            return list(self._pods.items())

    def counts(self) -> dict[Labels, int]:
        with self._lock:
            return {labels: n for labels, n in self.totals.items() if n}


def sorted_in_runs(keys: list[Key]) -> list[Key]:
    """`sorted(keys)`: each C-level sort (the GIL held throughout) one run of SORT_RUN
    keys, the runs merged in Python (the GIL changes hands meanwhile); between runs,
    and every few runs' worth of the merge, kube-scheduler's calls go first
    (`extender.request.foreground`)."""
    runs = []
    for i in range(0, len(keys), SORT_RUN):
        if not i % (YIELD_RUNS * SORT_RUN):
            FOREGROUND.yield_to()
        runs.append(sorted(keys[i:i + SORT_RUN]))
    if len(runs) == 1:
        return runs[0]
    merged: list[Key] = []
    merging = heapq.merge(*runs)
    while piece := list(islice(merging, YIELD_RUNS * SORT_RUN)):
        merged += piece
        FOREGROUND.yield_to()
    return merged


__all__ = ["DriftTracker", "Drifted", "gauge_labels", "spread_checker"]
