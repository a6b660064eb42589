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

Work that may take long never runs on the loop, so one client cannot make the others
wait (issue #12, hostile pods): each request runs in a *lane* (`extender.cel.lane`)
and its CEL work is checked before it starts. The loop answers requests whose CEL is
memoised, or compiled and estimated below `LOOP_COST` in all; a request that needs
more raises `lane.Elsewhere` before anything is written, and the whole request is
answered again, from its buffered bytes, by a thread of the lane it needs: a pool
thread (`--threads`) for compiling and up to `EXPENSIVE_COST` in all, the *expensive
lane* (one thread per `EXPENSIVE_SLOTS`, its own queue) for the rest, which a pool
thread in turn hands on. So expensive work waits for its slot in its own queue
without holding a thread that cheap work needs: a cheap pod waits at most for the
loop's current request, never behind an expensive one (one whose expression is not
compiled yet waits for a pool thread: compiles and mid-cost runs, each bounded).
Requests that may wait for a bind, chunked and large bodies go to a pool thread, in
the pool lane, from the start. `bind` (an API call that may take until its deadline)
has a lane of its own: `BIND_THREADS` threads with their own queue, so binds never
queue behind filter work nor hold the threads filter work needs, however slow the
API server (kube-scheduler runs each binding in a goroutine of its own). Every hop keeps the request's arrival
time: its deadline (`--request-deadline`) counts from when its first byte came, so a
request that waited in a queue past it answers an `Error`, never a verdict; the lane
only decides where work runs, never its result (the cost limit is the same
everywhere). Outcomes computed before a hand-on stay memoised; nothing half-done is.

No request reaches a thread before it has fully arrived: larger `Content-Length`
bodies (up to the body limit), chunked bodies (scanned incrementally, `Framing`) and
`Expect: 100-continue` requests (the loop sends the `100 Continue`) are buffered on the
loop too and handed to a pool thread only once complete; a declared body over the
limit is refused (413), a head over `MAX_HEAD_BYTES` (431) and a broken chunked framing
(400) before they are read. Every byte a connection holds counts against the process's
in-flight byte budget (`extender.server.budget`, `--max-inflight-bytes`, shared with the
health and webhook listeners) as it arrives; a request that would pass it is answered
503 with `Retry-After`. New connections wait in the poller for their first byte, and a
partial request is closed `REQUEST_READ_TIMEOUT` after its first byte. What still goes
to the pool unbuffered (anything odd in the head, TLS, HTTP/2) reads under that same
deadline (`DeadlineSocket`) and is charged by the WSGI layer: a stalled client never
holds a thread for long (and,
answered by gunicorn's own code, runs without a lane: its expensive CEL holds its
thread while it waits for the slot, as before). A
client that does not read its answer is cut off after `WRITE_TIMEOUT`. gunicorn's
`pre_request`/`post_request` hooks and access log do not see verbs answered from their
bytes (the server configures neither).

`PoolWorker` (`--worker-class gthread`) buffers the same way and answers every request
on a pool thread (in the pool lane; expensive CEL moves on to the expensive lane as
above): requests in flight interleave, so a cheap one is not queued behind an
expensive one while a thread is free. Relies on gthread's structure as of gunicorn
27 (`enqueue_req`, `accept`, `TConn`, the keep-alive and pending deques), hence the pin
in pyproject.toml.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections import deque
from concurrent import futures
from functools import partial

from gunicorn import http, util
from gunicorn.http2 import negotiation
from gunicorn.workers import gthread

from extender.binding import BIND_CONNECTIONS
from extender.cel import deadline, lane
from extender.cel.limits import EXPENSIVE_SLOTS
from extender.server.budget import BODIES, RETRY_AFTER_SECONDS
from extender.server.verbs import JSON_HEADERS, REASONS, shed_answer, too_large, verb_of

