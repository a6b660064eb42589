"""A small HTTP/1.1 server for a few fixed routes: one event-loop thread moves the bytes,
a few pool threads compute the answers.

Two users: `--metrics-listen` (`/healthz`, `/readyz`, `/metrics`, GET, and `/explain`
through `dispatch` when `--explain-endpoint` is on) and the admission webhook
(`--webhook-listen`, `POST /validate` over HTTPS, its certificate re-read when it
rotates). Routes are plain callables in two tables, `routes` (GET and HEAD: no
argument) and `post_routes` (the body); routes a fixed table cannot name (path
parameters, query strings) go through one `dispatch` callable, offered every request
the tables do not answer.

Why a loop (issue #28): with a thread per connection, 70 idle connections or 80 that
never finish a TLS handshake took every slot, and clients sending one byte every 4 s
(each read had its own timeout) held them for ever; probes and reviews were refused.
Here a connection costs a file descriptor and its buffered bytes, never a thread:

* **One deadline per request.** The TLS handshake (new connection), the head and the
  body must all arrive within `timeout` seconds of the accept, or of the request's
  first byte on a kept-alive connection; writing the answer gets `timeout` seconds
  too. A kept-alive connection may then wait `idle_timeout` for its next request.
* **Accepts are never refused.** At most `max_connections` are open, and at most
  `max_per_client` per client address; a new connection beyond either replaces the
  oldest connection not being answered (an idle one first; the client's own when it
  is over its share, else one of the client holding most). Only when every connection
  is being answered does accepting pause: the kernel queues new ones meanwhile.
* **Bodies are bounded.** A POST needs a `Content-Length` of at most `max_body_bytes`
  (411 / 413 before its body is read). Every byte a connection holds counts against
  the process's in-flight budget (`extender.server.budget`, shared with the verbs):
  over it the request is answered 503 with `Retry-After`.
* **The loop barely computes.** Routes run on `threads` pool threads, so a slow
  `/metrics`, review or explanation never delays an accept, a handshake or another
  probe's bytes; only the `quick` GET routes (`/healthz`, `/readyz`: microseconds of
  Python) are answered on the loop itself, because every hand-off between threads
  waits for the GIL, which a worker busy with large requests holds in long C calls
  (orjson on a 20 MB body: ~0.1 s).

With SO_REUSEPORT every gunicorn worker binds the same address, so any live worker
answers. An `ssl.SSLContext` (or a callable returning the current one, for certificate
rotation) turns it into HTTPS; the handshake runs on the loop, without blocking.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent import futures
from functools import partial
from http import HTTPStatus

from extender.server.budget import BODIES, RETRY_AFTER_SECONDS, shed

log = logging.getLogger("extender.http")

# path -> () -> (status, content type, body)
Route = Callable[[], tuple[int, str, bytes]]
# path -> (request body) -> (status, content type, body)
PostRoute = Callable[[bytes], tuple[int, str, bytes]]
SSLContexts = ssl.SSLContext | Callable[[], ssl.SSLContext] | None
JSON = "application/json"
# (status, content type, body, extra headers)
Reply = tuple[int, str, bytes, dict[str, str]]
# Routes a fixed table cannot name (path parameters, query strings): (method, request
# target as sent, body or None for GET) -> Reply, or None when the path is not its own.
# Each owner keeps its routes in its own module (`extender.server.explain_routes`).
Dispatch = Callable[[str, str, bytes | None], Reply | None]

MAX_HEAD_BYTES = 32 << 10  # no end of head by then: 431
READ_CHUNK = 256 << 10
LINGER = 1.0  # seconds an error answer waits for the client to stop sending before the close
SWEEP_INTERVAL = 0.1  # seconds between deadline checks
QUICK_ROUTES = frozenset({"/healthz", "/readyz", "/livez"})  # GET routes answered on the loop
# connection states
HANDSHAKE, READING, ANSWERING, WRITING, IDLE, CLOSING = range(6)
READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class Refused(Exception):
    """A request answered with an error, without a route, and the connection closed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Head:
    """A parsed request head."""

    __slots__ = ("method", "target", "path", "keep_alive", "size", "body_size", "continue_sent")

    def __init__(self, data: bytes, max_body: int) -> None:
        lines = data.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
            raise Refused(400, "malformed request line")
        method, target, version = parts
        self.method = method.decode("latin-1")
        self.target = target.decode("latin-1")
        self.path = self.target.partition("?")[0]
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise Refused(400, "malformed header line")
            name, value = name.lower(), value.strip()
            if name in headers and name in (b"content-length", b"transfer-encoding", b"host"):
                raise Refused(400, f"repeated {name.decode('latin-1')} header")
            headers[name] = value
        if b"transfer-encoding" in headers:
            raise Refused(411, "a Content-Length header is required (no chunked bodies)")
        length = headers.get(b"content-length")
        if length is None:
            if self.method == "POST":
                raise Refused(411, "a Content-Length header is required")
            length = b"0"
        if not length.isdigit():
            raise Refused(400, "malformed Content-Length")
        self.body_size = int(length)
        if self.body_size > max_body:
            raise Refused(413, f"request body exceeds the limit of {max_body} bytes")
        connection = headers.get(b"connection", b"").lower()
        self.keep_alive = (b"close" not in connection if version == b"HTTP/1.1"
                           else b"keep-alive" in connection)
        self.size = len(data) + 4 + self.body_size
        self.continue_sent = headers.get(b"expect", b"").lower() != b"100-continue"


