"""The drift report as `GET /drift` answers it (and `kubectl extender drift` prints it).

    {"pods": [{"namespace", "name", "uid", "node", "since",
               "violations": [{"plugin", "severity", "reason", "details": [...]}]}],
     "omittedPods": 0,
     "totals": [{"plugin", "reason", "severity", "pods"}],
     "spread": {"enabled": false} | {"enabled": true, "evaluatedAt", "seconds", "pods": [...]},
     "drift": {"trackedPods", "pending", "ageSeconds", "generation"},
     "state": {...}}

`pods` are sorted by namespace and name; `reason` is the plugin's reason as `/filter`
answers it and `details` are `extender explain`'s detail lines. `totals` count pods
per gauge label set (`extender_pods_violating`), over the pods the query selects.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from extender.drift.evaluate import SEVERITIES, gauge_reason

DEFAULT_LIMIT = 1000
MAX_LIMIT = 20000


class QueryError(ValueError):
    """A query the report cannot answer (400)."""


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_query(args: Any) -> dict[str, Any]:
    """`namespace`, `severity` (comma-separated), `limit` from a query's MultiDict."""
    def one(name: str, default: str) -> str:
        values = args.getlist(name)
        return values[-1] if values else default

    namespace = one("namespace", "") or None
    severities = {s.strip() for s in one("severity", "").split(",") if s.strip()} or None
    unknown = (severities or set()) - set(SEVERITIES)
    if unknown:
        raise QueryError(f"severity: expected some of {', '.join(SEVERITIES)}, got {', '.join(sorted(unknown))[:100]!r}")
    limit = one("limit", str(DEFAULT_LIMIT))
    if not limit.isdigit() or not 0 < int(limit) <= MAX_LIMIT:
        raise QueryError(f"limit: expected an integer 1..{MAX_LIMIT}, got {limit[:50]!r}")
    return {"namespace": namespace, "severities": severities, "limit": int(limit)}


def _pod_json(key: tuple[str, str], node: str, uid: str, since: float | None, violations: list) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": key[0], "name": key[1], "uid": uid, "node": node}
    if since is not None:
        out["since"] = _stamp(since)
    out["violations"] = [v.to_json() for v in violations]
    return out


def build(tracker: Any, namespace: str | None = None, severities: set[str] | None = None,
          limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """The report of `tracker` as of its last settle, cut to one namespace and some
    severities, at most `limit` pods (`omittedPods` says how many more)."""
    pods, totals = [], Counter()
    for key, drifted in tracker.entries(namespace):
        violations = [v for v in drifted.violations if severities is None or v.severity in severities]
        if not violations:
            continue
        for labels in {(v.plugin, gauge_reason(v), v.severity) for v in violations}:
            totals[labels] += 1
        pods.append(_pod_json(key, drifted.node, drifted.uid, drifted.since, violations))
    spread: dict[str, Any] = {"enabled": tracker.spread is not None}
    if tracker.spread is not None:
        report = tracker.spread
        drifted = report.drifted  # replaced whole by each run: one consistent view
        spread_pods = []
        for key in sorted(drifted):
            if namespace is not None and key[0] != namespace:
                continue
            node, violations = drifted[key]
            violations = [v for v in violations if severities is None or v.severity in severities]
            if violations:
                for labels in {(v.plugin, v.reason, v.severity) for v in violations}:
                    totals[labels] += 1
                spread_pods.append(_pod_json(key, node, "", None, violations))
        spread.update({"evaluatedAt": _stamp(time.time() - (time.monotonic() - report.ran_at))
                       if report.ran_at else None, "seconds": round(report.seconds, 3),
                       "pods": spread_pods[:limit], "omittedPods": max(0, len(spread_pods) - limit)})
    return {
        "pods": pods[:limit],
        "omittedPods": max(0, len(pods) - limit),
        "totals": [{"plugin": p, "reason": r, "severity": s, "pods": n}
                   for (p, r, s), n in sorted(totals.items())],
        "spread": spread,
        "drift": {"trackedPods": tracker.tracked, "pending": tracker.pending,
                  "ageSeconds": round(time.monotonic() - tracker.settled_at, 3) if tracker.settles else None,
                  "generation": tracker.last_generation},
    }
