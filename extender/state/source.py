"""Where cluster state comes from, and the one interface the rest of the code sees.

`ClusterSource.snapshot()` returns a consistent `ClusterSnapshot` for a request;
`ready()` says whether it may be served; the rest of the interface (readiness and
liveness, whether a verdict may be computed now, the store, API access) has defaults
for the sources that lack it. Four sources:

- `LiveSource` (`extender.state.live`): the API server's list/watch, the normal
  deployment;
- `FileSource`: a cluster dump, for `extender explain`, tests and demos. It is one more
  feed into the same `Store`: a reload applies only what changed (unchanged nodes keep
  the node layer and its memos), and a replaced state is freed by reference counting
  (it holds no reference cycle). A (re)load parses in small steps with the cyclic
  collector paused and, in the serving process, freezes the result without a full
  collection (`extender.state.gcfreeze`): at a 9 MB file the parse and the collector's full
  passes stalled every thread of the worker 0.2-4 s, probes included. Reloads happen
  on SIGHUP and when the file's
  mtime/size changes (a polling thread). A failed reload keeps the previous state; a
  good one is also copied to a last-good file that a restarted gunicorn worker falls
  back to, so a worker restart never rolls the state back to the start-up file;
- `StaticSource`: a snapshot held in memory (tests, `extender explain`);
- `UnconfiguredSource`: a server in a container or a cluster with neither a file nor
  an API server configured serves nothing and is never ready.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from extender import metrics
from extender.state import gcfreeze
from extender.state.loader import ClusterFileError, parse_documents
from extender.state.snapshot import ClusterSnapshot
from extender.state.store import Store

log = logging.getLogger("extender.state")


class ClusterSource:
    """Where a request reads cluster state: the one interface every source implements
    (`FileSource`, `LiveSource`, `StaticSource`, `UnconfiguredSource`, test doubles).
    Callers use these methods and attributes only and never probe for others; a source
    inherits the defaults of what it does not have: no store, no API access, always
    ready, confirmed current and never behind."""

    #: the `Store` its feeds write to (FileSource, LiveSource): the engine assumes pods
    #: being bound there, the drift report observes it; None for a fixed snapshot
    store: Store | None = None
    #: a kubernetes `ApiClient` (LiveSource): binding, events, reading pods for
    #: /explain, TokenReview and SubjectAccessReview; None without API access
    api_client: Any = None
    #: kind -> its `Reflector` (LiveSource: each kind's resourceVersion); empty otherwise
    reflectors: Mapping[str, Any] = MappingProxyType({})

    def snapshot(self) -> ClusterSnapshot:
        """A consistent state for one request."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether the state may be served (/readyz)."""
        return True

    def readiness(self) -> tuple[bool, str]:
        """(ready, why), for /readyz and the state an explanation was computed on."""
        ok = self.ready()
        return ok, "ok" if ok else "cluster state not loaded"

    def liveness(self) -> tuple[bool, str]:
        """(alive, why), for /healthz: false when the process is better restarted."""
        return True, "ok"

    def unready(self) -> tuple[str, str] | None:
        """(reason, message) when no verb may compute a verdict now
        (`extender.engine.gate`), else None."""
        return None

    def unconfirmed(self, kinds: Iterable[str]) -> tuple[str, str] | None:
        """(reason, message) when a verdict reading `kinds` may not be computed now (a
        kind being rechecked or relisted), else None."""
        return None

    def behind(self, kind: str, rv: str) -> bool:
        """Whether our `kind` state is older than resourceVersion `rv`."""
        return False

    def await_version(self, kind: str, rv: str, what: str) -> bool:
        """Wait until our `kind` state reaches `rv`; True when it has."""
        return True

    def age(self) -> float | None:
        """Seconds the state has not been confirmed current (live) or has not matched
        its file (file); None for a source without such a notion."""
        return None

    def start(self) -> None:
        """Start the source's threads, in the process that serves."""

    def stop(self) -> None:
        """Stop them."""


class StaticSource(ClusterSource):
    """A snapshot held in memory (tests, `explain`); `set` swaps it (simulations)."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def ready(self) -> bool:
        return True

    def set(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot


class UnconfiguredSource(ClusterSource):
    """No cluster state configured: an empty state that is never ready."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self._snapshot = ClusterSnapshot([])

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def ready(self) -> bool:
        return False

    def readiness(self) -> tuple[bool, str]:
        return False, self.reason

    def unready(self) -> tuple[str, str]:
        """The verbs answer an Error, never a verdict over an empty state."""
        return "unconfigured", self.reason


def _last_good_dir() -> Path | None:
    """A private directory for last-good copies, removed when its creator exits."""
    try:
        path = Path(tempfile.mkdtemp(prefix="extender-state-"))
    except OSError as exc:
        log.warning("no last-good copy of the cluster file (no writable temp dir)",
                    extra={"error": str(exc)})
        return None
    creator = os.getpid()
    atexit.register(lambda: os.getpid() == creator and shutil.rmtree(path, ignore_errors=True))
    return path


def read_bytes(path: Path) -> bytes:
    """The cluster file's bytes (one place a test can stand between the read and the
    writer)."""
    return path.read_bytes()


def _free_gradually(objects: list) -> None:
    """Drop the parsed objects a slice at a time: freeing millions of dicts in one
    statement holds the GIL for tens of milliseconds."""
    while objects:
        del objects[-512:]