class Conn:
    __slots__ = ("sock", "client", "state", "inbuf", "out", "deadline", "since", "charged",
                 "head", "close_after", "events")

    def __init__(self, sock: socket.socket, client: str, state: int, deadline: float) -> None:
        self.sock = sock
        self.client = client
        self.state = state
        self.inbuf = bytearray()
        self.out = memoryview(b"")
        self.deadline = deadline
        self.since = time.monotonic()  # when it last became idle or started a request
        self.charged = 0  # bytes held against the in-flight budget
        self.head: Head | None = None
        self.close_after = False
        self.events = 0


def response(code: int, kind: str, body: bytes, keep_alive: bool, head_only: bool = False,
             extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    lines = [f"HTTP/1.1 {code} {HTTPStatus(code).phrase}", "Server: extender",
             f"Content-Type: {kind}", f"Content-Length: {len(body)}",
             f"Connection: {'keep-alive' if keep_alive else 'close'}"]
    lines += [f"{name}: {value}" for name, value in extra]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


def _error_body(message: str) -> bytes:
    import orjson

    return orjson.dumps({"error": message})


class Listener:
    """`routes` (GET, HEAD) and `post_routes` (POST) served on `address` (HOST:PORT);
    `start`, `stop` (the port is bound on construction: errors surface there)."""

    def __init__(self, address: str, routes: dict[str, Route], *,
                 post_routes: dict[str, PostRoute] | None = None, max_body_bytes: int = 1 << 20,
                 timeout: float = 5.0, idle_timeout: float = 60.0, max_connections: int = 1024,
                 max_per_client: int = 128, threads: int = 2, ssl_context: SSLContexts = None,
                 name: str = "metrics-listener", quick: frozenset[str] = QUICK_ROUTES,
                 dispatch: Dispatch | None = None) -> None:
        self.routes = dict(routes)
        self.post_routes = dict(post_routes or {})
        self.max_body = max_body_bytes
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_per_client = max(1, min(max_per_client, max_connections))
        self.threads = threads
        self.quick = quick
        self.dispatch = dispatch
        self.ssl_context = ssl_context
        self.name = name
        self.sock = self._bind(split_address(address))
        self.conns: dict[int, Conn] = {}  # by id
        self.per_client: Counter[str] = Counter()
        self.done: deque[tuple[Conn, bytes, bool]] = deque()  # answers computed by pool threads
        self.accepting = False
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.pool: futures.ThreadPoolExecutor | None = None
        self.selector: selectors.BaseSelector | None = None

    @staticmethod
    def _bind(address: tuple[str, int]) -> socket.socket:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):  # every gunicorn worker binds the same port
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.listen(1024)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def start(self) -> Listener:
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.selector.register(self.wake_r, READ, self._drain_done)
        self._resume_accepting()
        self.pool = futures.ThreadPoolExecutor(self.threads, thread_name_prefix=f"{self.name}-route")
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        if self.thread is not None:
            self._wake()
            self.thread.join(timeout=5)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        self.close()

    def close(self) -> None:
        """Close the port and every connection (also without `start`)."""
        for conn in list(self.conns.values()):
            self._close(conn)
        self.sock.close()
        if self.selector is not None:
            self.selector.close()
            self.wake_r.close()
            self.wake_w.close()
            self.selector = None

    # --- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        swept = time.monotonic()
        while not self.stopping:
            try:
                for key, mask in self.selector.select(SWEEP_INTERVAL):
                    key.data(mask)
                now = time.monotonic()
                if now - swept >= SWEEP_INTERVAL:
                    swept = now
                    self._sweep(now)
            except Exception:  # the loop must never die: log, and go on
                log.exception("listener loop error", extra={"listener": self.name})

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass  # already awake (the socket buffer is full) or closing

    def _want(self, conn: Conn, events: int) -> None:
        if events == conn.events:
            return
        if conn.events and events:
            self.selector.modify(conn.sock, events, partial(self._on_event, conn))
        elif events:
            self.selector.register(conn.sock, events, partial(self._on_event, conn))
        else:
            self.selector.unregister(conn.sock)
        conn.events = events

    def _sweep(self, now: float) -> None:
        """Close every connection past its deadline (a request or an answer that did not
        get through in time, an idle one past the idle timeout, a lingering close)."""
        for conn in [c for c in self.conns.values() if c.state != ANSWERING and c.deadline <= now]:
            self._close(conn)

    # --- accepting --------------------------------------------------------------------------

    def _resume_accepting(self) -> None:
        if not self.accepting and not self.stopping:
            self.selector.register(self.sock, READ, self._accept)
            self.accepting = True

    def _pause_accepting(self) -> None:
        if self.accepting:
            self.selector.unregister(self.sock)
            self.accepting = False

    def _accept(self, _mask: int) -> None:
        for _ in range(64):  # then the others' turn
            try:
                sock, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("listener cannot accept: out of file descriptors",
                                extra={"listener": self.name})
                    self._make_room(None) or self._pause_accepting()
                    return
                if exc.errno == errno.ECONNABORTED:
                    continue
                raise
            client = str(address[0])
            if not self._make_room(client):
                sock.close()  # every connection of the client is being answered
                continue
            self._admit(sock, client)
            if len(self.conns) >= self.max_connections and not self._evictable():
                self._pause_accepting()
                return

    def _evictable(self, client: str | None = None) -> list[Conn]:
        return [c for c in self.conns.values() if c.state != ANSWERING and (client is None or c.client == client)]

    def _make_room(self, client: str | None) -> bool:
        """Make room for one more connection (from `client`): close the oldest one not
        being answered, idle first; False if there is none to close."""
        if client is not None and self.per_client[client] >= self.max_per_client:
            candidates = self._evictable(client)
        elif len(self.conns) >= self.max_connections or client is None:
            candidates = [c for c in self._evictable() if c.state == IDLE]
            if not candidates:
                heaviest = max(self.per_client, key=self.per_client.__getitem__, default=None)
                candidates = self._evictable(heaviest)
        else:
            return True
        if not candidates:
            return False
        self._close(min(candidates, key=lambda c: (c.state != IDLE, c.since)))
        return True

    def _admit(self, sock: socket.socket, client: str) -> None:
        sock.setblocking(False)
        try:  # a TLS handshake is several small writes: no Nagle wait between them
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP (a test's socketpair)
        deadline = time.monotonic() + self.timeout  # handshake, head and body: one deadline
        state = READING
        if self.ssl_context is not None:
            try:
                context = self.ssl_context() if callable(self.ssl_context) else self.ssl_context
                sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ssl.SSLError):
                log.exception("TLS set-up failed", extra={"listener": self.name})
                sock.close()
                return
            state = HANDSHAKE
        conn = Conn(sock, client, state, deadline)
        self.conns[id(conn)] = conn
        self.per_client[client] += 1
        self._want(conn, READ)

    # --- one connection -----------------------------------------------------------------------

    def _on_event(self, conn: Conn, _mask: int) -> None:
        try:
            if conn.state == HANDSHAKE:
                self._handshake(conn)
            elif conn.state in (READING, IDLE):
                self._read(conn)
            elif conn.state == WRITING:
                self._write(conn)
            elif conn.state == CLOSING:
                self._linger(conn)
        except Exception:  # a connection must never take the loop down
            log.exception("listener connection error", extra={"listener": self.name})
            self._close(conn)

    def _handshake(self, conn: Conn) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want(conn, READ)
            return
        except ssl.SSLWantWriteError:
            self._want(conn, WRITE)
            return
        except (ssl.SSLError, OSError):  # not TLS, a refused client certificate, a reset
            self._close(conn)
            return
        conn.state = READING
        self._want(conn, READ)
        self._read(conn)  # bytes may already be decrypted and waiting

    def _read(self, conn: Conn) -> None:
        while True:
            try:
                chunk = conn.sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                self._want(conn, READ)
                return
            except ssl.SSLWantWriteError:
                self._want(conn, WRITE)
                return
            except OSError:  # ssl.SSLError included
                self._close(conn)
                return
            if not chunk:
                self._close(conn)  # half a request is never answered
                return
            if conn.state == IDLE:  # a new request on a kept-alive connection
                conn.state = READING
                conn.deadline = time.monotonic() + self.timeout
                conn.since = time.monotonic()
            conn.inbuf += chunk
            if not BODIES.charge(conn, len(conn.inbuf)):
                self._shed(conn)
                return
            if self._complete(conn):
                return

    def _complete(self, conn: Conn) -> bool:
        """Dispatch the request at the head of the buffer if it has fully arrived (or
        refuse it); True if the connection no longer reads."""
        try:
            if conn.head is None:
                end = conn.inbuf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
                if end < 0:
                    if len(conn.inbuf) >= MAX_HEAD_BYTES:
                        raise Refused(431, "request head too large")
                    return False
                conn.head = Head(bytes(conn.inbuf[:end]), self.max_body)
            head = conn.head
            if len(conn.inbuf) < head.size:
                if not head.continue_sent:  # `Expect: 100-continue`: ask for the body
                    head.continue_sent = True
                    conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                return False
        except Refused as exc:
            self._refuse(conn, exc.code, str(exc))
            return True
        except OSError:
            self._close(conn)
            return True
        body = bytes(conn.inbuf[head.size - head.body_size:head.size])
        del conn.inbuf[:head.size]
        conn.head = None
        conn.state = ANSWERING
        self._want(conn, 0)  # off the poller until answered (pipelined bytes wait)
        if head.path in self.quick and head.method in ("GET", "HEAD"):
            self._answer(conn, head, body)
            self._drain_done(0)
        else:
            self.pool.submit(self._answer, conn, head, body)
        return True

    def _answer(self, conn: Conn, head: Head, body: bytes) -> None:
        """On a pool thread: the route's answer, handed back to the loop."""
        try:
            code, kind, payload, headers = self._route(head, body)
            keep = head.keep_alive
        except Exception:
            log.exception("listener route failed", extra={"listener": self.name, "path": head.path})
            code, kind, payload, headers, keep = 500, JSON, _error_body("internal error"), {}, False
        data = response(code, kind, payload, keep, head_only=head.method == "HEAD", extra=tuple(headers.items()))
        self.done.append((conn, data, keep))
        self._wake()

    def _route(self, head: Head, body: bytes) -> Reply:
        get = head.method in ("GET", "HEAD")
        if get and head.path in self.routes:
            return (*self.routes[head.path](), {})
        if head.method == "POST" and head.path in self.post_routes:
            return (*self.post_routes[head.path](body), {})
        if self.dispatch is not None and (get or head.method == "POST"):
            reply = self.dispatch("GET" if get else "POST", head.target, None if get else body)
            if reply is not None:
                return reply
        known = head.path in self.routes or head.path in self.post_routes
        if known:  # 405 for a path that exists with another method, as the main listener answers
            return 405, JSON, _error_body("method not allowed"), {}
        return 404, JSON, _error_body("not found"), {}

    def _drain_done(self, _mask: int) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self.done:
            conn, data, keep = self.done.popleft()
            if id(conn) not in self.conns:
                continue  # closed meanwhile (the listener is stopping)
            self._send(conn, data, close=not keep)

    # --- answering ----------------------------------------------------------------------------

    def _send(self, conn: Conn, data: bytes, close: bool) -> None:
        conn.state = WRITING
        conn.out = memoryview(data)
        conn.close_after = close
        conn.deadline = time.monotonic() + self.timeout
        self._write(conn)

    def _write(self, conn: Conn) -> None:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                self._want(conn, WRITE)
                return
            except ssl.SSLWantReadError:
                self._want(conn, READ)
                return
            except OSError:
                self._close(conn)
                return
            conn.out = conn.out[sent:]
        if conn.close_after:
            self._start_linger(conn)
            return
        now = time.monotonic()
        conn.state, conn.since, conn.deadline = IDLE, now, now + self.idle_timeout
        BODIES.charge(conn, len(conn.inbuf))
        self._want(conn, READ)
        if conn.inbuf:  # a pipelined request
            conn.state, conn.deadline = READING, now + self.timeout
            self._complete(conn)

    def _refuse(self, conn: Conn, code: int, message: str,
                extra: tuple[tuple[str, str], ...] = ()) -> None:
        """An error answer, then the connection closes (its body is never read)."""
        self._want(conn, 0)
        BODIES.charge(conn, 0)
        conn.inbuf = bytearray()
        self._send(conn, response(code, JSON, _error_body(message), False, extra=extra), close=True)

    def _shed(self, conn: Conn) -> None:
        shed(self.name)
        log.warning("request shed: in-flight request bytes at the limit",
                    extra={"listener": self.name, "client": conn.client, "limit": BODIES.limit})
        self._refuse(conn, 503, "too many request bytes in flight; retry",
                     extra=(("Retry-After", str(RETRY_AFTER_SECONDS)),))

    def _start_linger(self, conn: Conn) -> None:
        """After an error answer: stop writing and drop what the client still sends for
        a moment, so that the close does not reset the answer away before it is read."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.state, conn.deadline = CLOSING, time.monotonic() + LINGER
        self._want(conn, READ)

    def _linger(self, conn: Conn) -> None:
        try:
            while conn.sock.recv(READ_CHUNK):
                pass
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            return
        except OSError:
            pass
        self._close(conn)

    def _close(self, conn: Conn) -> None:
        if self.conns.pop(id(conn), None) is None:
            return
        self.per_client[conn.client] -= 1
        if not self.per_client[conn.client]:
            del self.per_client[conn.client]
        if conn.events and self.selector is not None:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.events = 0
        BODIES.charge(conn, 0)
        try:
            conn.sock.close()
        except OSError:
            pass
        if self.selector is not None:
            self._resume_accepting()
