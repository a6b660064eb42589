"""Server TLS whose certificate follows the files on disk (cert-manager rotates them).

`ReloadingContext.current()` is called for every new connection: at most once a second
it compares the files' (mtime, size, inode); when they changed it builds a fresh
`SSLContext` and uses it for new connections (open ones keep theirs). A half-written
pair (the key file replaced before the certificate) fails to load, and a certificate
outside its validity period (expired, or not valid yet: clients would refuse it) is
refused: either way the previous context stays in use, the refusal is logged and
counted (`extender_tls_certificate_loads_total{result}`), and the next check tries
again (a not-yet-valid certificate is taken once its time comes).

Every context speaks TLS 1.2 with AEAD suites only (ECDHE with AES-GCM or
ChaCha20-Poly1305) and TLS 1.3. With a client CA, `ClientPolicy` decides, once a
handshake has verified a client's certificate, whether that client is served: never
with a CA certificate, and only with an allowed subject when `--client-cert-allowed-names`
is set.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

from extender import metrics

log = logging.getLogger("extender.tls")

CHECK_INTERVAL = 1.0
# TLS 1.2 suites: forward-secret key exchange and AEAD only (no CBC, no DHE); TLS 1.3's
# own suites are all AEAD and are not affected by this list
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


class CertificateNotValid(ValueError):
    """The certificate is outside its validity period; `reason` is the metric's result."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def validity(cert_file: str) -> tuple[float, float]:
    """(notBefore, notAfter) of the first certificate in a PEM file, as Unix times.
    `_test_decode_cert` is the standard library's own PEM reader (the ssl module has no
    public one; the `cryptography` package is not a runtime dependency)."""
    info = ssl._ssl._test_decode_cert(cert_file)  # type: ignore[attr-defined]
    return ssl.cert_time_to_seconds(info["notBefore"]), ssl.cert_time_to_seconds(info["notAfter"])


