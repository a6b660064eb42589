"""A throw-away CA and certificates for loopback TLS tests, made with `cryptography`."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, name: str = "test CA") -> CA:
        key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _pem_key(self.key)

    def issue(self, common_name: str, server: bool = True,
              valid: tuple[datetime.timedelta, datetime.timedelta] | None = None,
              names: tuple[x509.GeneralName, ...] = (), ca: bool = False) -> tuple[bytes, bytes, int]:
        """(certificate PEM, key PEM, serial) for 127.0.0.1 / localhost (server) or a
        client (`names`: its subject alternative names; `ca`: basicConstraints CA:TRUE);
        `valid`: (notBefore, notAfter) relative to now, default (-5 min, +1 day)."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        before, after = valid or (datetime.timedelta(minutes=-5), datetime.timedelta(days=1))
        serial = x509.random_serial_number()
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                   .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(serial)
                   .not_valid_before(now + before).not_valid_after(now + after)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        elif names:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
        if ca:
            builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key), serial


def write_pair(directory: Path, cert: bytes, key: bytes) -> tuple[Path, Path]:
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert)
    key_path.write_bytes(key)
    return cert_path, key_path


def serving_pki(directory: Path) -> dict:
    """A throw-away CA and a serving certificate it signed (127.0.0.1 / localhost), in
    `directory`: `ca`, `dir`, `cert` and `key` (paths), `ca_file`, and `client`, a
    client context that trusts the CA."""
    import ssl

    ca = CA.create()
    cert, key, _ = ca.issue("webhook")
    cert_path, key_path = write_pair(directory, cert, key)
    (directory / "ca.crt").write_bytes(ca.pem)
    return {"ca": ca, "dir": directory, "cert": str(cert_path), "key": str(key_path),
            "ca_file": str(directory / "ca.crt"), "client": ssl.create_default_context(cafile=str(directory / "ca.crt"))}
