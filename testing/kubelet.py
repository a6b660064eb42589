"""What the kubelet does with a container's probes, in its own rules (pkg/kubelet/prober
and pkg/probe of kubernetes/kubernetes), for the tests that play the kubelet.

- A probe's `port` that is a number is dialled as is; a **name is looked up in the probed
  container's own `ports`** (`findPortByName`), never in another container's. A name
  that is not there is a prober *error*: the worker throws the result away, so the probe
  neither succeeds nor fails, a startup probe never lets the container count as started
  and a liveness probe never restarts it. API validation only checks the name's syntax.
- `host` defaults to the **pod's IP**: a process listening on 127.0.0.1 alone is not
  reached unless the pod is on the host network and the probe says `host: 127.0.0.1`
  (then the node's loopback is dialled).
- An HTTP probe succeeds on a status from 200 to 399; HTTPS is not verified.
"""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass

PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


class ProbeError(Exception):
    """The kubelet could not run the probe at all (its result is thrown away)."""


@dataclass(frozen=True)
class Target:
    """Where one probe goes: `host` "" is the pod's IP."""

    probe: str          # startupProbe, livenessProbe, readinessProbe
    action: str         # httpGet, tcpSocket
    port: int
    host: str
    scheme: str
    path: str


def resolve_port(port: int | str, container: dict) -> int:
    """The kubelet's resolution of a probe port for `container` (findPortByName)."""
    if isinstance(port, int):
        if not 0 < port < 65536:
            raise ProbeError(f"invalid port number: {port}")
        return port
    for declared in container.get("ports", []):
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ProbeError(f"couldn't find port: {port!r} in the ports of container {container['name']!r} "
                     f"({[p.get('name') for p in container.get('ports', [])]})")


def target(name: str, probe: dict, container: dict) -> Target:
    """The endpoint the kubelet dials for `container`'s probe `name`."""
    for action in ("httpGet", "tcpSocket"):
        if action in probe:
            spec = probe[action]
            return Target(name, action, resolve_port(spec["port"], container), spec.get("host", ""),
                          spec.get("scheme", "HTTP"), spec.get("path", "/"))
    raise ProbeError(f"{container['name']}.{name}: only httpGet and tcpSocket probes are played here")


def targets(container: dict) -> list[Target]:
    """Every probe of the container (ProbeError on the first the kubelet cannot run)."""
    return [target(name, container[name], container) for name in PROBES if name in container]


def http_probe(scheme: str, address: str, port: int, path: str, timeout: float = 1.0) -> int:
    """One HTTP(S) GET as the kubelet sends it; the status code (OSError when nothing answers)."""
    if scheme.upper() == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(address, port, timeout=timeout,
                                                                       context=context)
    else:
        conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "kube-probe/1.30", "Accept": "*/*"})
        return conn.getresponse().status
    finally:
        conn.close()


def succeeds(status: int) -> bool:
    return 200 <= status < 400
