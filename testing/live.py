"""A real `extender serve` process on a free loopback port, for end-to-end tests."""

from __future__ import annotations

import http.client
import os
import random
import signal
import socket
import subprocess
import sys
import time

NAMES = ["od-a1", "od-a2", "od-b1", "spot-a1", "spot-b1", "spot-c1"]  # examples/cluster.yaml


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


_PICK = random.SystemRandom()  # never the seeded `random`: every xdist worker gets the same seed


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range: outgoing connections
    take their local ports from that range, so a port `bind(0)` finds there can be taken
    by any client in the second before the server under test binds it ("Address already
    in use", seen in CI); below it only another listener can, and picks are random."""
    low = _ephemeral_low()
    if low > 12000:
        for _ in range(50):
            port = _PICK.randrange(10000, low)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def start(cluster, *flags: str, tmpdir=None) -> tuple[int, subprocess.Popen]:
    """`extender serve` on a free loopback port, without a preset PROMETHEUS_MULTIPROC_DIR
    (`serve` must set up multiprocess metrics itself); returns once /readyz answers 200.
    The metrics listener goes to another free loopback port unless `flags` name one."""
    port = free_port()
    if "--metrics-listen" not in flags:
        flags = (*flags, "--metrics-listen", f"127.0.0.1:{free_port()}")
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    cmd = [sys.executable, "-m", "extender", "serve", "--cluster", str(cluster),
           "--listen", f"127.0.0.1:{port}", *flags]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120  # generous: a loaded machine starts Python slowly; an exit ends it at once
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if request(port, "GET", "/readyz")[0] == 200:
                return port, proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"server did not become ready (exit code {proc.poll()}): "
                         f"{proc.stderr.read().decode()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
