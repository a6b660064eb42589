"""The extender's HTTP/1.1 server: one event-loop thread moves the bytes of every
connection; each complete request is answered where its `place` says, on the loop itself
(cheap answers) or by a thread of one of the listener's pools (lanes).

Three users, one worker process each: the verbs' port (`extender.server.app`, run by
the gunicorn worker `extender.server.worker`), `--metrics-listen` (`/healthz`, `/readyz`,
`/metrics`, `/explain`) and the admission webhook (`--webhook-listen`, HTTPS). What a
route sees is a `Request` (method, target, path, body) and what it gives back a `Reply`
(status, content type, body, extra headers); `Routes` serves fixed tables of them.

Why a loop (issues #12 and #28): with a thread per connection, 70 idle connections or 80
that never finish a TLS handshake took every thread, and clients sending one byte every
4 s (each read had its own timeout) held them for ever. Here a connection costs a file
descriptor and its buffered bytes, never a thread, and a thread takes a request only
once it has fully arrived:

* **One deadline per request.** The TLS handshake (new connection), the head and the
  body must all arrive within `timeout` seconds of the accept, or of the request's
  first byte on a kept-alive connection; writing the answer gets `timeout` seconds
  too. A kept-alive connection may then wait `idle_timeout` for its next request.
* **Accepts are never refused.** At most `max_connections` are open, and at most
  `max_per_client` per client address; a new connection beyond either replaces the
  oldest connection not being answered (an idle one first; the client's own when it
  is over its share, else one of the client holding most). Only when every connection
  is being answered does accepting pause: the kernel queues new ones meanwhile.
* **Bodies are bounded.** A body (`Content-Length` or chunked) over `max_body_bytes`
  is refused (413) before it is read; a head over `MAX_HEAD_BYTES` (431), a request
  line over `MAX_LINE` (414), a broken framing (400) likewise. Every byte a connection
  holds counts against the process's in-flight budget (`extender.server.budget`,
  shared by all listeners): over it the request is answered 503 with `Retry-After`.
* **Where a request runs** (`place`, the lanes of `extender.request.lane`): on the loop
  (`LOOP`: microseconds of Python, or a verb whose CEL work is memoised or cheap), or
  on a pool thread. A request answered on the loop never pays a hand-off between
  threads, which waits for the GIL (~0.3-0.5 ms a call on the benchmark machine, a
  third of a `filter` at 5,000 nodes); one that turns out to need costlier CEL work
  raises `lane.Elsewhere` before anything is written and is answered again, from its
  buffered bytes, by the pool of the lane it names. A request keeps its arrival time
  through every hop (`deadline.arrived`): its `--request-deadline` counts from its
  first byte, queueing included.

With SO_REUSEPORT every gunicorn worker binds the same `--metrics-listen` and webhook
address, so any live worker answers. An `ssl.SSLContext` (or a callable returning the
current one, for certificate rotation) turns a listener into HTTPS; the handshake runs
on the loop, without blocking.
"""

from __future__ import annotations

import errno
import logging
import re
import selectors
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from concurrent import futures
from email.utils import formatdate
from functools import partial
from http import HTTPStatus
from urllib.parse import unquote, urlsplit

from extender.api import expansion
from extender.request import deadline, lane
from extender.server.budget import RETRY_AFTER_SECONDS, SIDE_LIMIT, BodyBudget, shed

log = logging.getLogger("extender.http")

# path -> () -> (status, content type, body)
Route = Callable[[], tuple[int, str, bytes]]
# path -> (request body) -> (status, content type, body)
PostRoute = Callable[[bytes], tuple[int, str, bytes]]
SSLContexts = ssl.SSLContext | Callable[[], ssl.SSLContext] | None
JSON = "application/json"
# (status, content type, body, extra headers)
Reply = tuple[int, str, bytes, dict[str, str]]
# Routes a fixed table cannot name (path parameters, query strings): a `Request` ->
# Reply, or None when the path is not its own; its `takes_body(method, path)` says which
# requests may carry a body (the others are refused before their body is read). Each
# owner keeps its routes in its own module (`extender.server.explain_routes`).
Dispatch = Callable[["Request"], Reply | None]

