"""`testing.live.free_port`: test servers get ports outside the kernel's ephemeral range,
which outgoing connections draw from (a port found by bind(0) could be taken by a client
before the server binds it: "Address already in use" in CI)."""

from __future__ import annotations

import socket

from testing.live import _ephemeral_low, free_port


def test_ports_are_below_the_ephemeral_range_and_bindable():
    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= p < low for p in ports) if low > 12000 else ports
    assert len(ports) > 1  # random picks, not one port for every caller
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
