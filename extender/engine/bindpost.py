"""The binding's API call, lean: `POST .../pods/{name}/binding` over kept-alive connections.

Every pod kube-scheduler binds through us is one POST of a small `v1.Binding`. Through the
generic `kubernetes` client that call builds its request, headers and URL anew, goes
through urllib3's pool and retry machinery and http.client's response parser: about a
millisecond of CPU a pod, a large share of what the extender spends on it. Here the
request is formatted once per pod from a pre-built template, sent on a connection kept
from an earlier binding (one per binding in flight, the most recently used first, so a
steady stream of binds reuses one or two), and the answer read only as far as the binding
needs: the status line, the headers that frame the body (Content-Length, chunked,
Connection: close) and the body (the refusal's text).

It takes everything from the live source's `kubernetes` Configuration, as the generic
client would: the server's scheme, host, port and path prefix, the CA (file or data),
`verify_ssl`, the client certificate, `assert_hostname`, `tls_server_name` (SNI, and the
name the certificate must match), the socket options (TCP keep-alive) and the
credentials, read from `auth_settings()` on every call: that runs the configuration's
`refresh_api_key_hook`, which rotates in-cluster ServiceAccount tokens and refreshes
exec/OIDC credentials. A configuration it cannot follow exactly (a proxy for the host, a
credential that is not a header, an `assert_hostname` naming another host) is the generic
client's (`binding.binder_for` logs why).

The binder over it (`extender.engine.binding.LeanBinder`) classifies outcomes as the
generic client's binder does: 200/201 bound; 409 or 5xx unknown (settled by a GET); any
other status refused; a connection never made (`NotConnected`: refused, not made in
time, the TLS handshake failed) not applied; one lost or timed out after the request
went out (`Lost`, TimeoutError) unknown. A kept connection the server closed while idle is
found before it is used (readable at once: its end of stream is waiting), so an idle
timeout on the server's side never turns a healthy binding into an unknown one.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

IDLE_KEPT = 256  # idle connections kept at most (one per binding in flight: `BINDING_THREADS`)
READ_SIZE = 65536


class Unsupported(Exception):
    """The configuration asks for something this poster does not do exactly."""


class Answer:
    """What the server said: status, reason and body."""

    __slots__ = ("status", "reason", "body")

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        self.status, self.reason, self.body = status, reason, body


class NotConnected(OSError):
    """No connection was made (refused, unreachable, not in time, TLS failed): nothing
    was sent."""


class Lost(OSError):
    """The request went out (or may have) and no complete answer came back."""


class Poster:
    """POSTs bodies to paths of one API server on kept-alive connections (module docstring)."""

    def __init__(self, configuration: Any, default_headers: dict[str, str] | None = None) -> None:
        self.configuration = configuration
        url = urlsplit(configuration.host)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise Unsupported(f"server URL {configuration.host!r}")
        _no_proxy_for(configuration)
        self.tls = url.scheme == "https"
        self.address = (url.hostname, url.port or (443 if self.tls else 80))
        self.prefix = url.path.rstrip("/")
        self.context = _tls_context(configuration) if self.tls else None
        self.server_hostname = getattr(configuration, "tls_server_name", None) or url.hostname
        self.socket_options = getattr(configuration, "socket_options", None) or [
            (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        headers = {"Host": url.netloc.rpartition("@")[2], "Accept": "application/json",
                   "Content-Type": "application/json", **(default_headers or {})}
        for key, value in headers.items():
            if not _header_safe(f"{key}{value}"):
                raise Unsupported(f"header {key!r} has a line break or a character outside latin-1")
        self.headers = "".join(f"{key}: {value}\r\n" for key, value in headers.items())
        self.credentials()  # fails now, not on the first binding, if they are not headers
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def credentials(self) -> str:
        """The credential headers, read now (the refresh hook runs here)."""
        lines = ""
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") != "header":
                raise Unsupported(f"a credential sent in the {setting.get('in')} (not a header)")
            value = setting.get("value")
            if value:
                if not _header_safe(f"{setting['key']}{value}"):
                    raise Unsupported("a credential header has a line break or a character outside latin-1")
                lines += f"{setting['key']}: {value}\r\n"
        return lines

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def post(self, path: str, body: bytes, timeout: float) -> Answer:
        """POST `body` to `path` within `timeout` seconds. Raises NotConnected (nothing
        sent), Lost (sent, no complete answer; socket.timeout among them) or
        Unsupported (credentials no longer headers)."""
        deadline = time.monotonic() + timeout
        try:
            credentials = self.credentials()
        except Unsupported:
            raise
        except Exception as exc:  # noqa: BLE001 - the refresh hook failed: nothing was sent
            raise NotConnected(f"reading the credentials: {why(exc)}") from None
        request = (f"POST {self.prefix}{path} HTTP/1.1\r\n{self.headers}{credentials}"
                   f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body
        connection = self._take() or self._connect(deadline)
        try:
            connection.send(request, deadline)
            answer, keep = connection.answer(deadline)
        except BaseException:
            connection.close()
            raise
        if keep:
            self._give(connection)
        else:
            connection.close()
        return answer

    def _take(self) -> _Connection | None:
        """The most recently used idle connection that is still open."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()

    def _give(self, connection: _Connection) -> None:
        with self._lock:
            if len(self._idle) < IDLE_KEPT:
                self._idle.append(connection)
                return
        connection.close()

    def _connect(self, deadline: float) -> _Connection:
        try:
            sock = socket.create_connection(self.address, timeout=max(deadline - time.monotonic(), 0.001))
        except OSError as exc:
            raise NotConnected(f"cannot connect to {self.address[0]}:{self.address[1]}: {why(exc)}") from None
        try:
            for option in self.socket_options:
                sock.setsockopt(*option)
            if self.context is not None:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock = self.context.wrap_socket(sock, server_hostname=self.server_hostname)
        except OSError as exc:
            sock.close()
            raise NotConnected(f"TLS with {self.address[0]}:{self.address[1]} failed: {why(exc)}") from None
        return _Connection(sock)


