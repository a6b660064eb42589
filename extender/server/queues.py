"""Bounded, fair queues in front of a listener's pool threads (`FairLane`).

A thread pool's own queue is unbounded and first come, first served: on the side
listener (`--metrics-listen`, the kubelet's liveness probe of both containers) 8
addresses x 128 connections asking `GET /metrics`, or `/explain` with random tokens
while the API server's TokenReview hung, filled every connection slot with requests
waiting for its two threads, nothing could be evicted, accepting paused and the probes'
connections were reset. A `FairLane` instead:

* holds at most `limit` waiting requests, and at most `per_client` of one client
  address: a request beyond either is refused at once (the listener answers 503 with
  `Retry-After` and closes: never a held connection), except that when the lane is full
  a client with fewer waiting takes the place of the newest waiting request of the
  client with the most (eviction of the heaviest);
* serves its clients in turn (round robin by address), each client's requests in
  arrival order: a client with one request waits behind at most one request of each
  other client, however many those send;
* lets a waiting request whose client has left be taken out (`remove`) before any
  thread starts it.

So the connections that wait for a thread are bounded by the lanes' limits, far below
the listener's connection cap: accepting never pauses for them.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("extender.http")


class FairLane:
    """`threads` threads calling `run(item)` for the items `offer`ed, one client's at a
    time in turn (see the module docstring)."""

    def __init__(self, name: str, threads: int, limit: int, per_client: int, run: Callable[[Any], None]) -> None:
        self.name = name
        self.limit = max(1, limit)
        self.per_client = max(1, min(per_client, self.limit))
        self.run = run
        self.queues: dict[str, deque] = {}  # client -> its waiting items, oldest first
        self.turns: deque[str] = deque()  # clients with waiting items, next first
        self.waiting = 0
        self.running = 0  # items a thread is on
        self.stopped = False
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                        for i in range(max(1, threads))]
        for thread in self.threads:
            thread.start()

    def offer(self, client: str, item: Any) -> tuple[bool, Any]:
        """Queue `client`'s `item`: (True, the item evicted to make room, or None), or
        (False, None) when it does not fit (the client has `per_client` waiting, or the
        lane is full and no client has at least two more waiting than this one).
        RuntimeError once the lane is shut down."""
        with self.cond:
            if self.stopped:
                raise RuntimeError("lane shut down")
            mine = self.queues.get(client)
            count = len(mine) if mine else 0
            if count >= self.per_client:
                return False, None
            evicted = None
            if self.waiting >= self.limit:
                heaviest = max(self.queues, key=lambda c: len(self.queues[c]))
                if len(self.queues[heaviest]) < count + 2:
                    return False, None
                evicted = self.queues[heaviest].pop()  # its newest: its oldest keeps its turn
                self.waiting -= 1
            if mine is None:
                mine = self.queues[client] = deque()
                self.turns.append(client)
            mine.append(item)
            self.waiting += 1
            self.cond.notify()
        return True, evicted

    def remove(self, client: str, item: Any) -> bool:
        """Take a waiting `item` out (its client left): False if a thread has it."""
        with self.cond:
            mine = self.queues.get(client)
            if not mine:
                return False
            try:
                mine.remove(item)
            except ValueError:
                return False
            self.waiting -= 1
            if not mine:
                del self.queues[client]
                self.turns.remove(client)
            return True

    def _take(self) -> Any:
        with self.cond:
            while not self.waiting and not self.stopped:
                self.cond.wait()
            if self.stopped:
                return None
            client = self.turns.popleft()
            mine = self.queues[client]
            item = mine.popleft()
            self.waiting -= 1
            self.running += 1
            if mine:
                self.turns.append(client)
            else:
                del self.queues[client]
            return item

    def _work(self) -> None:
        while (item := self._take()) is not None:
            try:
                self.run(item)
            except Exception:  # a thread must never die: log, and go on
                log.exception("lane error", extra={"lane": self.name})
            finally:
                with self.cond:
                    self.running -= 1

    def idle(self) -> bool:
        """Nothing waiting, nothing running."""
        with self.cond:
            return not self.waiting and not self.running

    def shutdown(self) -> list[Any]:
        """Stop the threads (after the item each is running); the items still waiting."""
        with self.cond:
            self.stopped = True
            left = [item for mine in self.queues.values() for item in mine]
            self.queues.clear()
            self.turns.clear()
            self.waiting = 0
            self.cond.notify_all()
        return left
