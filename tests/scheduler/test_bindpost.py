"""The lean binding poster (`extender.engine.bindpost`): outcomes as the generic client's
binder classifies them, kept-alive connections, credentials read per call, and the
fallback to the generic client for what it does not do.

Against the API-server double (`testing.apiserver`) for the API's answers, and against a
scripted HTTP server (below) for what the double does not do: chunked answers, closing
idle connections, never answering, recording the headers."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable

import pytest

from extender.engine.binding import (
    ApiBinder,
    BindError,
    BindUnknown,
    LeanBinder,
    binder_for,
    name_problem,
)
from testing.apiserver import FakeApiServer
from testing.harness import pod
from testing.live import free_port

CREATED = (b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n'
           b'{"status":"ok"}\r\n')


def configuration(host: str, token: str = ""):
    from kubernetes import client

    config = client.Configuration()
    config.host = host
    if token:
        config.api_key = {"authorization": f"Bearer {token}"}
    return config


def lean(config) -> LeanBinder:
    from kubernetes import client

    return LeanBinder(client.ApiClient(config))


class Scripted:
    """A threaded HTTP/1.1 server on 127.0.0.1 answering each request with what
    `answer(request_head) -> (bytes to send, then: "keep" | "close" | "hang")` says;
    it records every request's head and counts the connections it accepted."""

    def __init__(self, answer: Callable[[bytes], tuple[bytes, str]], context: ssl.SSLContext | None = None):
        self.answer = answer
        self.context = context
        self.heads: list[bytes] = []
        self.accepted = 0
        self.closed = threading.Semaphore(0)  # released when the server closed a connection
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.context else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                self.heads.append(head)
                data, then = self.answer(head)
                conn.sendall(data)
                if then == "close":
                    return
                if then == "hang":
                    self.stopping.wait()
                    return
        except OSError:
            return
        finally:
            conn.close()
            self.closed.release()

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()


@pytest.fixture
def double(tmp_path):
    """The API-server double with pods w1..w3, and a lean binder on the live source's client."""
    from extender.state.live import LiveSource

    with FakeApiServer() as api:
        for i in (1, 2, 3):
            api.create("pods", pod(f"w{i}"))
        source = LiveSource.connect(str(api.write_kubeconfig(tmp_path / "kubeconfig")), False)
        binder = binder_for(source)
        yield api, binder
        binder.close()


def test_the_live_source_binds_through_the_lean_poster_on_one_kept_connection(double):
    api, binder = double
    assert isinstance(binder, LeanBinder)
    for i in (1, 2, 3):
        binder("default", f"w{i}", "", f"a{i}")
        assert api.get("pods", f"w{i}", "default")["spec"]["nodeName"] == f"a{i}"
    assert len(binder.poster._idle) == 1  # the three went out on one connection
    assert binder.lookup("default", "w2", "") == "a2"  # the settling read: the generic client


def test_api_refusals_and_failures_are_classified_as_the_generic_binder_does(double):
    api, binder = double
    binder("default", "w1", "", "a1")
    with pytest.raises(BindUnknown, match=r"409 Conflict: b'.*already assigned"):  # bound already
        binder("default", "w1", "", "a2")
    with pytest.raises(BindError, match=r"404 Not Found: b'.*not found") as missing:
        binder("default", "gone", "", "a1")
    assert missing.value.reached
    with pytest.raises(BindError, match=r"422 Unprocessable Entity: b'.*target.name: Required"):
        binder("default", "w2", "", "")
    api.faults.fail_requests, api.faults.fail_status, api.faults.fail_match = 1, 500, "/binding"
    with pytest.raises(BindUnknown, match="500 Internal Server Error"):
        binder("default", "w2", "", "a2")
    binder("default", "w2", "", "a2")  # the connection the 500 came on carries the next one
    assert api.get("pods", "w2", "default")["spec"]["nodeName"] == "a2"
    assert len(binder.poster._idle) == 1


@pytest.mark.parametrize("namespace, name", [
    ("default", ".."), ("default", "a/b"), ("default", "w1/../../nodes/x"), ("default", "W1"),
    ("default", "w1?dryRun=All"), ("default", ""), ("default", "a" * 254), ("..", "w1"), ("a.b", "w1"),
    ("Default", "w1"), ("n" * 64, "w1"), ("default", "w 1"), ("default", "w1\r\nX: y"),
])
def test_names_the_api_server_would_refuse_are_errors_without_a_request(double, namespace, name):
    api, binder = double
    seen = len(api.requests)
    with pytest.raises(BindError, match="invalid (namespace|pod name)"):
        binder(namespace, name, "", "a1")
    generic = ApiBinder(binder.generic.api.api_client)
    with pytest.raises(BindError, match="invalid (namespace|pod name)"):
        generic(namespace, name, "", "a1")
    generic.close()
    assert len(api.requests) == seen