class _Connection:
    """One kept-alive socket to the API server."""

    __slots__ = ("sock", "poller")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)

    def usable(self) -> bool:
        """Idle and open: nothing to read (a closed one has its end of stream waiting;
        an answer nobody asked for makes it unusable too), as urllib3 checks."""
        try:
            pending = self.sock.pending() if isinstance(self.sock, ssl.SSLSocket) else 0
            return not pending and not self.poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes, deadline: float) -> None:
        self.sock.settimeout(_left(deadline))
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise Lost(f"sending the request: {why(exc)}") from None

    def answer(self, deadline: float) -> tuple[Answer, bool]:
        """The response, and whether the connection can carry another request."""
        reader = _Reader(self.sock, deadline)
        while True:
            head = reader.until(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise Lost(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
            status = int(code)
            if status >= 200 or status == 101:
                break  # 1xx interim answers (100 Continue) precede the real one
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        keep = version != "HTTP/1.0" and "close" not in fields.get("connection", "").lower()
        if status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            body = reader.chunked()
        elif "content-length" in fields:
            length = fields["content-length"]
            if not length.isdigit():
                raise Lost(f"bad Content-Length {length[:40]!r}")
            body = reader.exactly(int(length))
        else:
            body, keep = reader.to_end(), False  # delimited by the end of the connection
        if reader.extra():
            keep = False  # bytes after the answer: out of step with the server
        return Answer(status, reason, body), keep


class _Reader:
    """Reads a response from a socket by the deadline (Lost: the server closed or did
    not answer in time)."""

    __slots__ = ("sock", "deadline", "buf", "pos")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline
        self.buf = bytearray()
        self.pos = 0

    def _fill(self, at_end_ok: bool = False) -> bool:
        self.sock.settimeout(_left(self.deadline))
        try:
            data = self.sock.recv(READ_SIZE)
        except TimeoutError:
            raise  # the binder's "no answer in time"
        except OSError as exc:
            raise Lost(f"reading the answer: {why(exc)}") from None
        if not data:
            if at_end_ok:
                return False
            raise Lost("the server closed the connection before a complete answer")
        self.buf += data
        return True

    def until(self, marker: bytes) -> bytes:
        while (end := self.buf.find(marker, self.pos)) < 0:
            self._fill()
        data = bytes(self.buf[self.pos:end])
        self.pos = end + len(marker)
        return data

    def exactly(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n:
            self._fill()
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data

    def chunked(self) -> bytes:
        parts = []
        while True:
            size_line = self.until(b"\r\n").split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise Lost(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while self.until(b"\r\n"):  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(self.exactly(size))
            if self.exactly(2) != b"\r\n":
                raise Lost("a chunk does not end with CRLF")

    def to_end(self) -> bytes:
        while self._fill(at_end_ok=True):
            pass
        data = bytes(self.buf[self.pos:])
        self.pos = len(self.buf)
        return data

    def extra(self) -> bool:
        return self.pos < len(self.buf)


def _header_safe(text: str) -> bool:
    """Sendable as a header line, as http.client sends one (latin-1, no line break)."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return "\r" not in text and "\n" not in text


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def why(exc: BaseException) -> str:
    """An exception's text, or its type's name when it has none (a bare timeout)."""
    return str(exc) or type(exc).__name__


def _no_proxy_for(configuration: Any) -> None:
    """Unsupported when the generic client would go through a proxy for this host."""
    proxy = getattr(configuration, "proxy", None)
    if not proxy:
        return
    try:
        from kubernetes.client.rest import should_bypass_proxies
    except ImportError:  # an older client: it sends everything through its proxy
        raise Unsupported(f"a proxy is configured ({proxy})") from None
    if not should_bypass_proxies(configuration.host, getattr(configuration, "no_proxy", None) or ""):
        raise Unsupported(f"a proxy is configured for the API server ({proxy})")


def _tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings urllib3 makes of the configuration (`kubernetes.client.rest`)."""
    assert_hostname = getattr(configuration, "assert_hostname", None)
    if assert_hostname not in (None, True, False):
        raise Unsupported(f"assert_hostname={assert_hostname!r} (a name other than the server's)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    if configuration.verify_ssl:
        context.check_hostname = assert_hostname is not False
        context.verify_mode = ssl.CERT_REQUIRED
        ca_file, ca_data = configuration.ssl_ca_cert, getattr(configuration, "ca_cert_data", None)
        if ca_file or ca_data:
            context.load_verify_locations(cafile=ca_file or None, cadata=ca_data or None)
        else:
            context.load_default_certs()
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context
