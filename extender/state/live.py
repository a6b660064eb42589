"""Live cluster state: list and watch the API server, like kube-scheduler's informers.

`LiveSource` is the `ClusterSource` that puts the pieces together, split by job as
client-go and the scheduler's cache split them: one `Reflector` per kind (Nodes, Pods in
all namespaces, Services, ReplicaSets, StatefulSets, ReplicationControllers,
PersistentVolumes, PersistentVolumeClaims) lists and watches into the `Store`
(`extender.state.reflector`); each reflector's `Watchdog` probes a stream that fell
silent (`extender.state.watchdog`); `Readiness` says whether the state may answer and
suspects every kind when a bind shows the watches behind (`extender.state.readiness`);
`extender.state.kubeapi` is how they all call the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from extender import metrics
from extender.state.gcfreeze import freeze_state
from extender.state.kubeapi import Backoff, api_lister, keepalive_socket_options
from extender.state.readiness import Readiness
from extender.state.reflector import PAGE_SIZE, WATCH_SECONDS, Reflector
from extender.state.snapshot import ClusterSnapshot
from extender.state.source import ClusterSource
from extender.state.store import KINDS, Store
from extender.state.watchdog import Watchdog, probe_interval


class LiveSource(Readiness, ClusterSource):
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
        Readiness.__init__(self, max_staleness, bind_watch_timeout, max_unready)
        self.store = store or Store()
        self.freeze_after_sync = freeze_after_sync
        self.probe_interval = probe_interval(max_staleness)
        self.api_client = api_client
        self.reflectors = {
            kind: Reflector(kind, api_lister(api_client, kind), self.store, page_size, backoff(), watch_seconds)
            for kind in KINDS
        }
        self.watchdogs = {kind: Watchdog(reflector) for kind, reflector in self.reflectors.items()}
        for reflector in self.reflectors.values():
            reflector.freeze_after_sync = freeze_after_sync
        self._threads: list[threading.Thread] = []
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
            watchdog = self.watchdogs[kind]
            for target, name in ((reflector.run, "watch"), (lambda w=watchdog: w.run(self.probe_interval),
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
            if all(r.stopping.is_set() for r in self.reflectors.values()):
                return
        if not any(r.stopping.is_set() for r in self.reflectors.values()):
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
