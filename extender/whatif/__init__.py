"""What if? The engine evaluated on a hypothetical state: the live snapshot plus a list
of changes (taints, labels, cordons, removed nodes, a PersistentVolume's annotations),
before they are made.

`changes` validates a request and builds the hypothetical state as a layer over the
snapshot (nothing is copied but the touched nodes, nothing is written into the
snapshot, so the verbs never see it); `answer` runs the drift report's checks on the
running pods, the filter on the pending ones and explain on the request's own pods,
before and after. Served as `POST /whatif` on the side listener
(`extender.server.whatif_routes`), `extender whatif` offline (`offline`) and `kubectl
extender what-if`; docs/operate/what-if.md shows it at work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from extender.config import Config
from extender.drift import attach_tracker
from extender.drift.shapes import TERMINAL_PHASES
from extender.engine import Extender
from extender.state import StaticSource
from extender.state.store import Store
from extender.whatif.answer import MAX_PENDING, TimeLimit, what_if
from extender.whatif.changes import (
    MAX_CHANGES,
    MAX_NODES_TOUCHED,
    Plan,
    WhatIfError,
    hypothesize,
    parse_request,
)

__all__ = ["MAX_CHANGES", "MAX_NODES_TOUCHED", "MAX_PENDING", "TimeLimit", "Plan", "WhatIfError", "answer",
           "is_pending", "offline", "parse_request"]


def is_pending(raw: Mapping[str, Any]) -> bool:
    """A pod waiting for a node: no nodeName, not terminated, not being deleted."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), Mapping) else {}
    spec = raw.get("spec") if isinstance(raw.get("spec"), Mapping) else {}
    status = raw.get("status") if isinstance(raw.get("status"), Mapping) else {}
    return (raw.get("kind", "Pod") == "Pod" and not spec.get("nodeName") and meta.get("deletionTimestamp") is None
            and status.get("phase") not in TERMINAL_PHASES)


def answer(engine: Extender, tracker: Any, body: Any, pending: Iterable[Mapping[str, Any]],
           time_limit: TimeLimit | None = None) -> dict[str, Any]:
    """The what-if of a request body on the engine's current snapshot (WhatIfError for
    a bad request). `tracker`: the drift report's (its running pods and evaluator)."""
    plan = parse_request(body)
    snapshot = engine.source.snapshot()
    hyp = hypothesize(snapshot, plan)
    pods = sorted((dict(p) for p in pending if is_pending(p)),
                  key=lambda p: ((p.get("metadata") or {}).get("namespace") or "default",
                                 (p.get("metadata") or {}).get("name") or ""))
    return what_if(engine, tracker, snapshot, plan, hyp, pods[:MAX_PENDING], time_limit)


def offline(config: Config, objects: list[dict[str, Any]], body: Any) -> dict[str, Any]:
    """`extender whatif`: the what-if on a cluster file's objects, with the spread
    report on (the whole state is at hand)."""
    config = dataclasses.replace(config, drift_report=True, drift_topology_spread=True)
    store = Store()
    tracker = attach_tracker(store, config)
    store.load(objects)
    engine = Extender(config, StaticSource(store.snapshot()))
    fallback, profiles = engine.plugins_by_profile()
    tracker.bind(fallback, spread=True, profiles=profiles)
    return answer(engine, tracker, body, objects)