def check_validity(cert_file: str, now: float | None = None) -> float:
    """The certificate's notAfter; CertificateNotValid if `now` is outside its period."""
    not_before, not_after = validity(cert_file)
    now = time.time() if now is None else now
    if now > not_after:
        raise CertificateNotValid(f"certificate expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(not_after))}",
                                  "refused_expired")
    if now < not_before:
        raise CertificateNotValid(f"certificate not valid before "
                                  f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(not_before))}",
                                  "refused_not_yet_valid")
    return not_after


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def build_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """A TLS >= 1.2 server context (AEAD suites only); with a client CA, client
    certificates are required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS)
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ReloadingContext:
    def __init__(self, cert_file: str, key_file: str, client_ca_file: str = "",
                 check_interval: float = CHECK_INTERVAL) -> None:
        self.files = tuple(f for f in (cert_file, key_file, client_ca_file) if f)
        self._args = (cert_file, key_file, client_ca_file)
        self._interval = check_interval
        self._lock = threading.Lock()
        self._stamps = self._read_stamps()
        self._context = build_context(*self._args)  # fails fast at start-up
        self._checked = time.monotonic()
        self._refused: tuple | None = None  # (stamps, reason) last logged as refused
        self.reloads = 0
        try:  # no previous certificate to keep: served, but said loudly
            self._loaded(check_validity(cert_file))
        except (CertificateNotValid, ValueError, OSError, ssl.SSLError) as exc:
            self._refuse(getattr(exc, "reason", "refused_unreadable"), exc, self._stamps)

    def _read_stamps(self) -> tuple:
        return tuple(_stamp(f) for f in self.files)

    def current(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked < self._interval:
            return self._context
        with self._lock:
            if now - self._checked < self._interval:
                return self._context
            self._checked = now
            stamps = self._read_stamps()
            if stamps != self._stamps:
                try:
                    context = build_context(*self._args)
                    not_after = check_validity(self._args[0])
                except CertificateNotValid as exc:
                    self._refuse(exc.reason, exc, stamps)
                except (OSError, ssl.SSLError, ValueError) as exc:
                    self._refuse("refused_unreadable", exc, stamps)
                else:
                    self._context, self._stamps, self._refused = context, stamps, None
                    self.reloads += 1
                    self._loaded(not_after)
                    log.info("TLS certificate reloaded", extra={"files": list(self.files)})
            return self._context

    @staticmethod
    def _loaded(not_after: float) -> None:
        metrics.TLS_CERTIFICATE_LOADS_TOTAL.labels("loaded").inc()
        metrics.TLS_CERTIFICATE_EXPIRY.set(not_after)

    def _refuse(self, reason: str, exc: BaseException, stamps: tuple) -> None:
        """Log and count a refused certificate once per file change (the check repeats
        every `check_interval` while connections arrive)."""
        if self._refused == (stamps, reason):
            return
        self._refused = (stamps, reason)
        metrics.TLS_CERTIFICATE_LOADS_TOTAL.labels(reason).inc()
        log.error("TLS files changed but cannot be used; keeping the previous certificate"
                  if self.reloads or stamps != self._stamps else "TLS certificate is not usable",
                  extra={"files": list(self.files), "error": str(exc), "result": reason})


# --- who may be served: ClientPolicy -----------------------------------------------------

_BASIC_CONSTRAINTS = bytes.fromhex("551d13")  # OID 2.5.29.19, DER content


def _tlv(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at `at`."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(der[at:at + count], "big")
        at += count
    if at + length > len(der):
        raise ValueError("truncated DER")
    return tag, at, at + length


def is_ca_certificate(der: bytes) -> bool:
    """Whether a DER certificate says basicConstraints CA:TRUE (the ssl module reports no
    extensions but the names; `cryptography` is not a runtime dependency). A certificate
    that cannot be read counts as one (it is refused)."""
    try:
        _, at, _ = _tlv(der, 0)  # Certificate
        _, at, end = _tlv(der, at)  # tbsCertificate
        while at < end:
            tag, start, stop = _tlv(der, at)
            if tag == 0xA3:  # [3] extensions: SEQUENCE OF Extension
                _, at, extensions_end = _tlv(der, start)
                while at < extensions_end:
                    _, field, extension_end = _tlv(der, at)
                    _, oid, oid_end = _tlv(der, field)  # extnID
                    if der[oid:oid_end] == _BASIC_CONSTRAINTS:
                        tag, value, value_end = _tlv(der, oid_end)
                        if tag == 0x01:  # critical BOOLEAN, then the OCTET STRING
                            tag, value, value_end = _tlv(der, value_end)
                        _, inner, inner_end = _tlv(der, value)  # BasicConstraints SEQUENCE
                        if inner == inner_end:
                            return False  # cA DEFAULT FALSE
                        tag, flag, flag_end = _tlv(der, inner)
                        return tag == 0x01 and der[flag:flag_end] != b"\x00"
                    at = extension_end
                return False
            at = stop
        return False
    except (IndexError, ValueError):
        return True


def common_name(cert: dict) -> str:
    """The subject's common name as kube-apiserver's x509 authenticator reads it: Go's
    `pkix.Name.CommonName`, the last CN attribute of the subject ("" without one). A
    certificate with several CNs is the user its last CN names, never the others."""
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    return names[-1] if names else ""


def _alternative_names(cert: dict, kind: str) -> list[str]:
    return [value for name_kind, value in cert.get("subjectAltName", ()) if name_kind == kind]


def subject_names(cert: dict) -> list[str]:
    """A verified certificate's subject common name (the last) and DNS and URI
    alternative names (`ssl.SSLSocket.getpeercert()`), as `--client-cert-allowed-names`
    matches them."""
    names = [common_name(cert)] if common_name(cert) else []
    names += [value for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "URI")]
    return names


def _name_key(name) -> tuple:
    """A distinguished name (`getpeercert()`'s tuple of RDNs) comparable to another."""
    return tuple(tuple(rdn) for rdn in name)


class ClientPolicy:
    """Whether the client of a TLS connection, its certificate verified by the
    handshake, is served (the listener's `client_check`): "" if so, else why not.

    * A CA certificate (basicConstraints CA:TRUE) is never a client certificate: the
      client CA itself, or any intermediate, presented with its key, is refused.
    * The certificate must be issued by a certificate of `--client-ca-file` itself: a
      leaf of an intermediate CA under it (which the handshake verifies, with the
      intermediate sent by the client) is refused. To admit an intermediate's leaves,
      put the intermediate in the file.
    * With `allowed_names` (`--client-cert-allowed-names`), the certificate's subject
      common name (the last CN, as kube-apiserver reads it), or one of its DNS or URI
      subject alternative names, must equal one of them: exactly, except that DNS names
      compare without regard to case.

    Without a client CA no certificate is asked for, and every client is served."""

    def __init__(self, allowed_names: tuple[str, ...] = ()) -> None:
        self.allowed = frozenset(allowed_names)
        self.allowed_lower = frozenset(n.lower() for n in allowed_names)
        self._issuers: tuple[ssl.SSLContext | None, frozenset] = (None, frozenset())  # (context, CA subjects)

    def __call__(self, sock: ssl.SSLSocket) -> str:
        der = sock.getpeercert(binary_form=True)
        if der is None:
            return ""
        if is_ca_certificate(der):
            return "a CA certificate (basicConstraints CA:TRUE) is not a client certificate"
        cert = sock.getpeercert() or {}
        issuers = self.issuers(sock.context)
        if issuers and _name_key(cert.get("issuer", ())) not in issuers:
            return "not issued by a certificate of --client-ca-file (an intermediate CA's leaf)"
        if not self.allowed or self.allows(cert):
            return ""
        return (f"subject {', '.join(subject_names(cert)) or '(none)'} is not one of "
                "--client-cert-allowed-names")

    def issuers(self, context: ssl.SSLContext) -> frozenset:
        """The subjects of the client CA certificates `context` trusts (read once per
        context: a rotated CA file makes a new one)."""
        held = self._issuers
        if held[0] is not context:
            held = (context, frozenset(_name_key(ca.get("subject", ())) for ca in context.get_ca_certs()))
            self._issuers = held
        return held[1]

    def allows(self, cert: dict) -> bool:
        """Whether a verified certificate (`getpeercert()`) has an allowed name: its
        common name (the last CN) or a URI alternative name exactly, a DNS one without
        regard to case."""
        exact = [common_name(cert)] + _alternative_names(cert, "URI")
        dns = [value.lower() for value in _alternative_names(cert, "DNS")]
        return bool(self.allowed.intersection(exact) or self.allowed_lower.intersection(dns))


def client_policy(config) -> ClientPolicy | None:
    """The `ClientPolicy` of `config` (`--client-cert-allowed-names`), None without
    `--client-ca-file` (no client certificates are asked for)."""
    return ClientPolicy(config.client_cert_allowed_names) if config.client_ca_file else None