class FileSource(ClusterSource):
    def __init__(
        self, path: str | os.PathLike, poll_seconds: float = 2.0, last_good: bool = True,
        store: Store | None = None, freeze: bool = False,
    ) -> None:
        """`freeze`: the serving process's choice (`extender.state.gcfreeze`): the loaded
        state is frozen out of the collector's reach after every (re)load."""
        self.path = Path(path)
        self.freeze = freeze
        self.poll_seconds = poll_seconds
        self.store = store or Store()
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._read_stamp: tuple[int, int] | None = None
        self._broken_since: float | None = None  # the file stopped matching what we serve
        self._dir = _last_good_dir() if last_good else None
        self._replaced = gcfreeze.ReplacedStates()
        self._load(self.path, keep_copy=False)  # start-up errors propagate: a bad file is fatal
        log.info("cluster state loaded", extra={"path": str(self.path), **self.snapshot().counts()})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def last_good(self) -> Path | None:
        return self._dir / "last-good" if self._dir is not None else None

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _load(self, path: Path, keep_copy: bool = True) -> None:
        """Apply `path` to the store; `keep_copy`: also make it the last-good copy (not
        needed for the start-up file: a new worker starts from that state anyway)."""
        stamp = self._file_stamp()
        self._read_stamp = stamp  # what a failed load records (`reload`)
        try:
            data = read_bytes(path)
        except OSError as exc:
            raise ClusterFileError(f"cannot read cluster file {str(path)!r}: {exc.strerror}") from exc
        if self._stamp is not None and not data.strip():
            # An empty file on reload is a writer caught between truncating and writing
            # (`>` in a shell, `write_bytes`), far more often than a cluster emptied on
            # purpose: applying it would drop every node until the next poll, and a
            # worker restarting then would start from it. An empty cluster is written as
            # an empty list.
            raise ClusterFileError(f"cluster file {str(path)!r} is empty (a write in progress?); "
                                   "an empty cluster is written as an empty list")
        replaced = self.store.snapshot() if self.freeze and self._stamp is not None else None
        if self.freeze:
            gcfreeze.collect_unfrozen()
        with gcfreeze.collector_paused():
            objects = parse_documents(data, str(path))
            self.store.load(objects)
            self.store.publish()
            _free_gradually(objects)
        if self.freeze:
            gcfreeze.freeze_loaded_state()
            if replaced is not None:
                self._replaced.replaced(replaced)
                del replaced
            self._replaced.check()
        self._stamp = stamp
        self._broken_since = None
        if keep_copy and self.last_good is not None and path != self.last_good:
            try:
                tmp = self.last_good.with_suffix(".tmp")
                tmp.write_bytes(data)
                tmp.replace(self.last_good)
            except OSError as exc:
                log.warning("cannot keep a last-good copy of the cluster file", extra={"error": str(exc)})

    def snapshot(self) -> ClusterSnapshot:
        return self.store.snapshot()

    def ready(self) -> bool:
        return True

    def age(self) -> float:
        """Seconds since the file stopped matching what is served (0: it matches)."""
        return 0.0 if self._broken_since is None else time.monotonic() - self._broken_since

    def readiness(self) -> tuple[bool, str]:
        age = self.age()
        metrics.CLUSTER_STATE_AGE.set(age)
        if age:
            return True, f"ok; serving the last good cluster file, the current one is broken since {age:.0f}s"
        return True, "ok"

    def reload(self, reason: str = "manual") -> bool:
        """Reload now; keep the current state if the new file is broken."""
        with self._lock:
            try:
                self._load(self.path)
            except (ClusterFileError, OSError) as exc:
                metrics.CLUSTER_STATE_RELOADS_TOTAL.labels("error").inc()
                log.error("cluster state reload failed; keeping the previous state",
                          extra={"reason": reason, "error": str(exc), "path": str(self.path)})
                # Do not retry the same broken file forever, but record the file as it
                # was before it was read: a writer that rewrites in place (truncate, then
                # write) may finish between our read and now, and that newer file must
                # still be read on the next poll, not taken for the broken one.
                self._stamp = self._read_stamp
                if self._broken_since is None:
                    self._broken_since = time.monotonic()
                return False
            metrics.CLUSTER_STATE_RELOADS_TOTAL.labels("success").inc()
            log.info("cluster state reloaded", extra={"reason": reason, **self.snapshot().counts()})
            return True

    def reload_if_changed(self, reason: str = "file changed") -> bool:
        stamp = self._file_stamp()
        if stamp is not None and stamp != self._stamp:
            return self.reload(reason)
        return False

    def worker_start(self) -> None:
        """In a freshly forked worker: catch up with the file; if it is broken now, serve
        the last good copy a previous worker loaded rather than the start-up state."""
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return
        if self.reload("worker start"):
            return
        last_good = self.last_good
        if last_good is not None and last_good.exists():
            try:
                with self._lock:
                    broken_since = self._broken_since
                    self._load(last_good, keep_copy=False)
                    self._stamp = stamp
                    self._broken_since = broken_since
                log.warning("serving the last good cluster file a previous worker loaded",
                            extra={"path": str(self.path)})
            except (ClusterFileError, OSError) as exc:
                log.error("last-good cluster file unreadable", extra={"error": str(exc)})

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
