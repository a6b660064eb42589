"""Pods that no longer fit where they run: the drift report.

Kubernetes checks `NoSchedule` taints and required node affinity only when a pod is
placed (IgnoredDuringExecution). With the extended operators, node attributes that
change while pods run (an SLA taint's value, a kernel version label, a volume's node
affinity annotation) decide placement, so a running pod can stop satisfying what it
asked for. This package keeps, from the live state, the set of running pods whose node
fails their constraints by the same plugins and semantics as `/filter`
(`extender.drift.evaluate`), incrementally (`extender.drift.tracker`), with an opt-in
topology spread report (`extender.drift.spread`); it is exported as
`extender_pods_violating`, `GET /drift` (`extender.drift.report`), optional Events
(`extender.drift.events`) and `kubectl extender drift`. docs/operate/drift.md says what
is reported, why, and how to act on it.
"""

from __future__ import annotations

import logging
from typing import Any

from extender.drift.events import DriftEvents
from extender.drift.shapes import Shapes
from extender.drift.spread import NAME as SPREAD
from extender.drift.tracker import DriftTracker
from extender.events import ApiEventSink
from extender.plugins.podtopologyspread.args import DO_NOT_SCHEDULE, parse_args

log = logging.getLogger("extender.drift")

__all__ = ["DriftTracker", "attach_tracker", "drift_for"]


def attach_tracker(store: Any, config: Any) -> DriftTracker:
    """A tracker observing `store` (call it before any feed writes into the store: the
    cluster file's first load, the first list)."""
    hard_defaults = False
    for profile in config.profiles().profiles.values():
        if SPREAD in profile.delegated:
            args = parse_args(profile.plugin_args.get(SPREAD, {}), f"pluginConfig[{SPREAD}].args")
            hard_defaults = hard_defaults or any(c.get("whenUnsatisfiable") == DO_NOT_SCHEDULE for c in args.defaults)
    shapes = Shapes(config.annotation_prefix, config.feature_gates, spread=config.drift_topology_spread,
                    owners=hard_defaults)
    return DriftTracker(shapes).attach(store)


def drift_for(extender: Any) -> DriftTracker | None:
    """The drift report `--drift-*` asks for, evaluating with `extender`'s plugins: the
    tracker `attach_tracker` put on the source's store (`extender.server.opening`), or one
    attached now (it then sees the changes from now on only). None when off or when the
    source has no store."""
    config = extender.config
    if not config.drift:
        return None
    store = extender.source.store
    if store is None:
        log.warning("the drift report needs a cluster state (--cluster, --kubeconfig or --in-cluster): off")
        return None
    tracker = store.observer if isinstance(store.observer, DriftTracker) else attach_tracker(store, config)
    fallback, profiles = extender.plugins_by_profile()
    tracker.bind(fallback, spread=config.drift_topology_spread, profiles=profiles)
    tracker.export_zeros()
    if config.drift_events:
        api_client = extender.source.api_client
        if api_client is None:
            log.warning("--drift-events needs API access (--kubeconfig or --in-cluster): no events recorded")
        else:
            tracker.on_drift = DriftEvents(ApiEventSink(api_client)).offer
    return tracker
