"""The process-wide CEL toleration cache: compiled programs + a memo of results.

One instance is created at start-up and shared by every plugin (KEP-5500 / DRA pattern):

* an LRU (cachetools) of compiled programs keyed by the expression, guarded by a lock;
  compile failures are cached too (negative entries), so a bad expression on a
  5,000-node request is compiled once, not 5,000 times;
* a hashed key-mutex (64 buckets, as DRA's ``keymutex.NewHashed``) around get-or-compile,
  so concurrent misses for one expression compile it once (single flight);
* a bounded memo of outcomes keyed by ``(expression, key, value, effect)`` — evaluation is
  a pure function of those (no time-dependent variables) and most nodes share taints.

Metrics: program-cache hits/misses/evictions/entries, compile duration, evaluation errors
by reason (counted when an outcome is computed, not on memo hits), memo hits/misses.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from extender import metrics
from extender.caching import ByteLRU
from extender.cel.environment import TOO_LONG_MESSAGE, CompileError, too_long
from extender.cel.limits import COMPILE_SLOTS, EXPENSIVE_SLOTS, MAX_COST
from extender.cel.program import Program, compile_program, run_program
from extender.metrics import read
from extender.request import deadline, lane

_KEY_MUTEXES = 64


@dataclass(frozen=True, slots=True)
class CelOutcome:
    matched: bool  # True only if the expression evaluated to boolean true
    kind: str  # "true" | "false" | "compile" | "runtime" | "cost" | "non-bool"
    message: str  # "" for true/false; otherwise a precise, truncated error message


_TRUE = CelOutcome(True, "true", "")
_FALSE = CelOutcome(False, "false", "")
_TOO_LONG = CelOutcome(False, "compile", TOO_LONG_MESSAGE)


@dataclass(frozen=True, slots=True)
class _Failed:
    """A negative cache entry: the expression does not compile."""

    message: str


def _estimate(entry: Program | _Failed | None) -> int | None:
    """A cache entry's estimated cost for `lane.admit` (None: not compiled yet)."""
    if entry is None:
        return None
    return 0 if isinstance(entry, _Failed) else entry.estimated_cost


def program_bytes(expression: str) -> int:
    """Estimated memory of a compiled program (tracemalloc: ~20 KB for a 90-character
    expression, ~5 bytes per character of long literals)."""
    return 16384 + 64 * len(expression)


def result_bytes(key: tuple, outcome: CelOutcome) -> int:
    return 200 + sum(map(len, key)) + len(outcome.message)


