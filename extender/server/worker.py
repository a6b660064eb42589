"""gunicorn's gthread worker, answering complete small requests on its event loop.

gthread hands every request to a pool thread and the connection back to its event loop
through a pipe. kube-scheduler calls us one request at a time on a kept-alive
connection, so that hand-off is pure latency: ~0.3-0.5 ms a call on the benchmark
machine, a third of a `filter` at 5,000 nodes. `InlineWorker` changes one thing: when a
connection is readable, the loop reads what has arrived without blocking, and once a
whole request is buffered (an HTTP/1 head and a `Content-Length` body, at most
`INLINE_MAX_BYTES` together) it is answered right there: a kept-alive HTTP/1.1
`POST /filter` or `/prioritize` straight from its bytes through the app's
`answer_verb` (no parser, environ or response objects: ~0.1-0.2 ms less a call), any
other request by the same gunicorn code gthread's threads run.

Everything else takes gthread's path unchanged: chunked or `Expect` bodies, larger
requests, anything odd in the head, TLS, HTTP/2, and requests that would push the
bytes held for partial requests past `BUFFER_BUDGET`. A partial request waits in the
poller, never on the loop, and must complete within the keep-alive timeout of its first
byte; a head longer than `MAX_HEAD_BYTES` is refused (431) rather than handed to a pool
thread that would wait for its end; a client that does not read its answer is cut off
after `WRITE_TIMEOUT`. The
Python work is serialized by the GIL either way, so answering on the loop costs no
parallelism; the pool keeps slow bodies from stalling the loop. gunicorn's
`pre_request`/`post_request` hooks and access log do not see verbs answered from their
bytes (the server configures neither).

Relies on gthread's structure as of gunicorn 27 (`enqueue_req`, `TConn`, the
keep-alive deque), hence the pin in pyproject.toml; `--worker-class gthread` is the
plain worker.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from functools import partial

from gunicorn import http, util
from gunicorn.http2 import negotiation
from gunicorn.workers import gthread

from extender.server.verbs import JSON_HEADERS, REASONS, verb_of

INLINE_MAX_BYTES = 1 << 20  # head + body; a NodeNames request for 5,000 nodes is ~75 KiB
MAX_HEAD_BYTES = 64 << 10  # no head end by then: 431 (gunicorn would wait for one)
BUFFER_BUDGET = 64 << 20  # bytes held for partial requests, all connections together
WRITE_TIMEOUT = 10.0  # seconds for each write of an answer
READ_CHUNK = 256 << 10
BURST = 16  # requests answered per readiness event before other connections get a turn
INCOMPLETE, ELSEWHERE, HEAD_TOO_LARGE = 0, -1, -2  # `inline_request_size` verdicts


def inline_request_size(buf: bytes | bytearray) -> int:
    """Size of the first request in `buf` if it can be answered inline and has fully
    arrived; INCOMPLETE if more bytes are needed first; ELSEWHERE if it is not a plain
    HTTP/1 request with at most one `Content-Length` (gthread's thread pool takes it);
    HEAD_TOO_LARGE if MAX_HEAD_BYTES came without the head's end. Conservative by
    design: the parser must never have to wait for the socket."""
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return INCOMPLETE if len(buf) < MAX_HEAD_BYTES else HEAD_TOO_LARGE
    lines = bytes(buf[:end]).split(b"\r\n")
    if not lines[0].endswith((b" HTTP/1.1", b" HTTP/1.0")):
        return ELSEWHERE
    length = None
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or not name.isascii():
            return ELSEWHERE  # obsolete folding, spaces before the colon, junk
        name = name.lower()
        if name == b"content-length":
            value = value.strip()
            if length is not None or not value.isdigit():
                return ELSEWHERE
            length = int(value)
        elif name in (b"transfer-encoding", b"expect", b"upgrade", b"http2-settings"):
            return ELSEWHERE
    size = end + 4 + (length or 0)
    if size > INLINE_MAX_BYTES:
        return ELSEWHERE
    return size if len(buf) >= size else INCOMPLETE


class InlineWorker(gthread.ThreadWorker):
    """gthread with complete small requests answered on the event-loop thread."""

    def init_process(self) -> None:
        # a peer that is not an address counts as trusted: "could h2c apply at all?"
        h2c = negotiation.prior_knowledge_allowed(self.cfg, None) or \
            negotiation.upgrade_allowed(self.cfg, None)
        self.inline = not self.cfg.is_ssl and not h2c
        super().init_process()  # loads the app, then runs the loop

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # the app's verb entry point (extender.server.app), if it has one
        self.answer_verb = getattr(self.wsgi, "answer_verb", None)
        self.off_loop = getattr(self.wsgi, "off_loop", None)  # verb -> bool (bind, pods in flight)

    def enqueue_req(self, conn) -> None:
        if not self.inline:
            super().enqueue_req(conn)
            return
        try:
            self._serve(conn)
        except Exception:  # a connection must never take the loop down
            self.log.exception("Error serving a connection on the event loop")
            self._close(conn)

    # --- one readiness event ------------------------------------------------------

    def _serve(self, conn) -> None:
        buf = self._take(conn)
        conn.sock.setblocking(False)
        for _ in range(BURST):
            size = inline_request_size(buf)
            if size == INCOMPLETE:
                if not self._receive(conn, buf):
                    return
                size = inline_request_size(buf)
            if size == INCOMPLETE:
                self._park(conn, buf)
                return
            if size == ELSEWHERE:
                self._to_pool(conn, buf)
                return
            if size == HEAD_TOO_LARGE:  # gunicorn would hold a pool thread until the end
                self._refuse(conn, b"431 Request Header Fields Too Large")
                return
            if self._off_loop(buf):  # it blocks (bind) or may wait for a bind this loop reads
                self._to_pool(conn, buf)
                return
            request, buf = bytes(buf[:size]), buf[size:]
            if not self._answer(conn, request):
                self._close(conn, graceful=True)
                return
            if conn.parser is not None:  # gunicorn's parser read nothing more, unless misjudged
                buf[:0] = conn.parser.unreader.take_buffered()
            conn.request_started = time.monotonic() if buf else None
        self._hold(conn, buf)  # a long pipeline: the others' turn, then ours again
        self.method_queue.defer(self.enqueue_req, conn)

    def _receive(self, conn, buf: bytearray) -> bool:
        """Read what has arrived, without blocking. False: the connection is gone
        (closed here), or it ended mid-request and the pool answers what it can."""
        while len(buf) < INLINE_MAX_BYTES + MAX_HEAD_BYTES:
            try:
                chunk = conn.sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                self._close(conn)
                return False
            if not chunk:
                if buf:
                    self._to_pool(conn, buf)  # a half-closed client still gets its answer
                else:
                    self._close(conn)
                return False
            if not buf and conn.request_started is None:
                conn.request_started = time.monotonic()
            buf += chunk
        return True

    def _off_loop(self, request: bytes | bytearray) -> bool:
        """`bind` (an API call) and, while pods are in flight, any verb that may wait for
        a `bind` (`extender.inflight`) are answered by a pool thread (the app decides)."""
        if self.off_loop is None or not request.startswith(b"POST /"):
            return False
        end = request.find(b" ", 5)
        verb = verb_of(bytes(request[5:end]).decode("latin-1").partition("?")[0]) if end > 0 else None
        return verb is not None and self.off_loop(verb)

    def _answer(self, conn, request: bytes) -> bool:
        """Parse and answer one complete request; True if the connection stays open."""
        kept = self._answer_verb(conn, request)
        if kept is not None:
            return kept
        conn.init()  # the parser, on first use (no I/O for plain HTTP/1)
        conn.parser.unreader.unread(request)
        conn.sock.settimeout(WRITE_TIMEOUT)
        req = None
        try:
            req = next(conn.parser)
            keep = bool(req) and self._keepalive_after(conn, self.handle_request(req, conn))
        except (http.errors.NoMoreData, StopIteration):
            keep = False
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.exception("Socket error answering a request")
            keep = False
        except Exception as exc:
            self.handle_error(req, conn.sock, conn.client, exc)
            keep = False
        if keep:
            conn.sock.setblocking(False)
        return keep

    def _answer_verb(self, conn, request: bytes) -> bool | None:
        """A kept-alive `POST /filter` or `/prioritize` answered straight from its bytes:
        no gunicorn parser, WSGI environ or response object (a third of a reused
        answer's time), one write. None: not such a request (gunicorn answers it), e.g.
        any `Connection` header, HTTP/1.0, a query or percent-encoding in the target."""
        if self.answer_verb is None or not request.startswith(b"POST /"):
            return None
        line_end = request.find(b"\r\n")
        head_end = request.find(b"\r\n\r\n")
        target, _, version = request[5:line_end].partition(b" ")
        if version != b"HTTP/1.1" or b"?" in target or b"%" in target \
                or b"\r\nconnection:" in request[line_end:head_end + 2].lower():
            return None
        verb = verb_of(target.decode("latin-1"))
        if verb is None:
            return None
        body = request[head_end + 4:]
        code, payload = self.answer_verb(verb, len(body), lambda: body)
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        keep = self.alive and bool(self.cfg.keepalive) and \
            len(self.keepalived_conns) < self.max_keepalived
        head = (f"HTTP/1.1 {REASONS[code]}\r\nServer: gunicorn\r\nDate: {util.http_date()}\r\n"
                f"Connection: {'keep-alive' if keep else 'close'}\r\n"
                f"Content-Type: {JSON_HEADERS}\r\nContent-Length: {len(payload)}\r\n\r\n")
        conn.sock.settimeout(WRITE_TIMEOUT)
        try:
            conn.sock.sendall(head.encode() + payload)
        except OSError:
            return False
        if keep:
            conn.sock.setblocking(False)
        return keep

    def _refuse(self, conn, status: bytes) -> None:
        """An error answer without reading further, then close."""
        conn.sock.settimeout(WRITE_TIMEOUT)
        try:
            conn.sock.sendall(b"HTTP/1.1 " + status + b"\r\nConnection: close\r\n"
                              b"Content-Length: 0\r\n\r\n")
        except OSError:
            pass
        self._close(conn, graceful=True)

    # --- where a connection goes next ---------------------------------------------

    def _park(self, conn, buf: bytearray) -> None:
        """Back to the poller until more bytes arrive. A partial request must complete
        within the keep-alive timeout of its first byte."""
        if buf and len(buf) + self._held() > BUFFER_BUDGET:
            self._to_pool(conn, buf)
            return
        self._hold(conn, buf)
        conn.set_timeout()
        if buf and conn.request_started is not None:
            conn.timeout = min(conn.timeout, conn.request_started + self.cfg.keepalive)
        if not self.alive:
            conn.timeout = min(conn.timeout, time.monotonic() + gthread.STOP_KEEPALIVE_LINGER)
        self.keepalived_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ,
                             partial(self.on_client_socket_readable, conn))

    def _to_pool(self, conn, buf: bytearray) -> None:
        """gthread's own path, with the bytes read so far given back to its parser."""
        conn.init()
        if buf:
            conn.parser.unreader.unread(bytes(buf))
        conn.data_ready = True
        conn.request_started = None
        super().enqueue_req(conn)

    def _close(self, conn, graceful: bool = False) -> None:
        """Close; `graceful` sends FIN first and drains what the client already sent
        (so the kernel does not reset the answer), without gunicorn's 2 s linger."""
        if getattr(conn, "closed", False):
            return
        conn.closed = True
        conn.held_bytes = None
        self.nr_conns -= 1
        sock = conn.sock
        try:
            if graceful:
                sock.shutdown(socket.SHUT_WR)
                sock.setblocking(False)
                for _ in range(16):
                    if not sock.recv(READ_CHUNK):
                        break
        except OSError:
            pass  # nothing more to drain, or already gone
        util.close(sock)

    # --- bytes held between readiness events ----------------------------------------

    def _hold(self, conn, buf: bytearray) -> None:
        conn.held_bytes = buf

    def _held(self) -> int:
        """Bytes of partial requests held by parked connections (only counted when one
        more would be held: partial requests are rare, gthread drops expired ones)."""
        return sum(len(getattr(c, "held_bytes", None) or b"") for c in self.keepalived_conns)

    def _take(self, conn) -> bytearray:
        """The bytes held for `conn`, after any its parser read ahead."""
        buf = getattr(conn, "held_bytes", None) or bytearray()
        conn.held_bytes = None
        if not hasattr(conn, "request_started"):
            conn.request_started = None
        if conn.parser is not None:
            buf[:0] = conn.parser.unreader.take_buffered()
        return buf
