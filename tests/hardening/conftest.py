"""Shared fixtures of the hardening tests."""

from __future__ import annotations

import ssl

import pytest
from validation.pki import CA, write_pair


@pytest.fixture
def pki(tmp_path):
    """A throw-away CA and a serving certificate it signed (for 127.0.0.1 / localhost):
    `ca`, `dir`, `cert` and `key` (paths), `ca_file`, and `client`, a client context
    that trusts the CA."""
    ca = CA.create()
    cert, key, _ = ca.issue("webhook")
    cert_path, key_path = write_pair(tmp_path, cert, key)
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    return {"ca": ca, "dir": tmp_path, "cert": str(cert_path), "key": str(key_path),
            "ca_file": str(tmp_path / "ca.crt"), "client": ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))}