LOOP = lane.LOOP  # `place`: answered on the event loop
MAX_HEAD_BYTES = 64 << 10  # no end of head by then: 431
MAX_LINE = 8190  # request line (gunicorn's limit_request_line): 414 beyond
READ_CHUNK = 256 << 10
BURST = 16  # requests of one connection answered in a row before the others' turn
LINGER = 1.0  # seconds an error answer waits for the client to stop sending before the close
SWEEP_INTERVAL = 0.1  # seconds between deadline checks
# A request still arriving this long after its first byte must have come at this many
# bytes a second since (on average): stalled and trickled bodies end early, not at the
# deadline. Real clients send a whole request at once (kube-scheduler over loopback, the
# API server, the kubelet's one-segment probes).
MIN_SEND_RATE = 1 << 20
SEND_RATE_GRACE = 1.0
QUICK_ROUTES = frozenset({"/healthz", "/readyz", "/livez"})  # GET routes answered on the loop
# connection states
HANDSHAKE, READING, ANSWERING, WRITING, IDLE, CLOSING = range(6)
READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
# RFC 9112 chunk-size [ chunk-ext ]: a size, then `;name[=value]` extensions (tokens or
# quoted strings, whitespace around the separators); nothing else, no bare CR or LF
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t !-~\x80-\xff])*"'
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d{1,19})")
_CHUNK_LINE = re.compile(rb"([0-9a-fA-F]{1,16})(?:[ \t]*;[ \t]*" + _TOKEN
                         + rb"(?:[ \t]*=[ \t]*(?:" + _TOKEN + rb"|" + _QUOTED + rb"))?)*[ \t]*")


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class Refused(Exception):
    """A request answered with an error, without a route, and the connection closed."""

    def __init__(self, code: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.headers = headers


def bare_line_ends(data: bytes | bytearray) -> bool:
    """Whether `data` holds a CR or LF that is not part of a CRLF (a line end another
    parser could read differently: request smuggling)."""
    pairs = data.count(b"\r\n")
    return data.count(b"\n") != pairs or data.count(b"\r") != pairs


def request_path(target: str) -> str:
    """The decoded path of a request target (origin or absolute form)."""
    if not target.startswith("/") and "://" in target:
        target = urlsplit(target).path or "/"
    path = target.partition("?")[0]
    return unquote(path) if "%" in path else path


class Request:
    """A parsed request head, then its body (`body`, set once it has arrived). `gone`:
    its client closed the connection while it was being answered (work on it stops:
    `extender.request.deadline`); `parse_charge`: bytes its parsed body holds in the budget."""

    __slots__ = ("method", "target", "path", "keep_alive", "head_size", "body_size", "chunked",
                 "expect", "body", "arrived", "headers", "client", "gone", "parse_charge")

    def __init__(self, method: str, target: str, body: bytes = b"", keep_alive: bool = True) -> None:
        self.method = method
        self.target = target
        self.path = request_path(target)
        self.keep_alive = keep_alive
        self.body = body
        self.head_size = 0
        self.body_size = len(body)
        self.chunked: list | None = None  # [scan position, data bytes, (start, end) of each chunk's data]
        self.expect = False  # `Expect: 100-continue` still to answer
        self.arrived = time.monotonic()
        self.headers: dict[bytes, bytes] = {}  # lower-case names
        self.client = ""  # the peer's address
        self.gone = False
        self.parse_charge = 0

    def header(self, name: str) -> str:
        """A header's value (latin-1), "" when absent."""
        return self.headers.get(name.lower().encode("latin-1"), b"").decode("latin-1")

    @property
    def has_body(self) -> bool:
        return self.chunked is not None or self.body_size > 0

    @classmethod
    def parse(cls, data: bytes, max_body: int) -> Request:
        """A request from its head (`data`, without the blank line); Refused if it is
        malformed or declares a body over `max_body`."""
        lines = data.split(b"\r\n")
        if len(lines[0]) > MAX_LINE:
            raise Refused(414, "request line too long")
        if bare_line_ends(data):
            raise Refused(400, "a bare CR or LF in the request head")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[0] or not parts[1]:
            raise Refused(400, "malformed request line")
        method, target, version = parts
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise Refused(400, "malformed header line")
            name, value = name.lower(), value.strip()
            if name in headers and name in (b"content-length", b"transfer-encoding", b"host"):
                raise Refused(400, f"repeated {name.decode('latin-1')} header")
            headers[name] = value
        request = cls(method.decode("latin-1"), target.decode("latin-1"))
        request.head_size = len(data) + 4
        request.headers = headers
        connection = headers.get(b"connection", b"").lower()
        http11 = version == b"HTTP/1.1"
        request.keep_alive = b"close" not in connection if http11 else b"keep-alive" in connection
        coding = headers.get(b"transfer-encoding")
        length = headers.get(b"content-length")
        if coding is not None:
            if coding.lower() != b"chunked" or not http11:
                raise Refused(400, "unsupported transfer coding (only chunked, on HTTP/1.1)")
            if length is not None:
                raise Refused(400, "both Content-Length and Transfer-Encoding")
            request.chunked = [request.head_size, 0, []]
        elif length is None:
            if request.method == "POST":
                raise Refused(411, "a Content-Length header is required")
            length = b"0"
        if length is not None:
            if not length.isdigit():
                raise Refused(400, "malformed Content-Length")
            request.body_size = int(length)
            if request.body_size > max_body:
                raise Refused(413, f"request body exceeds the limit of {max_body} bytes")
        request.expect = http11 and headers.get(b"expect", b"").lower() == b"100-continue"
        return request

    def end(self, buf: bytearray, max_body: int) -> int:
        """Where this request ends in `buf` (which starts with its head) once its body has
        fully arrived, else -1; a chunked body is scanned from where the last call
        stopped. Refused for a broken chunked framing or a body over `max_body`."""
        if self.chunked is None:
            size = self.head_size + self.body_size
            return size if len(buf) >= size else -1
        pos, _, spans = self.chunked
        while True:
            self.chunked[0] = pos
            line_end = buf.find(b"\r\n", pos, pos + 1024)
            if line_end < 0:
                if len(buf) - pos < 1024:
                    return -1
                raise Refused(400, "malformed chunked request body")
            line = _CHUNK_LINE.fullmatch(buf, pos, line_end)
            if line is None:  # not hex, past 64 bits, a malformed extension, a bare CR or LF
                raise Refused(400, "malformed chunked request body")
            size = int(line.group(1), 16)
            if size == 0:  # the last chunk; trailers (if any) end with an empty line
                trailer_end = buf.find(b"\r\n\r\n", line_end, line_end + MAX_HEAD_BYTES)
                if trailer_end < 0:
                    if len(buf) - line_end < MAX_HEAD_BYTES:
                        return -1
                    raise Refused(400, "malformed chunked request body")
                if bare_line_ends(buf[line_end:trailer_end + 4]):
                    raise Refused(400, "malformed chunked request body")
                return trailer_end + 4
            data_end = line_end + 2 + size
            if self.chunked[1] + size > max_body:
                raise Refused(413, f"request body exceeds the limit of {max_body} bytes")
            if len(buf) < data_end + 2:
                return -1
            if buf[data_end:data_end + 2] != b"\r\n":
                raise Refused(400, "malformed chunked request body")
            spans.append((line_end + 2, data_end))
            self.chunked[1] += size
            pos = data_end + 2

    def take_body(self, buf: bytearray, end: int) -> None:
        if self.chunked is None:
            self.body = bytes(buf[self.head_size:end])
        else:
            self.body = b"".join(buf[s:e] for s, e in self.chunked[2])
            self.body_size, self.chunked = len(self.body), None


class Routes:
    """Fixed routes: `get` (GET and HEAD, no argument) and `post` (the body) by path, and
    one `dispatch` offered every request the tables do not answer. `place`: the `quick`
    GET routes on the loop, everything else on a thread of lane `pool`. Only `post`
    routes and what `dispatch.takes_body` names take a body: any other request that
    declares one is refused before its body is read (`refuse_body`)."""

    def __init__(self, get: dict[str, Route] | None = None, post: dict[str, PostRoute] | None = None,
                 dispatch: Dispatch | None = None, quick: frozenset[str] = QUICK_ROUTES,
                 pool: Hashable = lane.EXPENSIVE) -> None:
        self.get = dict(get or {})
        self.post = dict(post or {})
        self.dispatch = dispatch
        self.quick = quick
        self.pool = pool

    def place(self, request: Request) -> Hashable:
        return LOOP if request.path in self.quick and request.method in ("GET", "HEAD") else self.pool

    def takes_body(self, request: Request) -> bool:
        if request.method == "POST" and request.path in self.post:
            return True
        takes = getattr(self.dispatch, "takes_body", None)
        return takes is not None and takes(request.method, request.path)

    def refuse_body(self, request: Request) -> Refused | None:
        """Why a request that declares a body is refused before it is read, or None when
        its route takes one (health and metrics take none: issue #35)."""
        if self.takes_body(request):
            return None
        owns = getattr(self.dispatch, "owns", None)
        if request.path in self.get or request.path in self.post or (owns is not None and owns(request.path)):
            if request.method in ("GET", "HEAD") and request.path not in self.post:
                return Refused(413, f"{request.path} takes no request body")
            return Refused(405, "method not allowed")
        return Refused(404, "not found")

    def __call__(self, request: Request) -> Reply:
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
        if path in self.get or path in self.post:  # a path that exists with another method
            return 405, JSON, error_body("method not allowed"), {}
        return 404, JSON, error_body("not found"), {}


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


_PHRASES = {s.value: s.phrase for s in HTTPStatus}
_date = [0, ""]  # (second, the Date header's value) cached for one second


def http_date() -> str:
    now = int(time.time())
    if _date[0] != now:
        _date[:] = [now, formatdate(now, usegmt=True)]
    return _date[1]


def response(code: int, kind: str, body: bytes, keep_alive: bool, head_only: bool = False,
             extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    head = (f"HTTP/1.1 {code} {_PHRASES.get(code, '')}\r\nServer: extender\r\nDate: {http_date()}\r\n"
            f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n")
    head += "".join(f"{name}: {value}\r\n" for name, value in extra)
    head = (head + "\r\n").encode("latin-1")
    return head if head_only else head + body


def error_body(message: str) -> bytes:
    import orjson

    return orjson.dumps({"error": message})


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


class Listener:
    """`app` (a `Routes`, or any callable Request -> Reply with `place`, `takes_body` and
    `refuse_body` methods) served on `address` (HOST:PORT, bound on construction, so
    errors surface there) or on the listening `sockets` given; `start` (a thread of its
    own) or `serve` (this thread), `stop`. `pools`: lane -> threads; a request placed in
    a lane without a pool is answered on the loop. `budget`: this listener's in-flight
    bytes (default: a small one of its own, `SIDE_LIMIT`). `client_check`: called with
    a TLS connection once its handshake is done, returns why its client may not be
    served ("": it may; `extender.server.tls.ClientPolicy`)."""

    def __init__(self, address: str | None = None, routes: dict[str, Route] | None = None, *,
                 post_routes: dict[str, PostRoute] | None = None, dispatch: Dispatch | None = None,
                 app: Routes | None = None, sockets: list | None = None,
                 pools: dict[Hashable, int] | None = None, max_body_bytes: int = 1 << 20,
                 timeout: float = 5.0, idle_timeout: float = 60.0, max_connections: int = 1024,
                 max_per_client: int = 128, threads: int = 2, ssl_context: SSLContexts = None,
                 name: str = "metrics-listener", quick: frozenset[str] = QUICK_ROUTES,
                 budget: BodyBudget | None = None, min_send_rate: float = MIN_SEND_RATE,
                 client_check: Callable[[ssl.SSLSocket], str] | None = None) -> None:
        self.app = app if app is not None else Routes(routes, post_routes, dispatch, quick)
        self.budget = budget if budget is not None else BodyBudget(SIDE_LIMIT, name=name)
        self.min_send_rate = min_send_rate
        self.client_check = client_check
        self.pool_sizes = dict(pools) if pools is not None else {lane.EXPENSIVE: threads}
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
        self.done: deque[tuple[Conn, Reply, Request]] = deque()  # answers from pool threads
        self.ready: deque[Conn] = deque()  # connections with buffered requests to answer
        self.accepting = False
        self.draining = False  # no more accepts (a worker shutting down)
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.pools: dict[Hashable, futures.ThreadPoolExecutor] = {}
        self.selector: selectors.BaseSelector | None = None

    @property
    def port(self) -> int:
        return self.socks[0].getsockname()[1]

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
        self.pools = {where: futures.ThreadPoolExecutor(size, thread_name_prefix=f"{self.name}-{where}")
                      for where, size in self.pool_sizes.items()}

    def stop(self) -> None:
        self.stopping = True
        if self.thread is not None:
            self._wake()
            self.thread.join(timeout=5)
        for pool in self.pools.values():
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
        swept = time.monotonic()
        while not self.stopping:
            try:
                for key, mask in self.selector.select(0 if self.ready else SWEEP_INTERVAL):
                    key.data(mask)
                for _ in range(len(self.ready)):
                    conn = self.ready.popleft()
                    if id(conn) in self.conns and conn.state == READING:
                        self._serve_buffered(conn)
                now = time.monotonic()
                if now - swept >= SWEEP_INTERVAL:
                    swept = now
                    self._sweep(now)
                    if tick is not None and not tick():
                        return
            except Exception:  # the loop must never die: log, and go on
                log.exception("listener loop error", extra={"listener": self.name})

    def busy(self) -> bool:
        """Whether a request is being answered or its answer written."""
        return any(c.state in (ANSWERING, WRITING) for c in self.conns.values())

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
        for _ in range(64):  # then the others' turn
            try:
                sock, address = listening.accept()
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
            client = str(address[0]) if isinstance(address, tuple) else "local"
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

    def _charge(self, conn: Conn, total: int) -> bool:
        """Charge `conn` for holding `total` bytes; when the budget is full, first make
        room: shed (503) incomplete requests that already hold more than `conn`'s whole
        request will (a probe's head, a body's declared size), those of the client
        holding the most bytes first, the oldest first; never one being answered. So no
        client's stalled bodies keep another client's smaller requests out."""
        if self.budget.charge(conn, total):
            return True
        need = total - conn.charged - self.budget.available(total)
        whole = self._declared(conn, total)
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

    def _declared(self, conn: Conn, total: int) -> int:
        """The bytes `conn`'s request will hold once whole: its head and declared body
        (`total` while the head is incomplete; `max_body_bytes` for a chunked body)."""
        head_end = conn.inbuf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
        if head_end < 0:
            return total
        head = bytes(conn.inbuf[:head_end]).lower()
        if b"\r\ntransfer-encoding:" in head:
            return max(total, self.max_body)
        length = _CONTENT_LENGTH.search(head)
        return max(total, head_end + 4 + (int(length.group(1)) if length else 0))

    def _serve_buffered(self, conn: Conn) -> bool:
        """Answer the requests that have fully arrived on `conn`, up to `BURST` of them
        (then it waits for its next turn in `ready`); True if the connection no longer
        reads for now (answering, writing, closing or waiting its turn)."""
        for _ in range(BURST):
            try:
                request = self._next_request(conn)
            except Refused as exc:
                self._refuse(conn, exc.code, str(exc), exc.headers)
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
            except lane.Elsewhere as moved:  # needs a costlier lane: nothing sent yet
                self._hand_on(conn, request, moved.lane)
                return True
            if not self._send(conn, self._encode(request, reply)):
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
            end = conn.inbuf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
            if end < 0:
                if len(conn.inbuf) >= MAX_HEAD_BYTES:
                    line = conn.inbuf.find(b"\r\n", 0, MAX_LINE + 2)
                    raise Refused(414 if line < 0 else 431, "request line too long" if line < 0
                                  else "request head too large")
                return None
            request = conn.request = Request.parse(bytes(conn.inbuf[:end]), self.max_body)
            request.arrived, request.client = conn.since, conn.client
            if conn.forbidden:
                raise Refused(403, f"client certificate not allowed: {conn.forbidden}")
            if request.has_body and (refusal := self.app.refuse_body(request)) is not None:
                raise refusal
        end = request.end(conn.inbuf, self.max_body)
        if end < 0:
            if request.expect:  # `Expect: 100-continue`: ask for the body
                request.expect = False
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
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

    def _call(self, request: Request, where: Hashable) -> Reply:
        """The app's reply, in lane `where` (lane.Elsewhere: it needs a costlier one; a
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
        try:
            self.pools[where].submit(self._answer, conn, request, where)
        except KeyError:  # no such lane here: a bug in `place`, answered as one
            self._send(conn, self._encode(request, (500, JSON, error_body("internal error"), {})))
        except RuntimeError:  # shutting down
            self._close(conn)

    def _answer(self, conn: Conn, request: Request, where: Hashable) -> None:
        """On a pool thread: the app's reply, handed back to the loop; a request that
        needs a costlier lane moves on, unanswered. One whose client has gone still
        starts (a half-closed client may be reading: what is cheap is answered), and its
        costly work stops at the first deadline check (`deadline.ClientGone`)."""
        try:
            reply = self._call(request, where)
        except lane.Elsewhere as moved:
            try:
                self.pools[moved.lane].submit(self._answer, conn, request, moved.lane)
                return
            except (KeyError, RuntimeError):  # no such lane here, or shutting down
                reply = 500, JSON, error_body("internal error"), {}
        self.done.append((conn, reply, request))
        self._wake()

    def _encode(self, request: Request, reply: Reply) -> tuple[bytes, bool]:
        code, kind, payload, headers = reply
        keep = request.keep_alive and headers.get("Connection") != "close"
        extra = tuple((k, v) for k, v in headers.items() if k != "Connection")
        return response(code, kind, payload, keep, head_only=request.method == "HEAD", extra=extra), keep

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
            if request.gone:  # answered if the client still reads (a half-close), then closed
                conn.close_after = True
            if self._send(conn, self._encode(request, reply)) and conn.inbuf:
                self._serve_buffered(conn)

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
        if not self.per_client[conn.client]:
            del self.per_client[conn.client]
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
