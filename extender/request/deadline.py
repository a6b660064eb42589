"""The per-request deadline: all of one request's CEL work shares one wall-clock limit.

Why a request deadline and not a per-evaluation time guard: a verdict must be a function
of (expression, taint) only.  A time guard per evaluation turns machine load into "does
not tolerate" answers that are then memoised.  Instead, the per-evaluation limiter is the
deterministic runtime cost (``extender.cel.limits.MAX_COST``), and time is bounded per
*request*: when the request's deadline passes, evaluation raises ``DeadlineExceeded``, which is never a
verdict and never memoised; the engine answers the request with an ``Error`` and
kube-scheduler retries the pod.  Evaluations finished before the deadline stay memoised,
so the retry makes progress.

The deadline lives in a ``contextvars.ContextVar`` (each request runs on one thread; a
new thread starts with no deadline), set by ``extender.engine.extender`` around a verb (``--request-deadline``, default 4 s: below
kube-scheduler's default extender ``httpTimeout`` of 5 s, so the scheduler reads our
Error instead of timing out).  Outside
a request (``extender explain``, tests) there is no deadline and only the cost limit
applies.

A request whose client has gone (the server saw its connection close while a thread
answered it) stops at the next check the same way, with ``ClientGone``: no
work continues for an answer nobody reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_DEADLINE: ContextVar[float | None] = ContextVar("extender_request_deadline", default=None)


class DeadlineExceeded(BaseException):  # noqa: N818 - reads as the Go context error
    """The request ran out of time.  A ``BaseException`` so that cel-python's
    ``except Exception`` paths (and the libraries') cannot turn it into a CEL error
    value, i.e. into a memoised "does not match"."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"request deadline of {seconds:g} s exceeded while evaluating "
                         "CEL toleration expressions; retry")
        self.seconds = seconds


class ClientGone(DeadlineExceeded):
    """The request's client closed its connection: nobody waits for the answer."""

    def __init__(self) -> None:
        BaseException.__init__(self, "the client closed its connection before the answer")
        self.seconds = 0.0


_LIMIT: ContextVar[float] = ContextVar("extender_request_deadline_seconds", default=0.0)
_ARRIVED: ContextVar[float | None] = ContextVar("extender_request_arrived", default=None)
_REQUEST: ContextVar[Any] = ContextVar("extender_request", default=None)  # has `gone`


@contextmanager
def arrived(at: float, request: Any = None) -> Iterator[None]:
    """The current request arrived at monotonic time `at`: its deadline counts from
    then, not from when a thread got round to it (the server sets this; a request
    queued for a pool thread or the expensive lane spends its own time waiting, as
    kube-scheduler's `httpTimeout` does). `request.gone` turning true (its client left)
    ends it at the next `check`."""
    token, request_token = _ARRIVED.set(at), _REQUEST.set(request)
    try:
        yield
    finally:
        _ARRIVED.reset(token)
        _REQUEST.reset(request_token)


def client_gone() -> bool:
    """Whether the current request's client has left."""
    request = _REQUEST.get()
    return request is not None and request.gone


@contextmanager
def request_deadline(seconds: float | None) -> Iterator[None]:
    """Run the block under a deadline ``seconds`` after the request arrived (`arrived`;
    default: now). None or <= 0: no deadline. A nested call keeps the earlier (outer)
    deadline if that one is sooner."""
    if not seconds or seconds <= 0:
        yield
        return
    at = (_ARRIVED.get() or time.monotonic()) + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(at if outer is None else min(outer, at))
    limit_token = _LIMIT.set(seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
        _LIMIT.reset(limit_token)


def arrival() -> float | None:
    """The monotonic time the current request arrived (`arrived`), or None outside one."""
    return _ARRIVED.get()


def current() -> float | None:
    """The monotonic time the current request must finish by, or None."""
    return _DEADLINE.get()


def remaining() -> float | None:
    """Seconds left in the current request (never negative), or None without one."""
    at = _DEADLINE.get()
    return None if at is None else max(0.0, at - time.monotonic())


def exceeded() -> DeadlineExceeded:
    return DeadlineExceeded(_LIMIT.get())


def check(at: float | None = None) -> None:
    """Raise ``DeadlineExceeded`` if the current request's deadline has passed, and
    ``ClientGone`` if its client has left."""
    if at is None:
        at = _DEADLINE.get()
    if at is not None and time.monotonic() > at:
        raise DeadlineExceeded(_LIMIT.get())
    if client_gone():
        raise ClientGone()