INLINE_MAX_BYTES = 1 << 20  # head + body; a NodeNames request for 5,000 nodes is ~75 KiB
MAX_HEAD_BYTES = 64 << 10  # no head end by then: 431 (gunicorn would wait for one)
# kube-scheduler gives up on an extender call after its httpTimeout (5 s by default): a
# request that has not fully arrived by then is not worth a thread or buffer any longer.
REQUEST_READ_TIMEOUT = 5.0
WRITE_TIMEOUT = 10.0  # seconds for each write of an answer
READ_CHUNK = 256 << 10
BURST = 16  # requests answered per readiness event before other connections get a turn
# `inline_request_size` verdicts
INCOMPLETE, ELSEWHERE, HEAD_TOO_LARGE, BODY_TOO_LARGE, MALFORMED = 0, -1, -2, -3, -4
BIND_LANE = -1  # where `bind` runs (next to the CEL lanes: no CEL, a pool of its own)
BIND_THREADS = BIND_CONNECTIONS  # one API connection each


class Conn(gthread.TConn):
    """gthread's connection, whose buffered bytes count against the process's in-flight
    byte budget (`charged`, see extender.server.budget) until it closes, whichever code
    closes it (ours, or gthread's keep-alive and finish paths)."""

    charged = 0

    def close(self) -> None:
        BODIES.charge(self, 0)
        super().close()


class DeadlineSocket:
    """A client socket whose blocking reads share one deadline (`deadline`, monotonic
    seconds; None: no deadline) and whose blocking mode always has a timeout. gthread
    puts the socket in blocking mode, without a timeout, before a pool thread reads a
    request: a client that stops sending would hold that thread until it disconnects."""

    __slots__ = ("sock", "deadline")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline: float | None = None

    def __getattr__(self, name: str):
        return getattr(self.sock, name)

    def setblocking(self, flag: bool) -> None:
        if flag:
            self.sock.settimeout(WRITE_TIMEOUT)
        else:
            self.sock.setblocking(False)

    def recv(self, size: int, *flags: int) -> bytes:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("request not received within the read deadline")
            self.sock.settimeout(left)
        return self.sock.recv(size, *flags)


class DeadlineWorker(gthread.ThreadWorker):
    """gunicorn's gthread whose pool threads read each request under
    `REQUEST_READ_TIMEOUT` (see `DeadlineSocket`); `--worker-class gthread`."""

    def accept(self, listener) -> None:
        """A new connection waits in the poller for its first bytes, not on a pool
        thread: gthread gives each one a thread for up to 5 s, so a few hundred silent
        connections would queue every other client behind them."""
        try:
            sock, address = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = Conn(self.cfg, sock, address, listener.getsockname())
        if not self.cfg.is_ssl:
            conn.sock = DeadlineSocket(conn.sock)
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ,
                             partial(self.on_pending_socket_readable, conn))

    def enqueue_req(self, conn) -> None:
        if not self.cfg.is_ssl and not isinstance(conn.sock, DeadlineSocket):
            conn.sock = DeadlineSocket(conn.sock)
        super().enqueue_req(conn)

    def handle(self, conn):
        sock = conn.sock
        if not isinstance(sock, DeadlineSocket):
            return super().handle(conn)
        sock.deadline = time.monotonic() + REQUEST_READ_TIMEOUT
        try:
            return super().handle(conn)
        except TimeoutError:
            return False
        finally:
            sock.deadline = None

    def murder_keepalived(self, force: bool = False) -> None:
        """Close every expired waiting connection. gthread stops at the first one not
        expired (its deque is sorted when all share the keep-alive timeout); a partial
        request's shorter deadline may sit behind an idle connection's longer one."""
        now = time.monotonic()
        expired = [c for c in self.keepalived_conns if force or c.timeout <= now]
        if not expired:
            return
        gone = set(map(id, expired))
        self.keepalived_conns = deque(c for c in self.keepalived_conns if id(c) not in gone)
        for conn in expired:
            try:
                self.poller.unregister(conn.sock)
            except (OSError, KeyError, ValueError):
                pass  # already unregistered
            self.nr_conns -= 1
            conn.close()

    def handle_error(self, req, client, addr, exc) -> None:
        if isinstance(exc, TimeoutError):  # a stalled client, not a server error
            self.log.debug("Closing a connection whose request did not arrive in time")
            return
        super().handle_error(req, client, addr, exc)


