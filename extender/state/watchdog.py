"""Find a watch stream that fell silent without failing.

A stream can stop delivering without an error (a stuck proxy, a half-dead TCP
connection): nothing arrives, and on a quiet cluster nothing would arrive anyway. A
real API server sends a bookmark about once a minute, and the resourceVersion is global
(etcd's revision: Leases and Events move it every few seconds), so neither silence nor
a newer resourceVersion elsewhere says that *this* kind changed. Each reflector
therefore has a watchdog: once its stream has been silent for `probe_interval` (a third
of what `--max-staleness` leaves after a probe), it asks the server the exact question
with a one-second watch from the stream's resourceVersion (`Watchdog.probe`): no event
means nothing of this kind changed since, and the state is confirmed current; an event
the stream has not delivered (after a short grace) means the stream is dead, and it is
restarted from its resourceVersion (the server replays what was missed; `410` and 504
"Too large resource version" relist). Readiness (`extender.state.readiness`) runs the
same probes when it suspects every kind at once.
"""

from __future__ import annotations

import time

import orjson

from extender.state.kubeapi import (
    CONNECT_TIMEOUT,
    Expired,
    WatchError,
    expired_or_too_large,
    status_body,
    status_of,
    too_large,
)
from extender.state.reflector import Reflector

PROBE_WATCH_SECONDS = 1  # a probe's timeoutSeconds (the API counts in whole seconds)
PROBE_READ_SLACK = 2.0  # a probe that has not ended this long after that failed
DELIVERY_GRACE = 0.5  # seconds the stream gets to deliver what a probe saw


def probe_interval(max_staleness: float) -> float:
    """How long a stream may be silent before its watchdog probes: a third of what
    `max_staleness` leaves after one probe, so a quiet, healthy kind is confirmed
    (silence + check tick + probe <= max_staleness) before it could look stale."""
    return max(0.2, (max_staleness - PROBE_WATCH_SECONDS - PROBE_READ_SLACK / 2) / 3)


class Watchdog:
    """The probes of one reflector's stream (see the module docstring)."""

    def __init__(self, reflector: Reflector) -> None:
        self.reflector = reflector

    def run(self, interval: float) -> None:
        """(its own thread) Probe whenever the open stream has been silent for
        `interval` seconds; see the module docstring."""
        reflector = self.reflector
        while not reflector.stopping.wait(interval / 2):
            if not reflector.streaming or not reflector.synced.is_set():
                continue  # listing, connecting or backing off: the loop reports on those
            if time.monotonic() - max(reflector.heard_at, reflector.confirmed_at) >= interval:
                self.probe()

    def probe(self) -> str:
        """Ask the server whether this kind changed after the stream's resourceVersion;
        returns what was concluded: "current" (nothing changed, the state is confirmed),
        "delivered" (the stream caught up meanwhile), "restarted" (the stream missed
        events: it is ended and resumed), "relist" (the resourceVersion is too old for
        the server) or "failed" (no answer: the state stays unconfirmed)."""
        reflector = self.reflector
        since = reflector.resource_version
        if not since:
            return "failed"
        started = time.monotonic()
        try:
            seen = self._probe_events(since)
        except Expired:
            reflector.end_stream("expired", "the server cannot resume the stream's resourceVersion; relisting",
                                 relist=True)
            return "relist"
        except Exception as exc:  # noqa: BLE001 - unreachable, timed out, refused
            status = status_of(exc)
            if status == 504 and too_large(status_body(exc)):
                reflector.end_stream("too large", "the server is behind the stream's resourceVersion; relisting",
                                     relist=True)
                return "relist"
            reflector.failed(f"probe: http {status}" if status else f"probe: {type(exc).__name__}", exc)
            return "failed"
        if seen is None:  # nothing of this kind after `since`, as of the probe's end
            reflector.confirmed_at = max(reflector.confirmed_at, time.monotonic())
            reflector.failing_since = None
            reflector.confirmed(started)
            return "current"
        if reflector.stopping.wait(DELIVERY_GRACE) or self._delivered(seen, started):
            reflector.confirmed(started)
            return "delivered"
        reflector.end_stream("silent", "the watch stream is silent while the server has newer events; resuming it")
        return "restarted"

    def _probe_events(self, since: str) -> str | None:
        """A one-second watch from `since`: the resourceVersion of the first event it
        sees (read as it arrives: a stream that missed events is found at once), None
        if there was none. Raises Expired on 410 and on 504 Too large."""
        response = self.reflector.lister(
            watch=True, resource_version=since, allow_watch_bookmarks=False,
            timeout_seconds=PROBE_WATCH_SECONDS, _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, PROBE_WATCH_SECONDS + PROBE_READ_SLACK),
        )
        buffer = b""
        try:
            for chunk in response.stream(None, decode_content=False):  # ends after timeoutSeconds
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    seen = _probe_line(line)
                    if seen is not None:
                        return seen
            return _probe_line(buffer)
        finally:
            response.close()  # not drained when an event came early: never back to the pool

    def _delivered(self, rv: str, since: float) -> bool:
        """Has the stream delivered the event with resourceVersion `rv` (numbers, as
        etcd's are; otherwise: has it delivered anything since `since`)?"""
        try:
            return int(self.reflector.resource_version or 0) >= int(rv)
        except ValueError:
            return self.reflector.heard_at > since


def _probe_line(line: bytes) -> str | None:
    """A probe's event line: the event's resourceVersion ("?" without one), None for a
    bookmark or an empty line; Expired / WatchError for an ERROR."""
    if not line.strip():
        return None
    try:
        event = orjson.loads(line)
        type_, obj = event["type"], event["object"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise WatchError(f"unreadable probe event: {line[:200]!r}") from exc
    if type_ == "ERROR":
        if expired_or_too_large(obj):
            raise Expired(obj.get("message") or "expired")
        raise WatchError(f"probe error: {obj.get('code')} {obj.get('message')}")
    if type_ == "BOOKMARK":
        return None
    return (obj.get("metadata") or {}).get("resourceVersion") or "?"
