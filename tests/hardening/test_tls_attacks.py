"""Issue #35's fourth finding, client certificates and framing: `--client-ca-file`
accepted any certificate from that CA, any subject, even a CA certificate (which could
then call `/bind` under `--verbs-tls`); two TLS 1.2 CBC suites were offered; a bare LF
inside a chunk extension was accepted.

Now a CA certificate is never a client certificate, `--client-cert-allowed-names`
restricts the subjects served, TLS 1.2 offers AEAD suites only (TLS 1.3 too), and chunk
lines, trailers and heads are parsed strictly (a CR or LF outside a CRLF is a 400)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from validation.pki import serving_pki

from extender.config import ConfigError, build_config
from extender.features import FeatureGates
from extender.server.listener import Listener
from extender.server.tls import ClientPolicy, ReloadingContext, is_ca_certificate
from extender.server.webhook import webhook_listener
from perf.attacks import review_body

P = "scheduling-extender.io"


@pytest.fixture
def pki(tmp_path):
    return serving_pki(tmp_path)


def client_context(pki, cert: bytes, key: bytes, name: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki["ca_file"])
    (pki["dir"] / f"{name}.crt").write_bytes(cert)
    (pki["dir"] / f"{name}.key").write_bytes(key)
    ctx.load_cert_chain(str(pki["dir"] / f"{name}.crt"), str(pki["dir"] / f"{name}.key"))
    return ctx


def serve(pki, allowed: tuple[str, ...] = ()) -> Listener:
    tls = ReloadingContext(pki["cert"], pki["key"], pki["ca_file"])
    return webhook_listener("127.0.0.1:0", tls, P, FeatureGates(), client_check=ClientPolicy(allowed)).start()


def status(port: int, ctx: ssl.SSLContext) -> tuple[int, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("POST", "/validate", body=review_body(), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        body = response.read()
        return response.status, json.loads(body).get("error", "") if response.status != 200 else ""
    finally:
        conn.close()


def test_a_ca_certificate_is_never_a_client_certificate(pki):
    """The client CA itself, presented with its key, passes the handshake (it is
    trusted); an intermediate CA it signed does too. Neither is served."""
    listener = serve(pki)
    try:
        ca = pki["ca"]
        the_ca = client_context(pki, ca.pem, ca.key_pem, "the-ca")
        assert status(listener.port, the_ca) == (403, "client certificate not allowed: a CA certificate "
                                                      "(basicConstraints CA:TRUE) is not a client certificate")
        cert, key, _ = ca.issue("intermediate", server=False, ca=True)
        assert status(listener.port, client_context(pki, cert, key, "intermediate"))[0] == 403
        cert, key, _ = ca.issue("kube-apiserver", server=False)
        assert status(listener.port, client_context(pki, cert, key, "client")) == (200, "")
    finally:
        listener.stop()


def test_only_the_allowed_subjects_are_served(pki):
    listener = serve(pki, allowed=("kube-apiserver", "api.example.com", "spiffe://cluster.local/ns/kube-system/sa/x"))
    ca = pki["ca"]
    try:
        cases = [
            ("kube-apiserver", (), 200),  # the common name
            ("Kube-Apiserver", (), 403),  # common names compare exactly
            ("someone", (x509.DNSName("API.example.com"),), 200),  # DNS names without regard to case
            ("someone", (x509.UniformResourceIdentifier("spiffe://cluster.local/ns/kube-system/sa/x"),), 200),
            ("someone", (x509.DNSName("other.example.com"),), 403),
            ("someone", (), 403),
        ]
        for i, (common_name, names, expected) in enumerate(cases):
            cert, key, _ = ca.issue(common_name, server=False, names=names)
            got, message = status(listener.port, client_context(pki, cert, key, f"c{i}"))
            assert got == expected, (common_name, names, got, message)
            if expected == 403:
                assert "is not one of --client-cert-allowed-names" in message
    finally:
        listener.stop()


def test_the_allowed_names_setting_has_its_twins_and_needs_a_client_ca(tmp_path):
    assert build_config({"client_cert_allowed_names": "a, b", "client_ca_file": "ca.crt"}, env={}) \
        .client_cert_allowed_names == ("a", "b")
    env = {"EXTENDER_CLIENT_CERT_ALLOWED_NAMES": "kube-apiserver", "EXTENDER_CLIENT_CA_FILE": "ca.crt"}
    assert build_config({}, env=env).client_cert_allowed_names == ("kube-apiserver",)
    path = tmp_path / "c.yaml"
    path.write_text("clientCaFile: ca.crt\nclientCertAllowedNames: [x, y]\n")
    assert build_config({}, env={}, config_file=str(path)).client_cert_allowed_names == ("x", "y")
    with pytest.raises(ConfigError, match="--client-ca-file"):
        build_config({"client_cert_allowed_names": "a"}, env={})


def test_is_ca_certificate_reads_basic_constraints(pki):
    ca = pki["ca"]
    der = ca.cert.public_bytes(serialization.Encoding.DER)
    assert is_ca_certificate(der)
    leaf, _, _ = ca.issue("leaf", server=False)
    leaf_der = x509.load_pem_x509_certificate(leaf).public_bytes(serialization.Encoding.DER)
    assert not is_ca_certificate(leaf_der)
    assert is_ca_certificate(der[:40])  # unreadable: refused


def test_tls_1_2_offers_aead_suites_only(pki):
    listener = serve(pki)
    cert, key, _ = pki["ca"].issue("client", server=False)
    try:
        for suite in ("ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA",
                      "ECDHE-ECDSA-AES256-SHA"):
            ctx = client_context(pki, cert, key, "cbc")
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers(suite)
            with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", listener.port)) as raw:
                ctx.wrap_socket(raw, server_hostname="localhost")
        for suite in ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"):
            ctx = client_context(pki, cert, key, "aead")
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_ciphers(suite)
            assert status(listener.port, ctx) == (200, "")
        ctx = client_context(pki, cert, key, "tls13")
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        assert status(listener.port, ctx) == (200, "")
    finally:
        listener.stop()


@pytest.fixture
def plain():
    listener = Listener("127.0.0.1:0", post_routes={"/x": lambda body: (200, "application/json", body)}).start()
    yield listener.port
    listener.stop()


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


CHUNKED = b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("line", [
    b"2;ext\nX\r\n",  # a bare LF inside the extension (the smuggling vector)
    b"2;ext\rX\r\n", b"2;a=\"b\nc\"\r\n", b"2 ;\r\n", b"2;=v\r\n", b"2;a=b c\r\n", b" 2\r\n", b"2\n",
])
def test_a_malformed_chunk_line_is_a_400(plain, line):
    answer = exchange(plain, CHUNKED + line + b"{}\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]


@pytest.mark.parametrize("line", [b"2\r\n", b"2;ext\r\n", b"2;a=b\r\n", b"2 ; a = \"b;\\\"c\" ;d\r\n", b"2\t;x=y\r\n"])
def test_chunk_extensions_are_accepted_and_ignored(plain, line):
    answer = exchange(plain, CHUNKED + line + b"{}\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"{}"), answer[:200]


@pytest.mark.parametrize("request_bytes", [
    b"POST /x HTTP/1.1\r\nHost: x\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}",  # a bare LF in the head
    b"POST /x HTTP/1.1\r\nHost: x\rY\r\nContent-Length: 2\r\n\r\n{}",  # a bare CR in the head
    CHUNKED + b"2\r\n{}\r\n0\r\nTrailer: a\nb\r\n\r\n",  # a bare LF in a trailer
])
def test_a_bare_cr_or_lf_in_a_head_or_trailer_is_a_400(plain, request_bytes):
    answer = exchange(plain, request_bytes)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]
