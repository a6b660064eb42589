"""The API server as the live feed talks to it: the generated client's list-or-watch
call per kind, TCP keep-alive and read timeouts on its sockets, the backoff between
failed calls, and how the server's refusals read (`Expired`: 410 Gone, or 504 "Too
large resource version" after an etcd restore). Kept apart from the reflector and the
watchdog, which both call the server and read its answers the same way.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

CONNECT_TIMEOUT = 10.0
# a watch read that waits this long is a dead connection (the watchdog finds dead
# streams much sooner when something changed; this only reclaims the socket)
WATCH_READ_TIMEOUT = 90.0
# TCP keep-alive on every API connection: idle seconds, probe interval, probe count
KEEPALIVE = (15, 5, 3)


class Expired(Exception):
    """410 Gone / Expired, or 504 Too large resource version: the resourceVersion is not
    one the server can resume from; relist."""


def too_large(status: Any) -> bool:
    """A `metav1.Status` (dict) saying "Too large resource version" (504 Timeout with the
    cause ResourceVersionTooLarge, or that message from older servers): the server is
    behind the resourceVersion asked for, as after an etcd restore."""
    if not isinstance(status, dict) or status.get("code") not in (504, None):
        return False
    causes = (status.get("details") or {}).get("causes") or []
    if any(isinstance(c, dict) and (c.get("reason") == "ResourceVersionTooLarge"
                                    or c.get("message") == "Too large resource version") for c in causes):
        return True
    return status.get("code") == 504 and "Too large resource version" in str(status.get("message") or "")


def expired_or_too_large(status: Any) -> bool:
    """A `metav1.Status` (dict) the resourceVersion cannot be resumed after: relist."""
    return isinstance(status, dict) and (status.get("code") == 410 or status.get("reason") in ("Expired", "Gone")
                                         or too_large(status))


def status_body(exc: BaseException) -> Any:
    """The `metav1.Status` an `ApiException` carries, decoded (None if there is none)."""
    body = getattr(exc, "body", None)
    try:
        return orjson.loads(body) if body else None
    except (orjson.JSONDecodeError, TypeError):
        return None


class WatchError(Exception):
    """The server sent an ERROR event or an unreadable line."""


@dataclass
class Backoff:
    """Jittered exponential backoff (client-go's wait.Backoff with jitter 1.0)."""

    initial: float = 0.8
    maximum: float = 30.0
    _next: float = 0.0

    def next(self) -> float:
        self._next = self.initial if not self._next else min(self._next * 2, self.maximum)
        return min(self._next * (1.0 + random.random()), self.maximum)

    def reset(self) -> None:
        self._next = 0.0


def api_lister(api_client: Any, kind: str) -> Callable[..., Any]:
    """The generated client's list-or-watch call for `kind` across all namespaces."""
    from kubernetes import client

    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    return {
        "Node": core.list_node,
        "Pod": core.list_pod_for_all_namespaces,
        "Service": core.list_service_for_all_namespaces,
        "ReplicationController": core.list_replication_controller_for_all_namespaces,
        "ReplicaSet": apps.list_replica_set_for_all_namespaces,
        "StatefulSet": apps.list_stateful_set_for_all_namespaces,
        "PersistentVolume": core.list_persistent_volume,
        "PersistentVolumeClaim": core.list_persistent_volume_claim_for_all_namespaces,
    }[kind]


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed call (None when it never got an answer)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """urllib3's default socket options (TCP_NODELAY) plus TCP keep-alive (`KEEPALIVE`):
    a peer that vanished without a FIN or RST is noticed in ~30 s, not after the
    kernel's two hours."""
    import urllib3

    idle, interval, count = KEEPALIVE
    options = list(urllib3.connection.HTTPConnection.default_socket_options)
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def abort_stream(response: Any) -> None:
    """End a streaming response from another thread: shutting the socket down wakes a
    read blocked on it (closing alone does not, on Linux)."""
    if response is None:
        return
    conn = getattr(response, "connection", None) or getattr(response, "_connection", None)
    sock = getattr(conn, "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
        response.close()
    except Exception:  # noqa: BLE001 - ending it is best effort; it may be gone already
        pass
