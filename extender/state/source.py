"""Where snapshots come from.

`ClusterSource` is the one interface the rest of the code sees. `FileSource` reads a
cluster dump and reloads it on SIGHUP and when the file's mtime/size changes (a
polling thread; inotify would add a dependency for little gain). A failed reload keeps
the previous snapshot and is logged and counted, never fatal. The live API-server
watch (a later issue) implements the same two methods.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Protocol

from extender import metrics
from extender.state.loader import ClusterFileError, load_objects
from extender.state.podindex import spread_index
from extender.state.snapshot import ClusterSnapshot

log = logging.getLogger("extender.state")


class ClusterSource(Protocol):
    def snapshot(self) -> ClusterSnapshot: ...

    def ready(self) -> bool: ...


def settle_heap() -> None:
    """Move the (long-lived) snapshot out of the garbage collector's sight.

    A 50k-pod snapshot is millions of objects; every full collection would walk them
    all and stall a request for tens of milliseconds. `gc.freeze()` parks everything
    alive now in the permanent generation. `gc.unfreeze()` first, so that the snapshot
    this one replaces (and its caches) is collected rather than kept for ever: without
    it every reload leaked a whole snapshot (~60 MB at 500 nodes; `make soak` found it).
    The full collection costs one pause per reload, not per request."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


# the topology keys of upstream's default (system) spreading, which most pods get
DEFAULT_TOPOLOGY_KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone")


def prepare(snapshot: ClusterSnapshot) -> None:
    """Build the indexes every request needs before the snapshot is served: the first
    request after a (re)load would otherwise pay for them (~0.4 s at 5,000 nodes and
    50,000 pods), and built here, in gunicorn's master, they are frozen and shared by
    the workers."""
    spread_index(snapshot)
    snapshot.nodes.taint_groups()
    for key in DEFAULT_TOPOLOGY_KEYS:
        snapshot.nodes.codes(key)  # also builds the label index


class StaticSource:
    """A snapshot held in memory (tests, `explain`); `set` swaps it (simulations)."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def ready(self) -> bool:
        return True

    def set(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot


def _record(snapshot: ClusterSnapshot) -> None:
    for kind, n in snapshot.counts().items():
        metrics.CLUSTER_STATE_OBJECTS.labels(kind).set(n)


class FileSource:
    def __init__(self, path: str | os.PathLike, poll_seconds: float = 2.0) -> None:
        self.path = Path(path)
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._generation = 0
        self._snapshot = self._load()  # start-up errors propagate: a bad file is fatal
        settle_heap()
        log.info("cluster state loaded", extra={"path": str(self.path), **self._snapshot.counts()})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _load(self) -> ClusterSnapshot:
        stamp = self._file_stamp()
        gc.disable()  # loading allocates millions of long-lived objects: no GC passes
        try:
            objects = load_objects(self.path)
            self._generation += 1
            snap = ClusterSnapshot.from_objects(objects, self._generation)
            del objects
            prepare(snap)
        finally:
            gc.enable()
        self._stamp = stamp
        _record(snap)
        return snap

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def ready(self) -> bool:
        return self._snapshot is not None

    def reload(self, reason: str = "manual") -> bool:
        """Reload now; keep the old snapshot if the new file is broken."""
        with self._lock:
            try:
                snap = self._load()
            except (ClusterFileError, OSError) as exc:
                metrics.CLUSTER_STATE_RELOADS_TOTAL.labels("error").inc()
                log.error("cluster state reload failed; keeping the previous state",
                          extra={"reason": reason, "error": str(exc), "path": str(self.path)})
                self._stamp = self._file_stamp()  # do not retry the same broken file forever
                return False
            self._snapshot = snap
            settle_heap()  # after the swap: the replaced snapshot is collected now
            metrics.CLUSTER_STATE_RELOADS_TOTAL.labels("success").inc()
            log.info("cluster state reloaded", extra={"reason": reason, **snap.counts()})
            return True

    def reload_if_changed(self, reason: str = "file changed") -> bool:
        stamp = self._file_stamp()
        if stamp is not None and stamp != self._stamp:
            return self.reload(reason)
        return False

    def start(self, install_sighup: bool = True) -> None:
        """Start the change-polling thread and (in the main thread) the SIGHUP handler."""
        if install_sighup and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, lambda *_: self.reload("SIGHUP"))
        if self.poll_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="cluster-file-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            self.reload_if_changed()
