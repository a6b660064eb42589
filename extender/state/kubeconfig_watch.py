"""Following the kubeconfig that `extender serve --kubeconfig FILE` started with.

On a kubeadm control plane the extender's static pod reads kube-scheduler's own
/etc/kubernetes/scheduler.conf (manifests/overlays/replace-default), whose client
certificate `kubeadm certs renew` and `kubeadm upgrade` renew in that file. The API
client holds the certificate everywhere it connects from (the watches' client, the
binder's kept connections with a TLS context of their own, in every worker), so a changed
file is followed by a restart, which rebuilds all of them from it: in a container (a
static pod's, which the kubelet restarts at once) the server stops gracefully, as on
SIGTERM; elsewhere (a developer's `extender serve`) it says that it keeps the old
credentials until it is restarted.

The file is read every INTERVAL seconds. A change is a change of its bytes (a rewrite of
the same content is none); a file that is unreadable or does not parse as a kubeconfig
with clusters and users (half written) is not a change yet.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import yaml

INTERVAL = 10.0  # seconds between reads: a renewal is picked up within that

log = logging.getLogger("extender.state")


def is_kubeconfig(data: bytes) -> bool:
    """Whether `data` is a whole kubeconfig (YAML or JSON with clusters and users)."""
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        return False
    return isinstance(doc, dict) and bool(doc.get("clusters")) and bool(doc.get("users"))


class KubeconfigWatch:
    """Calls `on_change(path)` from a thread of its own when the file's content becomes
    another complete kubeconfig than the one read when the watch was made (then again
    only for a further change)."""

    def __init__(self, path: str | Path, on_change: Callable[[Path], None], interval: float = INTERVAL) -> None:
        self.path = Path(path)
        self.on_change = on_change
        self.interval = interval
        self._seen = self._read()
        self._stop = threading.Event()

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def changed(self) -> bool:
        """Read the file: True, once, when it holds another complete kubeconfig."""
        data = self._read()
        if data is None or data == self._seen or not is_kubeconfig(data):
            return False
        self._seen = data
        return True

    def start(self) -> KubeconfigWatch:
        threading.Thread(target=self._run, name="kubeconfig-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.changed():
                    self.on_change(self.path)
            except Exception:  # never end the watch: the next read tries again
                log.exception("kubeconfig watch", extra={"kubeconfig": str(self.path)})
