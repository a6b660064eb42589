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

Bounded: only the first `limit` pods are written out (the others are counted, in
`omittedPods` and `totals`): at 50,000 drifted pods a JSON object each took 0.7 s of
CPU per request, to be cut to `limit` after. Each drifted pod's JSON text is written
once, when the tracker records it (`pod_fragment`, kept on its `Drifted`), so a report
joins ready-made text: no Python object per pod per request. `Reports` keeps the
answers of the tracker's current settle, so asking again costs nothing until the next one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import orjson

from extender.drift.evaluate import SEVERITIES, gauge_reason
from extender.state import gcfreeze

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


def _pod_json(key: tuple[str, str], node: str, uid: str, since: float | None, violations: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": key[0], "name": key[1], "uid": uid, "node": node}
    if since is not None:
        out["since"] = _stamp(since)
    out["violations"] = [v.to_json() for v in violations]
    return out


class Fragments:
    """The JSON text of drifted pods as `_pod_json` writes them, for the tracker to keep
    (`pod_fragment`) when a pod drifts: pods drifted the same way in one settle share
    their violations' text and their `since` stamp, each written once."""

    def __init__(self) -> None:
        self._violations: dict[int, tuple[Any, bytes]] = {}  # id -> (the tuple, kept alive; its text)
        self._stamps: dict[float, str] = {}

    def pod(self, key: tuple[str, str], node: str, uid: str, since: float, violations: Any) -> bytes:
        held = self._violations.get(id(violations))
        if held is None or held[0] is not violations:
            held = self._violations[id(violations)] = (violations, orjson.dumps([v.to_json() for v in violations]))
        stamp = self._stamps.get(since)
        if stamp is None:
            stamp = self._stamps[since] = _stamp(since)
        head = orjson.dumps({"namespace": key[0], "name": key[1], "uid": uid, "node": node, "since": stamp})
        return b"%s,\"violations\":%s}" % (head[:-1], held[1])


def pod_fragment(key: tuple[str, str], node: str, uid: str, since: float, violations: Any) -> bytes:
    """One drifted pod's JSON text, as the report writes it (`orjson.dumps(_pod_json(...))`)."""
    return Fragments().pod(key, node, uid, since, violations)


def _text(key: tuple[str, str], drifted: Any, violations: Any = None) -> bytes:
    """`drifted`'s JSON text: the one kept since it drifted when every violation is
    shown, else written now."""
    kept = getattr(drifted, "json", b"")
    if kept and (violations is None or len(violations) == len(drifted.violations)):
        return kept
    shown = drifted.violations if violations is None else violations
    return orjson.dumps(_pod_json(key, drifted.node, drifted.uid, drifted.since, shown))


def build(tracker: Any, namespace: str | None = None, severities: set[str] | None = None,
          limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """The report of `tracker` as of its last settle, cut to one namespace and some
    severities, at most `limit` pods (`omittedPods` says how many more)."""
    report = _build(tracker, namespace, severities, limit)
    return {**report, "pods": orjson.loads(bytes(report["pods"]))}


def _joined(texts: list[bytes]) -> bytes:
    return b"[%s]" % b",".join(texts)


def _build(tracker: Any, namespace: str | None, severities: set[str] | None, limit: int) -> dict[str, Any]:
    """`build`'s report with its pods as one JSON text (`bytes`; `Reports` writes it
    into the answer as it is)."""
    pods, totals, omitted = [], Counter(), 0
    texts = None
    if namespace is None and severities is None and hasattr(tracker, "first_text"):
        texts, shown, count, every_total = tracker.first_text(limit)  # the tracker keeps these
        totals.update(every_total)
        omitted = count - shown
    elif namespace is None and severities is None:  # the tracker keeps these totals: `limit` pods read
        first, count, every_total = tracker.first(limit)
        totals.update(every_total)
        pods = [_text(key, d) for key, d in first]
        omitted = count - len(pods)
    else:
        for key, drifted in tracker.entries(namespace):
            violations = [v for v in drifted.violations if severities is None or v.severity in severities]
            if not violations:
                continue
            for labels in {(v.plugin, gauge_reason(v), v.severity) for v in violations}:
                totals[labels] += 1
            if len(pods) < limit:
                pods.append(_text(key, drifted, violations))
            else:
                omitted += 1
    spread: dict[str, Any] = {"enabled": tracker.spread is not None}
    if tracker.spread is not None:
        report = tracker.spread
        drifted = report.drifted  # replaced whole by each run: one consistent view
        spread_pods, spread_omitted = [], 0
        for key in sorted(drifted):
            if namespace is not None and key[0] != namespace:
                continue
            node, violations = drifted[key]
            violations = [v for v in violations if severities is None or v.severity in severities]
            if violations:
                for labels in {(v.plugin, v.reason, v.severity) for v in violations}:
                    totals[labels] += 1
                if len(spread_pods) < limit:
                    spread_pods.append(_pod_json(key, node, "", None, violations))
                else:
                    spread_omitted += 1
        spread.update({"evaluatedAt": _stamp(time.time() - (time.monotonic() - report.ran_at))
                       if report.ran_at else None, "seconds": round(report.seconds, 3),
                       "pods": spread_pods, "omittedPods": spread_omitted})
    return {
        "pods": _joined(pods) if texts is None else texts,
        "omittedPods": omitted,
        "totals": [{"plugin": p, "reason": r, "severity": s, "pods": n}
                   for (p, r, s), n in sorted(totals.items())],
        "spread": spread,
        "drift": {"trackedPods": tracker.tracked, "pending": tracker.pending,
                  "ageSeconds": round(time.monotonic() - tracker.settled_at, 3) if tracker.settles else None,
                  "generation": tracker.last_generation},
    }


def _serialized(report: dict[str, Any]) -> dict[str, Any]:
    """`_build`'s report with its pods as JSON text (`orjson.Fragment`): one object kept
    per list, not several per pod (kept pods, thousands of objects a report, made the
    cyclic collector's full passes come every few reports)."""
    spread = report["spread"]
    if "pods" in spread:
        spread = {**spread, "pods": orjson.Fragment(orjson.dumps(spread["pods"]))}
    return {**report, "pods": orjson.Fragment(report["pods"]), "spread": spread}


class Reports:
    """The reports of one tracker by query, kept while the tracker's state is the same
    (its settle count and generation, and its spread run): a report is built once per
    settle and query, at most `KEEP` queries. Their pods are kept as JSON text
    (`orjson.dumps` writes them as they are)."""

    KEEP = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._building = threading.Lock()  # one build at a time: those asking meanwhile reuse it
        self._state: tuple = ()
        self._held: dict[tuple, dict[str, Any]] = {}

    def get(self, tracker: Any, namespace: str | None = None, severities: set[str] | None = None,
            limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
        """`build`'s answer, from the last one of the same state and query if kept (its
        `drift.ageSeconds` brought up to date)."""
        spread = tracker.spread
        state = (tracker.settles, tracker.last_generation, id(spread), getattr(spread, "ran_at", None))
        query = (namespace, frozenset(severities) if severities is not None else None, limit)
        held = self._kept(state, query)
        if held is None:
            with self._building:
                held = self._kept(state, query)
                if held is None:
                    with gcfreeze.collector_paused():  # as a large verb: no collection over what is built
                        held = _serialized(_build(tracker, namespace, severities, limit))
                    with self._lock:
                        if state == self._state and len(self._held) < self.KEEP:
                            self._held[query] = held
        drift = dict(held["drift"])
        if tracker.settles:
            drift["ageSeconds"] = round(time.monotonic() - tracker.settled_at, 3)
        return {**held, "drift": drift}

    def _kept(self, state: tuple, query: tuple) -> dict[str, Any] | None:
        with self._lock:
            if state != self._state:
                self._state, self._held = state, {}
            return self._held.get(query)