class Framing:
    """What `inline_request_size` learnt of the request at the head of a connection's
    buffer, kept between readiness events: where the chunk scan stopped (so a body
    arriving in many pieces is scanned once, not once per piece), whether the body is
    chunked, and the span of an `Expect: 100-continue` line."""

    __slots__ = ("chunk_pos", "chunked", "expect")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.chunk_pos = 0
        self.chunked = False
        self.expect: tuple[int, int] | None = None


def inline_request_size(buf: bytes | bytearray, limit: int = INLINE_MAX_BYTES,
                        framing: Framing | None = None) -> int:
    """Size of the first request in `buf` (head and body at most `limit` bytes) once it
    has fully arrived; INCOMPLETE if more bytes are needed first; ELSEWHERE if it is not
    a plain HTTP/1 request with one `Content-Length` or a chunked body (gthread's thread
    pool takes it); HEAD_TOO_LARGE if MAX_HEAD_BYTES came without the head's end;
    BODY_TOO_LARGE if it declares or sends more than `limit` bytes; MALFORMED for a
    broken chunked framing (a size that is not hex, a chunk without its CRLF). `framing` records a
    chunked body and an `Expect: 100-continue` line. Conservative by design: the parser
    must never have to wait for the socket."""
    framing = framing or Framing()
    end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
    if end < 0:
        return INCOMPLETE if len(buf) < MAX_HEAD_BYTES else HEAD_TOO_LARGE
    lines = bytes(buf[:end]).split(b"\r\n")
    if not lines[0].endswith((b" HTTP/1.1", b" HTTP/1.0")):
        return ELSEWHERE
    length = None
    chunked = False
    expect = None
    offset = len(lines[0]) + 2
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or not name.isascii():
            return ELSEWHERE  # obsolete folding, spaces before the colon, junk
        name = name.lower()
        value = value.strip()
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return ELSEWHERE
            length = int(value)
        elif name == b"transfer-encoding":
            if chunked or value.lower() != b"chunked":
                return ELSEWHERE
            chunked = True
        elif name == b"expect":
            if expect is not None or value.lower() != b"100-continue":
                return ELSEWHERE  # gunicorn answers 417
            expect = (offset, offset + len(line) + 2)
        elif name in (b"upgrade", b"http2-settings"):
            return ELSEWHERE
        offset += len(line) + 2
    http11 = lines[0].endswith(b"1.1")
    framing.chunked = chunked
    framing.expect = expect if http11 else None  # HTTP/1.0: ignored (RFC 9110 10.1.1)
    if chunked:
        if length is not None or not http11:
            return ELSEWHERE  # both framings: gunicorn refuses it
        return _chunked_size(buf, end + 4, limit, framing)
    size = end + 4 + (length or 0)
    if size > limit:
        return BODY_TOO_LARGE
    return size if len(buf) >= size else INCOMPLETE


_HEX = frozenset(b"0123456789abcdefABCDEF")


def _chunked_size(buf: bytes | bytearray, body: int, limit: int, framing: Framing) -> int:
    """Size of a request whose chunked body starts at `body`, from where the last scan
    stopped; the verdicts as `inline_request_size`'s."""
    pos = max(framing.chunk_pos, body)
    while True:
        framing.chunk_pos = pos
        line_end = buf.find(b"\r\n", pos, pos + 1024)
        if line_end < 0:
            return INCOMPLETE if len(buf) - pos < 1024 else MALFORMED
        size_text = bytes(buf[pos:line_end]).partition(b";")[0].strip()
        if not size_text or not set(size_text) <= _HEX or len(size_text) > 16:
            return MALFORMED  # gunicorn's InvalidChunkSize would be met mid-answer
        size = int(size_text, 16)
        if size == 0:  # the last chunk; trailers (if any) end with an empty line
            trailer_end = buf.find(b"\r\n\r\n", line_end, line_end + MAX_HEAD_BYTES)
            if trailer_end < 0:
                return INCOMPLETE if len(buf) - line_end < MAX_HEAD_BYTES else MALFORMED
            return trailer_end + 4
        pos = line_end + 2 + size + 2
        if pos > limit:
            return BODY_TOO_LARGE
        if len(buf) < pos:
            return INCOMPLETE
        if buf[pos - 2:pos] != b"\r\n":
            return MALFORMED


