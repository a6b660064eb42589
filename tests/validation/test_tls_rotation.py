"""Certificate rotation refuses a certificate outside its validity period (issue #28):
the previous certificate stays in use, the refusal is logged and counted, and a valid
certificate written afterwards is taken."""

from __future__ import annotations

import datetime
import logging
import os
import time
from pathlib import Path

import pytest
from pki import CA, write_pair
from prometheus_client import REGISTRY

from extender.server.tls import ReloadingContext, check_validity

DAY = datetime.timedelta(days=1)
HOUR = datetime.timedelta(hours=1)


def loads(result: str) -> float:
    return REGISTRY.get_sample_value("extender_tls_certificate_loads_total", {"result": result}) or 0.0


def served_serial(ctx) -> int:
    """The serial number of the certificate a context serves (one in-memory handshake)."""
    import ssl

    from cryptography import x509

    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = ctx.wrap_bio(server_in, server_out, server_side=True)
    peer = client.wrap_bio(client_in, client_out)
    for _ in range(10):
        for side in (peer, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    return x509.load_der_x509_certificate(peer.getpeercert(binary_form=True)).serial_number


def rotate(directory: Path, cert: bytes, key: bytes, into: tuple[Path, Path]) -> None:
    staging = directory / f"next-{time.monotonic_ns()}"
    staging.mkdir()
    write_pair(staging, cert, key)
    os.replace(staging / "tls.key", into[1])
    os.replace(staging / "tls.crt", into[0])


@pytest.mark.parametrize(("valid", "result"), [
    ((-2 * DAY, -DAY), "refused_expired"),
    ((HOUR, DAY), "refused_not_yet_valid"),
])
def test_rotation_keeps_the_previous_certificate_when_the_new_one_is_not_valid(tmp_path, caplog, valid, result):
    ca = CA.create()
    cert, key, first = ca.issue("webhook-1")
    pair = write_pair(tmp_path, cert, key)
    tls = ReloadingContext(*map(str, pair), check_interval=0)
    assert served_serial(tls.current()) == first
    refused = loads(result)

    bad_cert, bad_key, _ = ca.issue("webhook-bad", valid=valid)
    with caplog.at_level(logging.ERROR, logger="extender.tls"):
        rotate(tmp_path, bad_cert, bad_key, pair)
        for _ in range(3):  # checked on every new connection; logged and counted once
            assert served_serial(tls.current()) == first
    assert tls.reloads == 0
    assert loads(result) == refused + 1
    assert [r.getMessage() for r in caplog.records] == [
        "TLS files changed but cannot be used; keeping the previous certificate"]
    assert caplog.records[0].result == result

    good_cert, good_key, good = ca.issue("webhook-2")
    rotate(tmp_path, good_cert, good_key, pair)
    assert served_serial(tls.current()) == good
    assert tls.reloads == 1


def test_an_invalid_certificate_at_start_up_is_served_but_reported(tmp_path, caplog):
    """Nothing to keep instead: it is served (the verbs need not wait for it), logged
    and counted, and the expiry gauge says when it ends."""
    cert, key, serial = CA.create().issue("webhook-old", valid=(-2 * DAY, -DAY))
    pair = write_pair(tmp_path, cert, key)
    before = loads("refused_expired")
    with caplog.at_level(logging.ERROR, logger="extender.tls"):
        tls = ReloadingContext(*map(str, pair), check_interval=0)
    assert served_serial(tls.current()) == serial
    assert loads("refused_expired") == before + 1
    assert "not usable" in caplog.records[0].getMessage()


def test_check_validity_reads_the_period():
    import tempfile

    cert, _, _ = CA.create().issue("x", valid=(-HOUR, DAY))
    with tempfile.NamedTemporaryFile(suffix=".crt") as f:
        f.write(cert)
        f.flush()
        not_after = check_validity(f.name)
        assert abs(not_after - (time.time() + DAY.total_seconds())) < 120
        with pytest.raises(ValueError, match="expired"):
            check_validity(f.name, now=not_after + 1)
        with pytest.raises(ValueError, match="not valid before"):
            check_validity(f.name, now=not_after - DAY.total_seconds() - 2 * HOUR.total_seconds())
