"""One listener's connections, byte by byte: accepting them within limits, the TLS
handshake, reading what arrives into a buffer charged to the in-flight budget, writing
answers, closing. What the bytes mean is the listener's (`extender.server.listener`,
a subclass): `_serve_buffered` is offered a connection's buffer after every read.

A connection costs a file descriptor and its buffered bytes, never a thread (with a
thread per connection, a few dozen idle connections or unfinished TLS handshakes take
every thread, and clients sending one byte every few seconds hold them for ever):

* **One deadline per request.** The TLS handshake (new connection), the head and the
  body must all arrive within `timeout` seconds of the accept, or of the request's
  first byte on a kept-alive connection; writing the answer gets `timeout` seconds
  too. A kept-alive connection may then wait `idle_timeout` for its next request. A
  request still arriving `SEND_RATE_GRACE` seconds after its first byte must have come
  at `min_send_rate` bytes a second since (on average): stalled and trickled bodies end
  early, not at the deadline. Real clients send a whole request at once
  (kube-scheduler over loopback, the API server, the kubelet's one-segment probes).
* **Accepts are never refused.** At most `max_connections` are open, and at most
  `max_per_client` per client address; a new connection beyond either replaces the
  oldest connection not being answered (an idle one first; the client's own when it
  is over its share, else one of the client holding most). Only when every connection
  is being answered does accepting pause: the kernel queues new ones meanwhile.
* **Bytes are budgeted.** Every byte a connection holds counts against the listener's
  in-flight budget (`extender.server.inflight_bytes`): over it, room is made first, then the
  request is answered 503 with `Retry-After` (`_charge`).
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import time
from collections import Counter, deque
from collections.abc import Callable
from functools import partial

from extender.server.http1 import JSON, Request, declared_size, error_body, response
from extender.server.inflight_bytes import RETRY_AFTER_SECONDS, InflightBytes, shed

log = logging.getLogger("extender.http")

SSLContexts = ssl.SSLContext | Callable[[], ssl.SSLContext] | None
READ_CHUNK = 256 << 10
LINGER = 1.0  # seconds an error answer waits for the client to stop sending before the close
MIN_SEND_RATE = 1 << 20  # bytes a second, on average, of a request still arriving after the grace
SEND_RATE_GRACE = 1.0
ACCEPT_BURST = 256  # connections accepted in a row (a probe waits behind those the kernel queued first)
# connection states
HANDSHAKE, READING, ANSWERING, WRITING, IDLE, CLOSING = range(6)
READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def bind_socket(address: str) -> socket.socket:
    """A listening socket on HOST:PORT (SO_REUSEPORT: every gunicorn worker binds it)."""
    host, port = split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


class Conn:
    __slots__ = ("sock", "client", "state", "inbuf", "out", "deadline", "since", "charged",
                 "request", "close_after", "events", "started", "answering", "forbidden")

    def __init__(self, sock: socket.socket, client: str, state: int, deadline: float) -> None:
        self.sock = sock
        self.client = client
        self.state = state
        self.inbuf = bytearray()
        self.out = memoryview(b"")
        self.deadline = deadline
        self.since = time.monotonic()  # when it last became idle or started a request
        self.charged = 0  # bytes held against the in-flight budget
        self.request: Request | None = None  # the head read so far of the next request
        self.close_after = False
        self.events = 0
        self.started = 0.0  # when the first byte of the request arriving now came (0: none)
        self.answering: Request | None = None  # the request a thread is answering
        self.forbidden = ""  # why its client certificate may not be served (every request: 403)


class Connections:
    """The connections of the listening `sockets` (or of one bound on `address`),
    watched by `selector` once the subclass opens one. `client_check`: called with a TLS
    connection once its handshake is done, returns why its client may not be served
    ("": it may; `extender.server.tls.ClientPolicy`)."""

    def __init__(self, address: str | None, sockets: list | None, *, budget: InflightBytes,
                 max_body_bytes: int, timeout: float, idle_timeout: float, max_connections: int,
                 max_per_client: int, ssl_context: SSLContexts, name: str, min_send_rate: float,
                 client_check: Callable[[ssl.SSLSocket], str] | None) -> None:
        self.budget = budget
        self.min_send_rate = min_send_rate
        self.client_check = client_check
        self.max_body = max_body_bytes
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.max_per_client = max(1, min(max_per_client, max_connections))
        self.ssl_context = ssl_context
        self.name = name
        self.socks = list(sockets) if sockets is not None else [bind_socket(address)]
        for sock in self.socks:
            sock.setblocking(False)
        self.conns: dict[int, Conn] = {}  # by id
        self.per_client: Counter[str] = Counter()
        self.by_client: dict[str, dict[int, Conn]] = {}  # each client's connections, oldest first
        self.ready: deque[Conn] = deque()  # connections with buffered requests to answer
        self.accepting = False
        self.draining = False  # no more accepts (a worker shutting down)
        self.stopping = False
        self.selector: selectors.BaseSelector | None = None

    @property
    def port(self) -> int:
        return self.socks[0].getsockname()[1]

    def busy(self) -> bool:
        """Whether a request is being answered or its answer written."""
        return any(c.state in (ANSWERING, WRITING) for c in self.conns.values())

    def _serve_buffered(self, conn: Conn) -> bool:
        """Answer what has arrived on `conn`; True if it no longer reads for now."""
        raise NotImplementedError

    def _withdraw(self, conn: Conn) -> bool:
        """Take `conn`'s request out of the queue it waits in (its client left): True if
        it was still waiting, False if a thread has it (or it never waits)."""
        return False

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
        get through in time, an idle one past the idle timeout, a lingering close), and
        every request arriving slower than the minimum send rate."""
        for conn in [c for c in self.conns.values() if c.state != ANSWERING and (
                c.deadline <= now or (c.state == READING and self._too_slow(c, now)))]:
            self._close(conn)

    def _too_slow(self, conn: Conn, now: float) -> bool:
        """Whether the request arriving on `conn` came slower than `min_send_rate` (on
        average, after `SEND_RATE_GRACE` seconds)."""
        late = now - conn.started - SEND_RATE_GRACE
        return conn.started > 0 and late > 0 and len(conn.inbuf) < self.min_send_rate * late

    # --- accepting --------------------------------------------------------------------------

    def stop_accepting(self) -> None:
        self.draining = True
        self._pause_accepting()

    def _resume_accepting(self) -> None:
        if not self.accepting and not self.stopping and not self.draining:
            for sock in self.socks:
                self.selector.register(sock, READ, partial(self._accept, sock))
            self.accepting = True

    def _pause_accepting(self) -> None:
        if self.accepting:
            for sock in self.socks:
                self.selector.unregister(sock)
            self.accepting = False

    def _accept(self, listening, _mask: int) -> None:
        for _ in range(ACCEPT_BURST):  # then the others' turn
            try:
                sock, address = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if self._accept_failed(exc):
                    return
                continue
            client = str(address[0]) if isinstance(address, tuple) else "local"
            if not self._make_room(client):
                sock.close()  # every connection of the client is being answered
                continue
            self._admit(sock, client)
            if len(self.conns) >= self.max_connections and all(c.state == ANSWERING for c in self.conns.values()):
                self._pause_accepting()
                return

    def _accept_failed(self, exc: OSError) -> bool:
        """After a failed accept: True to stop accepting for now (out of file descriptors:
        a connection makes room, or accepting pauses), False to go on (the client left)."""
        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            log.warning("listener cannot accept: out of file descriptors", extra={"listener": self.name})
            self._make_room(None) or self._pause_accepting()
            return True
        if exc.errno == errno.ECONNABORTED:
            return False
        raise exc

    def _evictable(self, client: str | None = None) -> list[Conn]:
        return [c for c in self.conns.values() if c.state != ANSWERING and (client is None or c.client == client)]

    def _oldest_of(self, client: str | None) -> Conn | None:
        """`client`'s connection to close first: its oldest idle or closing one, else its
        oldest not being answered (None: all are). Its connections are kept oldest
        first, so a flood of new connections costs a few steps each, not a scan."""
        fallback = None
        for conn in (self.by_client.get(client) or {}).values():
            if conn.state in (IDLE, CLOSING):
                return conn
            if fallback is None and conn.state != ANSWERING:
                fallback = conn
        return fallback

    def _make_room(self, client: str | None) -> bool:
        """Make room for one more connection (from `client`): close the oldest one not
        being answered, idle first; False if there is none to close."""
        if client is not None and self.per_client[client] >= self.max_per_client:
            victim = self._oldest_of(client)
        elif len(self.conns) >= self.max_connections or client is None:
            candidates = [c for c in self._evictable() if c.state == IDLE]
            if candidates:
                victim = min(candidates, key=lambda c: c.since)
            else:
                heaviest = max(self.per_client, key=self.per_client.__getitem__, default=None)
                victim = self._oldest_of(heaviest)
        else:
            return True
        if victim is None:
            return False
        self._close(victim)
        return True

    def _admit(self, sock: socket.socket, client: str) -> None:
        sock.setblocking(False)
        try:  # answers and TLS handshakes are small writes: no Nagle wait between them
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP (a test's socketpair)
        deadline_at = time.monotonic() + self.timeout  # handshake, head and body: one deadline
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
        conn = Conn(sock, client, state, deadline_at)
        self.conns[id(conn)] = conn
        self.per_client[client] += 1
        self.by_client.setdefault(client, {})[id(conn)] = conn
        self._want(conn, READ)

    # --- one connection -----------------------------------------------------------------------

    def _on_event(self, conn: Conn, _mask: int) -> None:
        try:
            if conn.state == HANDSHAKE:
                self._handshake(conn)
            elif conn.state in (READING, IDLE):
                self._read(conn)
            elif conn.state == ANSWERING:
                self._watch_answering(conn)
            elif conn.state == WRITING:
                if self._write(conn) and conn.inbuf:  # the rest of a pipeline, in turn
                    self.ready.append(conn)
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
        if self.client_check is not None:
            conn.forbidden = self.client_check(conn.sock)
            if conn.forbidden:
                log.warning("client certificate refused", extra={
                    "listener": self.name, "client": conn.client, "reason": conn.forbidden})
        conn.state = READING
        self._want(conn, READ)
        self._read(conn)  # bytes may already be decrypted and waiting

    def _read(self, conn: Conn) -> None:
        while True:
            chunk = self._receive(conn)
            if chunk is None:
                return
            if conn.state == IDLE:  # a new request on a kept-alive connection
                conn.state = READING
                conn.since = time.monotonic()
                conn.deadline = conn.since + self.timeout
            if not conn.inbuf:
                conn.started = time.monotonic()
            conn.inbuf += chunk
            if not self._charge(conn, len(conn.inbuf)):
                self._shed(conn)
                return
            if self._serve_buffered(conn):
                return

    def _receive(self, conn: Conn) -> bytes | None:
        """The next bytes `conn`'s client sent, or None: nothing more for now (the
        connection waits for its socket), or the connection closed (an error, or the
        client left: half a request is never answered)."""
        try:
            chunk = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            self._want(conn, READ)
            return None
        except ssl.SSLWantWriteError:
            self._want(conn, WRITE)
            return None
        except OSError:  # ssl.SSLError included
            self._close(conn)
            return None
        if not chunk:
            self._close(conn)
            return None
        return chunk

    def _charge(self, conn: Conn, total: int) -> bool:
        """Charge `conn` for holding `total` bytes; when the budget is full, first make
        room: shed (503) incomplete requests that already hold more than `conn`'s whole
        request will (a probe's head, a body's declared size), those of the client
        holding the most bytes first, the oldest first; never one being answered. So no
        client's stalled bodies keep another client's smaller requests out."""
        if self.budget.charge(conn, total):
            return True
        need = total - conn.charged - self.budget.available(total)
        whole = declared_size(conn.inbuf, total, self.max_body)
        held: Counter[str] = Counter()
        for c in self.conns.values():
            held[c.client] += c.charged
        victims = sorted((c for c in self.conns.values() if c is not conn and c.state == READING
                          and c.charged > whole), key=lambda c: (-held[c.client], c.started))
        for victim in victims:
            if need <= 0:
                break
            need -= victim.charged
            self._shed(victim)
        return self.budget.charge(conn, total)

    def _watch_answering(self, conn: Conn) -> None:
        """The client of a request being answered sent something: its leaving (EOF, a
        reset) stops the work on it; a pipelined request's first bytes are kept for
        later, and the connection is not watched again until its answer is written."""
        try:
            chunk = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            if conn.answering is not None:
                conn.answering.gone = True
                if self._withdraw(conn):  # never started: nothing to answer
                    self._close(conn)
                    return
            self._want(conn, 0)
            return
        self._want(conn, 0)
        if not conn.inbuf:
            conn.started = time.monotonic()
        conn.inbuf += chunk
        if not self.budget.charge(conn, max(conn.charged, len(conn.inbuf))):
            conn.inbuf = bytearray()  # no room for it: the connection closes after the answer
            conn.close_after = True

    # --- answering ----------------------------------------------------------------------------

    def _send(self, conn: Conn, answer: tuple[bytes, bool]) -> bool:
        """Write an answer; True once it is written and the connection reads again."""
        data, keep = answer
        conn.state = WRITING
        conn.out = memoryview(data)
        conn.close_after = conn.close_after or not keep
        conn.deadline = time.monotonic() + self.timeout
        return self._write(conn)

    def _write(self, conn: Conn) -> bool:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                self._want(conn, WRITE)
                return False
            except ssl.SSLWantReadError:
                self._want(conn, READ)
                return False
            except OSError:
                self._close(conn)
                return False
            conn.out = conn.out[sent:]
        if conn.close_after:
            self._start_linger(conn)
            return False
        now = time.monotonic()
        conn.state, conn.since, conn.deadline = IDLE, now, now + self.idle_timeout
        self.budget.charge(conn, len(conn.inbuf))
        self._want(conn, READ)
        if conn.inbuf:  # a pipelined request: the caller answers it
            conn.state, conn.deadline = READING, now + self.timeout
        return True

    def _refuse(self, conn: Conn, code: int, message: str,
                extra: tuple[tuple[str, str], ...] = ()) -> None:
        """An error answer, then the connection closes (its body is never read)."""
        self.budget.charge(conn, 0)
        conn.inbuf = bytearray()
        conn.request = None
        self._send(conn, (response(code, JSON, error_body(message), False, extra=extra), False))

    def _shed(self, conn: Conn) -> None:
        shed(self.name)
        log.warning("request shed: in-flight request bytes at the limit",
                    extra={"listener": self.name, "client": conn.client, "limit": self.budget.limit})
        self._refuse(conn, 503, "too many request bytes in flight; retry",
                     extra=(("Retry-After", str(RETRY_AFTER_SECONDS)),))

    def _start_linger(self, conn: Conn) -> None:
        """After an answer that closes: stop writing and drop what the client still sends
        for a moment, so that the close does not reset the answer away before it is read."""
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
        mine = self.by_client.get(conn.client)
        if mine is not None:
            mine.pop(id(conn), None)
        if not self.per_client[conn.client]:
            del self.per_client[conn.client]
            self.by_client.pop(conn.client, None)
        if conn.events and self.selector is not None:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.events = 0
        self.budget.charge(conn, 0)
        try:
            conn.sock.close()
        except OSError:
            pass
        if self.selector is not None:
            self._resume_accepting()
