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
    """The answer to `data` (which says `Connection: close`, or is refused). The client
    does not half-close: a queued request whose client has sent its FIN is not started."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


CHUNKED = b"POST /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"


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


def _signed(issuer_name, issuer_key, subject: x509.Name, ca: bool = False):
    """A client certificate (or an intermediate CA's, `ca`) of `subject`, signed by
    `issuer_key`: (certificate, its key)."""
    import datetime

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()), key


def _pem(cert, key) -> tuple[bytes, bytes]:
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_the_common_name_is_the_last_one_as_kube_apiserver_reads_it(pki):
    """Go's `pkix.Name.CommonName` (what kube-apiserver's x509 authenticator makes the
    user) is the subject's last CN: a certificate whose first CN is allowed but whose
    last is not names someone else, and is refused; the reverse is served."""
    from cryptography.x509.oid import NameOID

    listener = serve(pki, allowed=("kube-apiserver",))
    ca = pki["ca"]
    try:
        for first, last, expected in (("kube-apiserver", "intruder", 403), ("intruder", "kube-apiserver", 200)):
            subject = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, first)]),
                                 x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, last)])])
            cert, key = _signed(ca.cert.subject, ca.key, subject)
            got, message = status(listener.port, client_context(pki, *_pem(cert, key), f"cn-{last}"))
            assert got == expected, (first, last, message)
            if expected == 403:
                assert "subject intruder is not one of --client-cert-allowed-names" in message
    finally:
        listener.stop()


def test_a_leaf_of_an_intermediate_ca_is_refused_unless_its_issuer_is_in_the_ca_file(pki):
    """The handshake verifies a chain through an intermediate the client sends; the
    docs promise a certificate signed by the client CA, so its leaves are refused (403)
    until the intermediate itself is in --client-ca-file."""
    from cryptography.x509.oid import NameOID

    ca = pki["ca"]
    intermediate, intermediate_key = _signed(
        ca.cert.subject, ca.key, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "intermediate CA")]), ca=True)
    leaf, leaf_key = _signed(intermediate.subject, intermediate_key,
                             x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
    leaf_pem, key_pem = _pem(leaf, leaf_key)
    chain = leaf_pem + intermediate.public_bytes(serialization.Encoding.PEM)
    listener = serve(pki)
    try:
        got, message = status(listener.port, client_context(pki, chain, key_pem, "chained"))
        assert (got, message) == (403, "client certificate not allowed: not issued by a certificate of "
                                       "--client-ca-file (an intermediate CA's leaf)")
    finally:
        listener.stop()
    with open(pki["ca_file"], "ab") as f:  # the intermediate pinned too
        f.write(intermediate.public_bytes(serialization.Encoding.PEM))
    listener = serve(pki)
    try:
        assert status(listener.port, client_context(pki, chain, key_pem, "chained2")) == (200, "")
    finally:
        listener.stop()
