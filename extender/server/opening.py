"""Choosing and starting the cluster-state source from the configuration."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from extender.config import Config, ConfigError
from extender.drift import attach_tracker
from extender.state.live import LiveSource
from extender.state.source import ClusterSource, FileSource, UnconfiguredSource
from extender.state.store import Store

log = logging.getLogger("extender.state")

NOT_CONFIGURED = (
    "no cluster state configured: running in a container or a cluster without --cluster, "
    "--kubeconfig or --in-cluster; refusing to serve the bundled example cluster "
    "(use --in-cluster in a cluster)"
)


def in_container() -> bool:
    """In a Kubernetes pod or a container (Docker, Podman), where the bundled example
    cluster would be a misconfiguration, not a demo."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    return Path("/.dockerenv").exists() or Path("/run/.containerenv").exists()


def open_source(config: Config, serving: bool = False) -> ClusterSource:
    """The source the configuration selects, not started (`start_in_worker`); `serving`:
    for `extender serve` (a file's state is frozen out of the collector's reach).

    Live mode builds the API client now (a bad kubeconfig fails start-up) but opens no
    connection: watches start in the serving process. With the drift report on, its
    tracker observes the store from the first object on (`extender.drift`)."""
    store = None
    if config.drift:
        store = Store()
        attach_tracker(store, config).freeze = serving  # as the state: see `DriftTracker.settle`
    if config.live:
        if config.workers > 1:
            log.warning("live mode with several workers: each worker runs its own watch "
                        "(memory and API-server load times the worker count); prefer --workers 1",
                        extra={"workers": config.workers})
        kubeconfig = None if config.kubeconfig in ("", "default") else config.kubeconfig
        try:
            return LiveSource.connect(kubeconfig, config.in_cluster, max_staleness=config.max_staleness,
                                      freeze_after_sync=True, bind_watch_timeout=config.bind_watch_timeout,
                                      max_unready=config.max_unready, store=store)
        except Exception as exc:  # kubernetes' ConfigException and file errors: say which flag
            flag = "--in-cluster" if config.in_cluster else "--kubeconfig"
            raise ConfigError(f"{flag}: cannot configure the API client: {exc}") from None
    if not config.cluster and in_container():
        log.error(NOT_CONFIGURED)
        return UnconfiguredSource(NOT_CONFIGURED)
    return FileSource(config.cluster_file, poll_seconds=config.reload_interval, freeze=serving, store=store)


def start_in_worker(source: ClusterSource) -> None:
    """Start the source's threads in the process that serves (after gunicorn's fork),
    and the drift report's, when it observes the source's store."""
    if source.store is not None and source.store.observer is not None:
        source.store.observer.start()
    if isinstance(source, FileSource):
        source.worker_start()
        source.start(install_sighup=False)
        return
    source.start()
