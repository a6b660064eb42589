"""The per-request deadline: all of one request's CEL work shares one wall-clock limit.

Why a request deadline and not a per-evaluation time guard: a verdict must be a function
of (expression, taint) only.  A time guard per evaluation turns machine load into "does
not tolerate" answers that are then memoised.  Instead, the per-evaluation limiter is the
deterministic runtime cost (``limits.MAX_COST``), and time is bounded per *request*: when
the request's deadline passes, evaluation raises ``DeadlineExceeded``, which is never a
verdict and never memoised; the service answers the request with an ``Error`` and
kube-scheduler retries the pod.  Evaluations finished before the deadline stay memoised,
so the retry makes progress.

The deadline lives in a ``contextvars.ContextVar`` (each request runs on one thread; a
new thread starts with no deadline), set by ``extender.service`` around a verb (``--request-deadline``, default 4 s: below
kube-scheduler's default extender ``httpTimeout`` of 5 s, so the scheduler reads our
Error instead of timing out).  Outside
a request (``extender explain``, tests) there is no deadline and only the cost limit
applies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("extender_request_deadline", default=None)


class DeadlineExceeded(BaseException):  # noqa: N818 - reads as the Go context error
    """The request ran out of time.  A ``BaseException`` so that cel-python's
    ``except Exception`` paths (and the libraries') cannot turn it into a CEL error
    value, i.e. into a memoised "does not match"."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"request deadline of {seconds:g} s exceeded while evaluating "
                         "CEL toleration expressions; retry")
        self.seconds = seconds


_LIMIT: ContextVar[float] = ContextVar("extender_request_deadline_seconds", default=0.0)
_ARRIVED: ContextVar[float | None] = ContextVar("extender_request_arrived", default=None)


@contextmanager
def arrived(at: float) -> Iterator[None]:
    """The current request arrived at monotonic time `at`: its deadline counts from
    then, not from when a thread got round to it (the server sets this; a request
    queued for a pool thread or the expensive lane spends its own time waiting, as
    kube-scheduler's `httpTimeout` does)."""
    token = _ARRIVED.set(at)
    try:
        yield
    finally:
        _ARRIVED.reset(token)


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
    """Raise ``DeadlineExceeded`` if the current request's deadline has passed."""
    if at is None:
        at = _DEADLINE.get()
    if at is not None and time.monotonic() > at:
        raise DeadlineExceeded(_LIMIT.get())