def test_valid_names_pass():
    assert name_problem("kube-system", "web-0.cache.example") == ""
    assert name_problem("a" * 63, "b" * 253) == ""


def test_a_connection_the_server_closed_while_idle_is_not_reused():
    """The server closes every connection after its answer, without saying so: each
    binding finds the kept connection closed before using it, and binds on a new one."""
    server = Scripted(lambda head: (CREATED, "close"))
    binder = lean(configuration(server.url))
    try:
        for _ in range(3):
            binder("default", "w1", "u1", "a1")
            assert server.closed.acquire(timeout=30)  # the server has closed it, idle
        assert server.accepted == 3 and len(server.heads) == 3
    finally:
        binder.close()
        server.stop()


def test_connection_close_is_honoured():
    server = Scripted(lambda head: (CREATED.replace(b"Content-Length", b"Connection: close\r\nContent-Length"),
                                    "keep"))
    binder = lean(configuration(server.url))
    try:
        binder("default", "w1", "", "a1")
        assert binder.poster._idle == []
        binder("default", "w1", "", "a1")
        assert server.accepted == 2
    finally:
        binder.close()
        server.stop()


def test_chunked_and_close_delimited_answers():
    answers = [
        (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\n{\"a\":\r\n3\r\n1}\n\r\n0\r\nT: 1\r\n\r\n",
         "keep"),
        (b"HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"9\r\nforbidden\r\n6\r\n: nope\r\n0\r\n\r\n", "keep"),
        (b"HTTP/1.1 201 Created\r\n\r\n{}", "close"),  # no length: the body ends with the connection
    ]
    server = Scripted(lambda head: answers.pop(0))
    binder = lean(configuration(server.url))
    try:
        binder("default", "w1", "", "a1")
        with pytest.raises(BindError, match=r"403 Forbidden: b'forbidden: nope'"):
            binder("default", "w1", "", "a1")
        binder("default", "w1", "", "a1")
        assert server.accepted == 1  # the chunked answers kept the connection in step
        assert binder.poster._idle == []  # and the close-delimited one ended it
    finally:
        binder.close()
        server.stop()


def test_the_request_is_a_binding_with_the_credentials_of_each_call():
    """The configuration's refresh hook runs on every call (in-cluster token rotation):
    the next binding carries the new token."""
    server = Scripted(lambda head: (CREATED, "keep"))
    config = configuration(server.url + "/prefix/", token="first")
    tokens = iter(["second", "third"])
    config.refresh_api_key_hook = None
    binder = lean(config)
    try:
        binder("ns1", "w1", "u1", "a1")
        config.refresh_api_key_hook = lambda c: c.api_key.update(authorization=f"Bearer {next(tokens)}")
        binder("ns1", "w1", "u1", "a1")
        binder("ns1", "w1", "u1", "a1")
        heads = [head.decode().split("\r\n") for head in server.heads]
        assert [h[0] for h in heads] == ["POST /prefix/api/v1/namespaces/ns1/pods/w1/binding HTTP/1.1"] * 3
        auth = [next(line for line in h if line.lower().startswith("authorization:")) for h in heads]
        assert auth == ["authorization: Bearer first", "authorization: Bearer second", "authorization: Bearer third"]
        assert f"Host: 127.0.0.1:{server.port}" in heads[0] and "Content-Type: application/json" in heads[0]
        assert server.accepted == 1
    finally:
        binder.close()
        server.stop()


def test_the_body_is_the_v1_binding():
    import orjson

    bodies = []
    server = Scripted(lambda head: (CREATED, "keep"))
    binder = lean(configuration(server.url))
    original = binder.poster.post

    def post(path, body, timeout):
        bodies.append(orjson.loads(body))
        return original(path, body, timeout)

    binder.poster.post = post
    try:
        binder("default", "w1", "u1", "a1")
        binder("default", "w2", "", "a2")
    finally:
        binder.close()
        server.stop()
    from extender.engine.binding import binding_body
    assert bodies == [binding_body("default", "w1", "u1", "a1"), binding_body("default", "w2", "", "a2")]


def test_connection_refused_was_not_applied():
    binder = lean(configuration(f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(BindError, match="cannot connect") as refused:
        binder("default", "w1", "", "a1")
    assert refused.value.reached is False
    binder.close()


def test_a_connection_not_made_in_time_was_not_applied():
    """A listener whose accept queue is full drops new connections' SYNs: the connect
    times out, nothing was sent."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fill = []
    for _ in range(3):  # more than the queue holds (Linux: backlog + 1)
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(sock)
    binder = lean(configuration(f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(BindError, match="cannot connect .*timed out") as late:
            binder("default", "w1", "", "a1", 0.3)
        assert late.value.reached is False
    finally:
        binder.close()
        for sock in fill:
            sock.close()
        listener.close()


def test_a_server_that_never_answers_leaves_the_outcome_unknown():
    server = Scripted(lambda head: (b"", "hang"))
    binder = lean(configuration(server.url))
    try:
        with pytest.raises(BindUnknown, match="no answer from the API server within 0.30 s"):
            binder("default", "w1", "", "a1", 0.3)
        assert len(server.heads) == 1  # it was sent
        assert binder.poster._idle == []
    finally:
        server.stop()
        binder.close()


def test_a_connection_lost_after_sending_leaves_the_outcome_unknown():
    server = Scripted(lambda head: (b"HTTP/1.1 201 Cre", "close"))
    binder = lean(configuration(server.url))
    try:
        with pytest.raises(BindUnknown, match="closed the connection before a complete answer"):
            binder("default", "w1", "", "a1")
    finally:
        server.stop()
        binder.close()


def test_tls_with_the_configured_ca_and_the_server_name(tmp_path):
    from testing.controlplane import Pki

    pki = Pki(tmp_path / "pki")
    cert, key = pki.issue("server", "apiserver", hosts=["127.0.0.1", "kubernetes.default.svc"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = Scripted(lambda head: (CREATED, "keep"), context)
    try:
        config = configuration(server.url)
        config.ssl_ca_cert = str(pki.ca_file)
        binder = lean(config)
        binder("default", "w1", "", "a1")
        binder("default", "w1", "", "a1")
        assert server.accepted == 1
        binder.close()
        config.tls_server_name = "kubernetes.default.svc"  # SNI and the name to match
        binder = lean(config)
        binder("default", "w1", "", "a1")
        binder.close()
        config.tls_server_name = "elsewhere.example"  # not in the certificate
        binder = lean(config)
        with pytest.raises(BindError, match="TLS .* failed") as mismatch:
            binder("default", "w1", "", "a1")
        assert mismatch.value.reached is False
        binder.close()
        other = Pki(tmp_path / "other")  # a CA that did not sign the server's certificate
        config = configuration(server.url)
        config.ssl_ca_cert = str(other.ca_file)
        binder = lean(config)
        with pytest.raises(BindError, match="CERTIFICATE_VERIFY_FAILED"):
            binder("default", "w1", "", "a1")
        binder.close()
        config.verify_ssl = False
        binder = lean(config)
        binder("default", "w1", "", "a1")
        binder.close()
    finally:
        server.stop()


def test_a_proxy_for_the_api_server_falls_back_to_the_generic_client(caplog):
    from kubernetes import client

    from extender.state import ClusterSource

    class Source(ClusterSource):
        def __init__(self, config) -> None:
            self.api_client = client.ApiClient(config)

        def snapshot(self):
            raise NotImplementedError

    config = configuration("http://127.0.0.1:6443")
    config.proxy = "http://proxy.example:3128"
    with caplog.at_level("WARNING", logger="extender.bind"):
        binder = binder_for(Source(config))
    assert type(binder) is ApiBinder
    assert [r.why for r in caplog.records] == ["a proxy is configured for the API server (http://proxy.example:3128)"]
    config.no_proxy = "127.0.0.1"  # the proxy is not for this host
    assert isinstance(binder_for(Source(config)), LeanBinder)


@pytest.mark.parametrize("setting, why", [
    ({"in": "cookie", "key": "session", "value": "x"}, "not a header"),
    ({"in": "header", "key": "authorization", "value": "Bearer a\r\nX-Injected: 1"}, "line break"),
    ({"in": "header", "key": "authorization", "value": "Bearer \u20ac"}, "outside latin-1"),
])
def test_a_credential_that_is_not_a_plain_header_falls_back(caplog, setting, why):
    config = configuration("http://127.0.0.1:6443")
    config.auth_settings = lambda: {"Credential": setting}
    from kubernetes import client

    from extender.state import ClusterSource

    class Source(ClusterSource):
        def __init__(self) -> None:
            self.api_client = client.ApiClient(config)

        def snapshot(self):
            raise NotImplementedError

    with caplog.at_level("WARNING", logger="extender.bind"):
        assert type(binder_for(Source())) is ApiBinder
    assert why in caplog.records[0].why