class CelCache:
    def __init__(self, max_programs: int = 1024, max_results: int = 100_000,
                 cost_limit: int = MAX_COST) -> None:
        self.cost_limit = cost_limit  # the runtime budget per evaluation (tests lower it)
        self._programs = ByteLRU("cel-programs", max_entries=max(1, max_programs),
                                 on_evict=self._evicted)
        self._key_locks = [threading.Lock() for _ in range(_KEY_MUTEXES)]
        self._memo = ByteLRU("cel-results", max_entries=max_results) if max_results > 0 else None
        self._expensive = threading.BoundedSemaphore(EXPENSIVE_SLOTS)
        self._compiling = threading.BoundedSemaphore(COMPILE_SLOTS)
        self._since = _counters()  # stats() counts from here
        # Labelled children bound once: ``labels()`` costs more than the memo lookup itself.
        self._program_hit = metrics.CEL_CACHE_REQUESTS_TOTAL.labels(result="hit")
        self._program_miss = metrics.CEL_CACHE_REQUESTS_TOTAL.labels(result="miss")
        self._memo_hit = metrics.CEL_RESULT_MEMO_TOTAL.labels(result="hit")
        self._memo_miss = metrics.CEL_RESULT_MEMO_TOTAL.labels(result="miss")

    # --- programs -------------------------------------------------------------------
    def _evicted(self, count: int) -> None:
        metrics.CEL_CACHE_EVICTIONS_TOTAL.inc(count)

    def _lookup(self, expression: str) -> Program | _Failed | None:
        return self._programs.get(expression)

    def _get_or_compile(self, expression: str) -> Program | _Failed:
        entry = self._lookup(expression)
        if entry is None:
            with self._key_locks[hash(expression) % _KEY_MUTEXES]:
                entry = self._lookup(expression)  # another thread may have compiled it
                if entry is None:
                    entry = self._compile(expression)
                    self._programs.put(expression, entry, program_bytes(expression))
                    metrics.CEL_CACHE_ENTRIES.set(len(self._programs))
                    self._program_miss.inc()
                    return entry
        self._program_hit.inc()
        return entry

    def _compile(self, expression: str) -> Program | _Failed:
        """Compile in one of the ``COMPILE_SLOTS`` (the compile lane); waiting for a slot
        and compiling count against the request's deadline (``DeadlineExceeded``: not
        cached, the retry compiles again)."""
        if not self._compiling.acquire(timeout=deadline.remaining()):
            raise deadline.exceeded()
        start = time.perf_counter()
        try:
            entry: Program | _Failed = compile_program(expression)
        except CompileError as exc:
            entry = _Failed(str(exc))
        finally:
            self._compiling.release()
        metrics.CEL_COMPILE_DURATION.observe(time.perf_counter() - start)
        return entry

    def compile_error(self, expression: str) -> str | None:
        """Admission-style validation (cached): the error message, or None if valid."""
        if too_long(expression):  # never a cache key: the caches stay byte-bounded
            return TOO_LONG_MESSAGE
        entry = self._get_or_compile(expression)
        return entry.message if isinstance(entry, _Failed) else None

    # --- evaluation -------------------------------------------------------------------
    def evaluate(self, expression: str, taint: Any) -> CelOutcome:
        """Outcome of ``expression`` for ``taint`` (memoised).

        Raises only ``deadline.DeadlineExceeded`` (the request is out of time) and
        ``lane.NeedsCostlierLane`` (the work needs another thread, before it starts); neither is
        ever memoised, while every outcome computed before it is.  An expression over
        the length limit is refused before any cache sees it (it is never a key)."""
        if too_long(expression):
            metrics.CEL_EVALUATION_ERRORS_TOTAL.labels(reason="compile").inc()
            return _TOO_LONG
        key = (expression, taint.key, taint.value, taint.effect)
        memo = self._memo
        if memo is not None:
            outcome = memo.get(key)
            if outcome is not None:
                self._memo_hit.inc()
                return outcome
            self._memo_miss.inc()
        deadline.check()
        outcome = self._compute(expression, taint)
        if memo is not None:
            memo.put(key, outcome, result_bytes(key, outcome))
        return outcome

    def _compute(self, expression: str, taint: Any) -> CelOutcome:
        restricted = lane.restricted()  # a server's lane: may it compile, run this?
        if restricted and self._lookup(expression) is None:
            lane.admit(None)
        entry = self._get_or_compile(expression)
        if restricted:  # charged to the lane's cost allowance (or handed on) before it runs
            lane.admit(_estimate(entry))
        if isinstance(entry, _Failed):
            outcome = CelOutcome(False, "compile", entry.message)
        else:
            if entry.estimated_cost < lane.EXPENSIVE_COST:
                kind, message = run_program(entry, taint.key, taint.value, taint.effect,
                                            cost_limit=self.cost_limit)
            else:
                kind, message = self._run_expensive(entry, taint)
            outcome = _TRUE if kind == "true" else _FALSE if kind == "false" else CelOutcome(
                False, kind, message)
        if outcome.kind not in ("true", "false"):
            metrics.CEL_EVALUATION_ERRORS_TOTAL.labels(reason=outcome.kind).inc()
        return outcome

    def _run_expensive(self, program: Program, taint: Any) -> tuple[str, str]:
        """Evaluate an expensive program in one of the ``EXPENSIVE_SLOTS``; waiting for a
        slot counts against the request's deadline (``DeadlineExceeded``, not a verdict)."""
        left = deadline.remaining()
        if not self._expensive.acquire(timeout=left):
            raise deadline.exceeded()
        try:
            return run_program(program, taint.key, taint.value, taint.effect,
                               cost_limit=self.cost_limit)
        finally:
            self._expensive.release()

    def stats(self) -> dict:
        """Program-cache and memo counts since this cache was created, read back from the
        process's metrics (one CelCache serves a process), plus the programs held."""
        now, since = _counters(), self._since
        return {"programs": len(self._programs)} | {k: int(now[k] - since[k]) for k in now}


def _counters() -> dict[str, float]:
    requests, memo = "extender_cel_program_cache_requests_total", "extender_cel_result_memo_requests_total"
    return {
        "hits": read(metrics.CEL_CACHE_REQUESTS_TOTAL, requests, result="hit"),
        "misses": read(metrics.CEL_CACHE_REQUESTS_TOTAL, requests, result="miss"),
        "evictions": read(metrics.CEL_CACHE_EVICTIONS_TOTAL, "extender_cel_program_cache_evictions_total"),
        "memo_hits": read(metrics.CEL_RESULT_MEMO_TOTAL, memo, result="hit"),
        "memo_misses": read(metrics.CEL_RESULT_MEMO_TOTAL, memo, result="miss"),
        "compiles": read(metrics.CEL_COMPILE_DURATION, "extender_cel_compile_duration_seconds_count"),
    }