class InlineWorker(DeadlineWorker):
    """gthread with complete small requests answered on the event-loop thread."""

    answer_on_loop = True

    def init_process(self) -> None:
        # a peer that is not an address counts as trusted: "could h2c apply at all?"
        h2c = negotiation.prior_knowledge_allowed(self.cfg, None) or \
            negotiation.upgrade_allowed(self.cfg, None)
        self.inline = not self.cfg.is_ssl and not h2c
        # the expensive lane: one thread per slot, so expensive CEL never holds a pool thread
        self.expensive_pool = futures.ThreadPoolExecutor(
            max_workers=EXPENSIVE_SLOTS, thread_name_prefix="cel-expensive")
        self.bind_pool = futures.ThreadPoolExecutor(max_workers=BIND_THREADS, thread_name_prefix="bind")
        try:
            super().init_process()  # loads the app, then runs the loop
        finally:
            self.expensive_pool.shutdown(wait=False, cancel_futures=True)
            self.bind_pool.shutdown(wait=False, cancel_futures=True)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # the app's verb entry point (extender.server.app), if it has one
        self.answer_verb = getattr(self.wsgi, "answer_verb", None)
        config = getattr(self.wsgi, "config", None) or {}
        self.max_body = int(config.get("MAX_CONTENT_LENGTH") or INLINE_MAX_BYTES)
        self.max_request = self.max_body + MAX_HEAD_BYTES
        self.off_loop = getattr(self.wsgi, "off_loop", None)  # verb -> bool (bind, pods in flight)

    def handle(self, conn):
        """gthread's own reading and answering (requests the loop hands over as they
        are): their buffered bytes are charged to the connection already."""
        if not self.inline:
            return super().handle(conn)
        with BODIES.covered():
            return super().handle(conn)

    def enqueue_req(self, conn) -> None:
        if not self.inline:
            super().enqueue_req(conn)
            return
        if not isinstance(conn.sock, DeadlineSocket):
            conn.sock = DeadlineSocket(conn.sock)
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
            framing = conn.framing
            size = inline_request_size(buf, self.max_request, framing)
            if size == INCOMPLETE:
                if not self._receive(conn, buf):
                    return
                size = inline_request_size(buf, self.max_request, framing)
            if framing.expect is not None and (size == INCOMPLETE or size > 0):
                size = self._continue(conn, buf, size)
                if size is None:
                    return
            if size == INCOMPLETE:
                self._park(conn, buf)
                return
            if size == ELSEWHERE:
                self._to_pool(conn, buf)
                return
            if size == HEAD_TOO_LARGE:  # gunicorn would hold a pool thread until the end
                self._refuse(conn, b"431 Request Header Fields Too Large")
                return
            if size == BODY_TOO_LARGE:  # refused before a byte of it is read
                self._refuse(conn, b"413 Request Entity Too Large", too_large(self.max_body)[1])
                return
            if size == MALFORMED:  # on every path: no route ever reads a broken body
                self._refuse(conn, b"400 Bad Request", b'{"error":"malformed chunked request body"}')
                return
            chunked = framing.chunked
            framing.reset()
            arrived = conn.request_started or time.monotonic()
            request, buf = bytes(buf[:size]), buf[size:]
            # complete: a pool thread answers it, never waits for the client; bind: its
            # own lane; off_loop: it may wait for a bind
            verb = self._verb(request)
            if verb == "bind":
                self._dispatch(conn, request, buf, BIND_LANE, arrived)
                return
            if (size > INLINE_MAX_BYTES or chunked or not self.answer_on_loop
                    or (verb is not None and self.off_loop is not None and self.off_loop(verb))):
                self._dispatch(conn, request, buf, lane.POOL, arrived)
                return
            try:
                with lane.running_in(lane.LOOP), deadline.arrived(arrived):
                    kept = self._answer(conn, request)
            except lane.Elsewhere as moved:  # CEL work too costly for the loop: nothing sent yet
                self._dispatch(conn, request, buf, moved.lane, arrived, again=True)
                return
            if not kept:
                self._close(conn, graceful=True)
                return
            if conn.parser is not None:  # gunicorn's parser read nothing more, unless misjudged
                buf[:0] = conn.parser.unreader.take_buffered()
            BODIES.charge(conn, len(buf))
            conn.request_started = time.monotonic() if buf else None
        self._hold(conn, buf)  # a long pipeline: the others' turn, then ours again
        self.method_queue.defer(self.enqueue_req, conn)

    def _continue(self, conn, buf: bytearray, size: int) -> int | None:
        """`Expect: 100-continue`: the line is dropped from the buffered head (nobody
        downstream answers it again) and, if the body is still to come, `100 Continue`
        is sent, so the client sends it to the loop rather than to a waiting thread.
        The request's new size; None if the connection is gone."""
        start, end = conn.framing.expect
        del buf[start:end]
        conn.framing.reset()
        if size == INCOMPLETE:
            conn.sock.settimeout(WRITE_TIMEOUT)
            try:
                conn.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                self._close(conn)
                return None
            conn.sock.setblocking(False)
        return inline_request_size(buf, self.max_request, conn.framing)

    def _receive(self, conn, buf: bytearray) -> bool:
        """Read what has arrived, without blocking. False: the connection is gone
        (closed here), or it ended mid-request and the pool answers what it can."""
        while len(buf) < self.max_request + MAX_HEAD_BYTES:
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
            if not BODIES.charge(conn, len(buf)):  # every held byte counts, as it arrives
                self._shed(conn)
                return False
        return True

    def _verb(self, request: bytes | bytearray) -> str | None:
        """The verb a `POST` request calls, if any (the app then decides where it runs:
        `bind` in its lane; while pods are in flight, any verb that may wait for a `bind`
        (`extender.inflight`) on a pool thread)."""
        if self.answer_verb is None or not request.startswith(b"POST /"):
            return None
        end = request.find(b" ", 5)
        return verb_of(bytes(request[5:end]).decode("latin-1").partition("?")[0]) if end > 0 else None

    def _answer(self, conn, request: bytes) -> bool:
        """Parse and answer one complete request; True if the connection stays open."""
        with BODIES.covered():  # its bytes are charged to the connection already
            return self._answer_charged(conn, request)

    def _answer_charged(self, conn, request: bytes) -> bool:
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
        any `Connection` header, HTTP/1.0, a query or percent-encoding in the target, a
        chunked body."""
        if self.answer_verb is None or not request.startswith(b"POST /"):
            return None
        line_end = request.find(b"\r\n")
        head_end = request.find(b"\r\n\r\n")
        target, _, version = request[5:line_end].partition(b" ")
        if version != b"HTTP/1.1" or b"?" in target or b"%" in target:
            return None
        head = request[line_end:head_end + 2].lower()
        if b"\r\nconnection:" in head or b"\r\ntransfer-encoding:" in head:
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

    def _refuse(self, conn, status: bytes, body: bytes = b"", extra: bytes = b"") -> None:
        """An error answer without reading further, then close."""
        conn.sock.settimeout(WRITE_TIMEOUT)
        kind = b"Content-Type: " + JSON_HEADERS.encode() + b"\r\n" if body else b""
        try:
            conn.sock.sendall(b"HTTP/1.1 " + status + b"\r\nConnection: close\r\n" + kind + extra
                              + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            pass
        self._close(conn, graceful=True)

    def _shed(self, conn) -> None:
        """Over the in-flight byte budget: 503 with Retry-After, then close."""
        self.log.warning("Request shed: in-flight request bytes at --max-inflight-bytes")
        BODIES.charge(conn, 0)
        self._refuse(conn, b"503 Service Unavailable", shed_answer()[1],
                     b"Retry-After: %d\r\n" % RETRY_AFTER_SECONDS)

    # --- answers off the loop -------------------------------------------------------

    def _dispatch(self, conn, request: bytes, rest: bytearray, where: int,
                  arrived: float, again: bool = False) -> None:
        """Answer `request` on a thread of lane `where`; the connection (with the bytes
        that came after the request, `rest`) stays off the poller until then. `again`:
        it was started elsewhere and given up (`lane.Elsewhere`)."""
        self._hold(conn, rest)
        if again:
            self._fresh_parser(conn)
        self._submit(conn, request, where, arrived)

    @staticmethod
    def _fresh_parser(conn) -> None:
        """gunicorn's parser may have consumed a request that was then not answered (a
        `Connection: close` one would even stop it): the next answer starts a new one."""
        if conn.parser is None:
            return
        conn.held_bytes[:0] = conn.parser.unreader.take_buffered()
        conn.parser = None
        conn.initialized = False

    def _submit(self, conn, request: bytes, where: int, arrived: float) -> None:
        pool = {lane.POOL: self.tpool, BIND_LANE: self.bind_pool}.get(where, self.expensive_pool)
        try:
            pool.submit(self._answer_in_lane, conn, request, where, arrived)
        except RuntimeError:  # the worker is shutting down
            self.method_queue.defer(self._resume, conn, False)

    def _answer_in_lane(self, conn, request: bytes, where: int, arrived: float) -> None:
        """On a pool or expensive-lane thread: answer, then give the connection back to
        the loop; a request that needs a costlier lane moves on, unanswered."""
        kept = False
        try:
            with lane.running_in(lane.POOL if where == BIND_LANE else where), deadline.arrived(arrived):
                kept = self._answer(conn, request)
        except lane.Elsewhere as moved:
            self._fresh_parser(conn)
            self._submit(conn, request, moved.lane, arrived)
            return
        except Exception:  # a connection must never be lost
            self.log.exception("Error answering a request off the event loop")
        self.method_queue.defer(self._resume, conn, kept)

    def _resume(self, conn, kept: bool) -> None:
        """On the loop: an answered connection reads its next request (or is closed)."""
        if not kept:
            self._close(conn, graceful=True)
            return
        conn.request_started = time.monotonic() if getattr(conn, "held_bytes", None) else None
        self.enqueue_req(conn)

    # --- where a connection goes next ---------------------------------------------

    def _park(self, conn, buf: bytearray) -> None:
        """Back to the poller until more bytes arrive. A partial request must complete
        within REQUEST_READ_TIMEOUT of its first byte (then the connection is closed); its
        bytes stay charged to the in-flight budget meanwhile."""
        self._hold(conn, buf)
        conn.set_timeout()
        if buf and conn.request_started is not None:
            conn.timeout = min(conn.timeout, conn.request_started + REQUEST_READ_TIMEOUT)
        if not self.alive:
            conn.timeout = min(conn.timeout, time.monotonic() + gthread.STOP_KEEPALIVE_LINGER)
        self.keepalived_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ,
                             partial(self.on_client_socket_readable, conn))

    def _to_pool(self, conn, buf: bytearray) -> None:
        """gthread's own path, with the bytes read so far given back to its parser."""
        conn.framing.reset()  # the next request on this connection is scanned afresh
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
        BODIES.charge(conn, 0)
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

    def _take(self, conn) -> bytearray:
        """The bytes held for `conn`, after any its parser read ahead."""
        buf = getattr(conn, "held_bytes", None) or bytearray()
        conn.held_bytes = None
        if not hasattr(conn, "request_started"):
            conn.request_started = None
            conn.framing = Framing()
        if conn.parser is not None:
            buf[:0] = conn.parser.unreader.take_buffered()
        return buf


class PoolWorker(InlineWorker):
    """`--worker-class gthread`: requests are buffered on the event loop like
    `InlineWorker`'s and answered on pool threads, as gthread does. Requests in flight
    interleave (the GIL switches threads every 5 ms), so a cheap request is not queued
    behind an expensive one while a thread is free; `--threads` sets how many, and
    expensive CEL never holds one (the expensive lane, see the module docstring)."""

    answer_on_loop = False
