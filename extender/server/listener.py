"""The extender's HTTP/1.1 server: one event-loop thread moves the bytes of every
connection (`extender.server.connections`); each complete request (`extender.server.http1`)
is answered where its `place` says, on the loop itself (cheap answers) or by a thread of
one of the listener's pools (lanes).

Three users, one worker process each: the verbs' port (`extender.server.app`, run by
the gunicorn worker `extender.server.worker`), `--metrics-listen` (`/healthz`, `/readyz`,
`/metrics`, `/explain`) and the admission webhook (`--webhook-listen`, HTTPS). What a
route sees is a `Request` (method, target, path, body) and what it gives back a `Reply`
(status, content type, body, extra headers); `Routes` serves fixed tables of them.

Why a loop: a connection costs a file descriptor and its buffered bytes, never a thread,
and a thread takes a request only once it has fully arrived, so slow or idle clients
cannot take the threads (the limits on connections, deadlines and bytes:
`extender.server.connections`; on heads and bodies: `extender.server.http1`).

**Where a request runs** (`place`, the lanes of `extender.request.lane`): on the loop
(`LOOP`: microseconds of Python, or a verb whose CEL work is memoised or cheap), or on a
pool thread. A request answered on the loop never pays a hand-off between threads,
which waits for the GIL (a sizeable part of a whole `filter`'s time: docs/design/server.md);
one that turns out to need costlier CEL work raises `lane.NeedsCostlierLane` before anything is written and is answered again, from its buffered
bytes, by the pool of the lane it names. A request keeps its arrival time through every
hop (`deadline.arrived`): its `--request-deadline` counts from its first byte, queueing
included.

With SO_REUSEPORT every gunicorn worker binds the same `--metrics-listen` and webhook
address, so any live worker answers. An `ssl.SSLContext` (or a callable returning the
current one, for certificate rotation) turns a listener into HTTPS; the handshake runs
on the loop, without blocking.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from concurrent import futures
from functools import partial

from extender.api import expansion
from extender.request import deadline, lane
from extender.request.foreground import FOREGROUND
from extender.server.connections import (
    ANSWERING,
    MIN_SEND_RATE,
    READ,
    READING,
    Conn,
    Connections,
    SSLContexts,
)
from extender.server.http1 import (
    CONTINUE,
    JSON,
    Refused,
    Reply,
    Request,
    encode,
    error_body,
    head_end,
)
from extender.server.inflight_bytes import RETRY_AFTER_SECONDS, SIDE_LIMIT, InflightBytes, shed
from extender.server.queues import FairLane

log = logging.getLogger("extender.http")

# path -> () -> (status, content type, body)
Route = Callable[[], tuple[int, str, bytes]]
# path -> (request body) -> (status, content type, body)
PostRoute = Callable[[bytes], tuple[int, str, bytes]]
# Routes a fixed table cannot name (path parameters, query strings): a `Request` ->
# Reply, or None when the path is not its own; its `takes_body(method, path)` says which
# requests may carry a body (the others are refused before their body is read). Each
# owner keeps its routes in its own module (`extender.server.explain_routes`).
Dispatch = Callable[[Request], Reply | None]

LOOP = lane.LOOP  # `place`: answered on the event loop
BURST = 16  # requests of one connection answered in a row before the others' turn
SWEEP_INTERVAL = 0.1  # seconds between deadline checks
FAIR_BATCH = 64  # events in one turn beyond which each client address gets at most ...
CLIENT_EVENTS = 8  # ... this many of them (`_fair`)
QUICK_ROUTES = frozenset({"/healthz", "/readyz", "/livez"})  # GET routes answered on the loop
LOOP_YIELD = 0.005  # seconds the side listener's loop waits at most per turn while the verbs' loop works


def _left(sock: socket.socket) -> bool:
    """Whether the client of a plain connection has closed or reset it (a peek, from any
    thread: nothing is read; the loop may not have seen it yet)."""
    if isinstance(sock, ssl.SSLSocket):
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class Routes:
    """Fixed routes: `get` (GET and HEAD, no argument) and `post` (the body) by path, and
    one `dispatch` offered every request the tables do not answer. `place`: the `quick`
    GET routes on the loop, the other `get` routes on a thread of lane `get_pool`
    (default `pool`), everything else on a thread of lane `pool`; a path nobody owns
    (when `dispatch` says which it owns) is answered 404 on the loop, and so is what
    `dispatch.early(request)` answers (a Reply: a refusal known without the pool's
    work, such as a user past its rate limit; None: the pool answers). Only `post`
    routes and what `dispatch.takes_body` names take a body: any other request that
    declares one is refused before its body is read (`refuse_body`)."""

    def __init__(self, get: dict[str, Route] | None = None, post: dict[str, PostRoute] | None = None,
                 dispatch: Dispatch | None = None, quick: frozenset[str] = QUICK_ROUTES,
                 pool: Hashable = lane.EXPENSIVE, get_pool: Hashable | None = None) -> None:
        self.get = dict(get or {})
        self.post = dict(post or {})
        self.dispatch = dispatch
        self.quick = quick
        self.pool = pool
        self.get_pool = pool if get_pool is None else get_pool

    def place(self, request: Request) -> Hashable:
        path, get = request.path, request.method in ("GET", "HEAD")
        if path in self.get and get:
            return LOOP if path in self.quick else self.get_pool
        if path in self.quick and get:
            return LOOP
        if path not in self.post and not self._dispatched(path):
            return LOOP  # 404 or 405: nothing to compute
        early = getattr(self.dispatch, "early", None)
        if early is not None and (reply := early(request)) is not None:
            request.reply = reply  # answered by `__call__`, on the loop
            return LOOP
        return self.pool

    def _dispatched(self, path: str) -> bool:
        """Whether `dispatch` may answer `path` (True when it does not say which it owns)."""
        owns = getattr(self.dispatch, "owns", None)
        return self.dispatch is not None and (owns is None or owns(path))

    def takes_body(self, request: Request) -> bool:
        if request.method == "POST" and request.path in self.post:
            return True
        takes = getattr(self.dispatch, "takes_body", None)
        return takes is not None and takes(request.method, request.path)

    def refuse_body(self, request: Request) -> Refused | None:
        """Why a request that declares a body is refused before it is read, or None when
        its route takes one (health and metrics take none: a body there could only be a way
        to hold the listener's bytes)."""
        if self.takes_body(request):
            return None
        owns = getattr(self.dispatch, "owns", None)
        if request.path in self.get or request.path in self.post or (owns is not None and owns(request.path)):
            if request.method in ("GET", "HEAD") and request.path not in self.post:
                return Refused(413, f"{request.path} takes no request body")
            return Refused(405, "method not allowed")
        return Refused(404, "not found")

    def __call__(self, request: Request) -> Reply:
        if request.reply is not None:
            return request.reply
        path, method = request.path, request.method
        get = method in ("GET", "HEAD")
        if get and path in self.get:
            return (*self.get[path](), {})
        if method == "POST" and path in self.post:
            return (*self.post[path](request.body), {})
        if self.dispatch is not None and (get or method == "POST"):
            reply = self.dispatch(request)
            if reply is not None:
                return reply
        return self._unrouted(path)

    def _unrouted(self, path: str) -> Reply:
        if path in self.get or path in self.post:  # a path that exists with another method
            return 405, JSON, error_body("method not allowed"), {}
        return 404, JSON, error_body("not found"), {}


# The side listener's lanes (a `Listener` built from route tables): `/metrics` on a
# thread of its own, `/explain` and `/drift` (reviews with the API server) on two others;
# each lane's queue bounded (waiting requests, and of one client address: `FairLane`)
SIDE_READS, SIDE_WORK = "reads", "work"
SIDE_QUEUES = {SIDE_READS: (32, 4), SIDE_WORK: (32, 4)}
BUSY = "too many requests waiting for this listener's threads; retry"


class Listener(Connections):
    """`app` (a `Routes`, or any callable Request -> Reply with `place`, `takes_body` and
    `refuse_body` methods) served on `address` (HOST:PORT, bound on construction, so
    errors surface there) or on the listening `sockets` given; `start` (a thread of its
    own) or `serve` (this thread), `stop`. `pools`: lane -> threads; a request placed in
    a lane without a pool is answered on the loop. `queues`: lane -> (waiting requests,
    of one client address) for the lanes whose queue is bounded and fair
    (`extender.server.queues.FairLane`): past a bound, 503 with `Retry-After` at once
    (the request was read whole: the connection may be kept); a waiting request whose
    client leaves, or that waited past `timeout`, is never started. Built from route tables (no `app`), it is the side
    listener: `/metrics` (`get` routes) on lane `SIDE_READS`, the rest on `SIDE_WORK`
    (`threads`), both bounded (`SIDE_QUEUES`). `budget`: this listener's in-flight
    bytes (default: a small one of its own, `SIDE_LIMIT`). `client_check`: called with
    a TLS connection once its handshake is done, returns why its client may not be
    served ("": it may; `extender.server.tls.ClientPolicy`). `foreground`: the verbs'
    listener, whose loop marks `FOREGROUND` while at work; the side listener's queued
    requests wait for it (`extender.request.foreground`)."""

    def __init__(self, address: str | None = None, routes: dict[str, Route] | None = None, *,
                 post_routes: dict[str, PostRoute] | None = None, dispatch: Dispatch | None = None,
                 app: Routes | None = None, sockets: list | None = None,
                 pools: dict[Hashable, int] | None = None, max_body_bytes: int = 1 << 20,
                 timeout: float = 5.0, idle_timeout: float = 60.0, max_connections: int = 1024,
                 max_per_client: int = 128, threads: int = 2, ssl_context: SSLContexts = None,
                 name: str = "metrics-listener", quick: frozenset[str] = QUICK_ROUTES,
                 budget: InflightBytes | None = None, min_send_rate: float = MIN_SEND_RATE,
                 client_check: Callable[[ssl.SSLSocket], str] | None = None,
                 queues: dict[Hashable, tuple[int, int]] | None = None, foreground: bool = False) -> None:
        side = app is None
        self.foreground = foreground  # the verbs' loop: marks FOREGROUND while at work
        self.background = side and not foreground  # admin work: it yields to FOREGROUND
        self.app = app if app is not None else Routes(routes, post_routes, dispatch, quick, pool=SIDE_WORK,
                                                      get_pool=SIDE_READS)
        super().__init__(address, sockets, budget=budget if budget is not None else InflightBytes(SIDE_LIMIT, name=name),
                         max_body_bytes=max_body_bytes, timeout=timeout, idle_timeout=idle_timeout,
                         max_connections=max_connections, max_per_client=max_per_client,
                         ssl_context=ssl_context, name=name, min_send_rate=min_send_rate,
                         client_check=client_check)
        if pools is None:
            pools = {SIDE_READS: 1, SIDE_WORK: threads} if side else {lane.EXPENSIVE: threads}
        self.pool_sizes = dict(pools)
        self.queue_bounds = dict(queues) if queues is not None else dict(SIDE_QUEUES) if side else {}
        self.done: deque[tuple[Conn, Reply | None, Request]] = deque()  # answers from pool threads
        self.thread: threading.Thread | None = None
        self.pools: dict[Hashable, futures.ThreadPoolExecutor | FairLane] = {}
        self.busy_logged, self.busy_shed = -1.0, 0  # when the last shed was logged, how many since
        self.loop_thread = 0  # the event loop's thread (`serve`)

    def start(self) -> Listener:
        self._open()
        self.thread = threading.Thread(target=self.serve, name=self.name, daemon=True)
        self.thread.start()
        return self

    def _open(self) -> None:
        if self.selector is not None:
            return
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.selector.register(self.wake_r, READ, self._drain_done)
        self._resume_accepting()
        self.pools = {where: self._pool(where, size) for where, size in self.pool_sizes.items()}

    def _pool(self, where: Hashable, size: int) -> futures.ThreadPoolExecutor | FairLane:
        if where in self.queue_bounds:
            limit, per_client = self.queue_bounds[where]
            return FairLane(f"{self.name}-{where}", size, limit, per_client, self._start_waiting)
        return futures.ThreadPoolExecutor(size, thread_name_prefix=f"{self.name}-{where}")

    def stop(self) -> None:
        self.stopping = True
        if self.thread is not None:
            self._wake()
            self.thread.join(timeout=5)
        for pool in self.pools.values():
            if isinstance(pool, FairLane):
                pool.shutdown()
            else:
                pool.shutdown(wait=False, cancel_futures=True)
        self.close()

    def close(self) -> None:
        """Close the port and every connection (also without `start`)."""
        for conn in list(self.conns.values()):
            self._close(conn)
        for sock in self.socks:
            sock.close()
        if self.selector is not None:
            self.selector.close()
            self.wake_r.close()
            self.wake_w.close()
            self.selector = None

    # --- the loop ---------------------------------------------------------------------------

    def serve(self, tick: Callable[[], bool] | None = None) -> None:
        """Run the loop in this thread until `stop`, or until `tick` (called at every
        sweep) returns False."""
        self._open()
        self.loop_thread = threading.get_ident()
        swept = time.monotonic()
        while not self.stopping:
            try:
                events = self.selector.select(0 if self.ready else SWEEP_INTERVAL)
                self._turn(events)
                now = time.monotonic()
                if now - swept >= SWEEP_INTERVAL:
                    swept = now
                    self._sweep(now)
                    if tick is not None and not tick():
                        return
            except Exception:  # the loop must never die: log, and go on
                log.exception("listener loop error", extra={"listener": self.name})

    def _turn(self, events: list) -> None:
        """One turn of the loop: `events`, then the connections waiting their turn. The
        verbs' loop is marked at work meanwhile; the side listener's waits before each
        event while it is, `LOOP_YIELD` at most in all (`extender.request.foreground`)."""
        working = self.foreground and bool(events or self.ready)
        if working:
            FOREGROUND.enter()
        yield_until = 0.0  # the side loop waits LOOP_YIELD at most a turn: it answers the probes
        try:
            for key, mask in (self._fair(events) if len(events) > FAIR_BATCH else events):
                if self.background and FOREGROUND.working:
                    now = time.monotonic()
                    yield_until = yield_until or now + LOOP_YIELD
                    if now < yield_until:
                        FOREGROUND.yield_to(yield_until - now)
                key.data(mask)
            self._serve_ready()
        finally:
            if working:
                FOREGROUND.leave()

    def _fair(self, events: list) -> list:
        """The events of this turn, at most `CLIENT_EVENTS` of each client address (the
        others stay ready: the selector reports them again next turn). A client with a
        thousand busy connections then takes a few events a turn, and a probe's one
        connection waits for a turn of a few dozen events, not of every connection."""
        taken, count = [], Counter()
        for key, mask in events:
            data = key.data
            conn = data.args[0] if isinstance(data, partial) and data.args and isinstance(data.args[0], Conn) else None
            if conn is not None:
                count[conn.client] += 1
                if count[conn.client] > CLIENT_EVENTS:
                    continue
            taken.append((key, mask))
        return taken

    def _serve_ready(self) -> None:
        """Go on with the connections whose buffered requests waited their turn (`BURST`)."""
        for _ in range(len(self.ready)):
            conn = self.ready.popleft()
            if id(conn) in self.conns and conn.state == READING:
                self._serve_buffered(conn)

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass  # already awake (the socket buffer is full) or closing

    # --- requests ---------------------------------------------------------------------------

    def _serve_buffered(self, conn: Conn) -> bool:
        """Answer the requests that have fully arrived on `conn`, up to `BURST` of them
        (then it waits for its next turn in `ready`); True if the connection no longer
        reads for now (answering, writing, closing or waiting its turn)."""
        for _ in range(BURST):
            try:
                request = self._next_request(conn)
            except Refused as exc:
                self._refuse(conn, exc.status, str(exc), tuple(exc.headers.items()))
                return True
            except OSError:
                self._close(conn)
                return True
            if request is None:
                return False
            where = self.app.place(request)
            if where != LOOP:
                self._hand_on(conn, request, where)
                return True
            try:
                reply = self._call(request, LOOP)
            except lane.NeedsCostlierLane as moved:  # needs a costlier lane: nothing sent yet
                self._hand_on(conn, request, moved.lane)
                return True
            if not self._send(conn, encode(request, reply)):
                return True
            if not conn.inbuf:
                return False
        self.ready.append(conn)
        return True

    def _next_request(self, conn: Conn) -> Request | None:
        """The request at the head of the buffer, taken out of it, once it has fully
        arrived (None until then); Refused if it cannot be answered."""
        request = conn.request
        if request is None:
            end = head_end(conn.inbuf)
            if end < 0:
                return None
            request = conn.request = self._head(conn, bytes(conn.inbuf[:end]))
        end = request.end(conn.inbuf, self.max_body)
        if end < 0:
            if request.expect:  # `Expect: 100-continue`: ask for the body
                request.expect = False
                conn.sock.send(CONTINUE)
            return None
        request.take_body(conn.inbuf, end)
        if end == len(conn.inbuf):
            conn.inbuf = bytearray()  # its buffer goes now, not at the next request
        else:
            del conn.inbuf[:end]
        conn.request = None
        conn.started = 0.0
        if conn.inbuf:  # a pipelined request: it arrived now, at the latest
            conn.since = conn.started = time.monotonic()
        return request

    def _head(self, conn: Conn, head: bytes) -> Request:
        """The request whose head has arrived on `conn`; Refused if it may not be read on
        (its client's certificate is not allowed, or its route takes no body)."""
        request = Request.parse(head, self.max_body)
        request.arrived, request.client = conn.since, conn.client
        if conn.forbidden:
            raise Refused(403, f"client certificate not allowed: {conn.forbidden}")
        if request.has_body and (refusal := self.app.refuse_body(request)) is not None:
            raise refusal
        return request

    def _call(self, request: Request, where: Hashable) -> Reply:
        """The app's reply, in lane `where` (lane.NeedsCostlierLane: it needs a costlier one; a
        lane that is not a CEL lane, such as the bind pool's, limits no CEL work). What
        its body becomes when parsed is charged to this listener's budget while it runs
        (`extender.api.expansion`); its work stops once its client has gone
        (`deadline.arrived`)."""
        cel_lane = where if where in (lane.LOOP, lane.POOL) else lane.EXPENSIVE
        try:
            with lane.running_in(cel_lane), deadline.arrived(request.arrived, request), \
                    expansion.charged_to(partial(self._parse_charge, request)):
                return self.app(request)
        except expansion.Unaffordable as exc:
            if exc.status == 503:
                shed(self.name)
            extra = {"Retry-After": str(RETRY_AFTER_SECONDS)} if exc.status == 503 else {}
            return exc.status, JSON, error_body(str(exc)), {**extra, "Connection": "close"}
        except Exception:
            log.exception("route failed", extra={"listener": self.name, "path": request.path})
            return 500, JSON, error_body("internal error"), {"Connection": "close"}
        finally:
            self.budget.release(request.parse_charge)
            request.parse_charge = 0

    def _parse_charge(self, request: Request, size: int) -> None:
        """Charge `size` more bytes for what `request`'s body becomes (any thread)."""
        total = request.head_size + request.body_size + request.parse_charge + size
        if not self.budget.fits_ever(total):
            raise expansion.Unaffordable(413, f"the request body would take {total} bytes once parsed, "
                                         f"more than this listener's in-flight budget holds")
        if not self.budget.acquire(size, total):
            raise expansion.Unaffordable(503, "too many request bytes in flight; retry")
        request.parse_charge += size

    def _hand_on(self, conn: Conn, request: Request, where: Hashable) -> None:
        """Answer on a thread of lane `where`; meanwhile the connection is watched for
        its client leaving (`_watch_answering`)."""
        conn.state = ANSWERING
        conn.answering = request
        self._want(conn, READ)
        self._submit(conn, request, where)

    def _submit(self, conn: Conn, request: Request, where: Hashable) -> None:
        """Queue `request` for lane `where` (any thread). A bounded lane that has no
        room answers it 503 (so does one whose place it takes: `FairLane.offer`)."""
        pool = self.pools.get(where)
        if pool is None:  # no such lane here: a bug in `place`, answered as one
            self._hand_back(conn, (500, JSON, error_body("internal error"), {}), request)
            return
        try:
            if isinstance(pool, FairLane):
                taken, evicted = pool.offer(conn.client, (conn, request, where))
                if evicted is not None:
                    self._busy(*evicted)
                if not taken:
                    self._busy(conn, request, where)
            else:
                pool.submit(self._answer, conn, request, where)
        except RuntimeError:  # shutting down
            self._hand_back(conn, None, request)

    def _busy(self, conn: Conn, request: Request, where: Hashable) -> None:
        """503 with Retry-After: `request` found no room in lane `where` (or lost its
        place). Written at once on the loop's own thread, else handed back to it."""
        shed(self.name)
        now = time.monotonic()
        self.busy_shed += 1
        if now - self.busy_logged >= 1.0:  # a flood is logged once a second, not per request
            log.warning("requests shed: too many requests waiting", extra={
                "listener": self.name, "client": conn.client, "lane": str(where), "shed": self.busy_shed})
            self.busy_logged, self.busy_shed = now, 0
        # the request was read whole: its connection may be kept (a client asking again on
        # it costs no accept and no close, and an idle connection is the first evicted)
        reply = 503, JSON, error_body(BUSY), {"Retry-After": str(RETRY_AFTER_SECONDS)}
        if threading.get_ident() != self.loop_thread:
            self._hand_back(conn, reply, request)
            return
        conn.answering = None
        if self._send(conn, encode(request, reply)) and conn.inbuf:
            self.ready.append(conn)

    def _hand_back(self, conn: Conn, reply: Reply | None, request: Request) -> None:
        """Give the loop `reply` to write on `conn` (None: close it unanswered)."""
        self.done.append((conn, reply, request))
        self._wake()

    def _withdraw(self, conn: Conn) -> bool:
        request = conn.answering
        return any(pool.remove(conn.client, (conn, request, where)) for where, pool in self.pools.items()
                   if isinstance(pool, FairLane))

    def _start_waiting(self, item: tuple[Conn, Request, Hashable]) -> None:
        """On a thread of a bounded lane: a request that waited its turn, answered unless
        its client has gone (closed unanswered) or it waited past the listener's
        `timeout` (503: its client has given up, or is about to). Its socket is peeked
        at too: a client that left while the loop was busy is not waited for."""
        conn, request, where = item
        if self.background:
            FOREGROUND.yield_to()  # kube-scheduler's calls first
        if request.gone or _left(conn.sock):
            request.gone = True
            self._hand_back(conn, None, request)
        elif time.monotonic() - request.arrived > self.timeout:
            self._busy(conn, request, where)
        else:
            self._answer(conn, request, where)

    def _answer(self, conn: Conn, request: Request, where: Hashable) -> None:
        """On a pool thread: the app's reply, handed back to the loop; a request that
        needs a costlier lane moves on, unanswered. On an unbounded lane one whose
        client has gone still starts (a half-closed client may be reading: what is cheap
        is answered), and its costly work stops at the first deadline check
        (`deadline.ClientGone`)."""
        if self.foreground:
            FOREGROUND.enter()
        try:
            reply = self._call(request, where)
        except lane.NeedsCostlierLane as moved:
            self._submit(conn, request, moved.lane)
            return
        finally:
            if self.foreground:
                FOREGROUND.leave()
        self._hand_back(conn, reply, request)

    def _drain_done(self, _mask: int) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self.done:
            conn, reply, request = self.done.popleft()
            if id(conn) not in self.conns:
                continue  # closed meanwhile (the listener is stopping)
            conn.answering = None
            if reply is None:  # its client has gone: nobody to answer
                self._close(conn)
                continue
            if request.gone:  # answered if the client still reads (a half-close), then closed
                conn.close_after = True
            if self._send(conn, encode(request, reply)) and conn.inbuf:
                self._serve_buffered(conn)
