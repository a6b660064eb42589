"""Server TLS whose certificate follows the files on disk (cert-manager rotates them).

`ReloadingContext.current()` is called for every new connection: at most once a second
it compares the files' (mtime, size, inode); when they changed it builds a fresh
`SSLContext` and uses it for new connections (open ones keep theirs). A half-written
pair (the key file replaced before the certificate) fails to load: the previous context
stays in use and the error is logged, and the next check tries again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

log = logging.getLogger("extender.tls")

CHECK_INTERVAL = 1.0


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def build_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """A TLS >= 1.2 server context; with a client CA, client certificates are required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
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
        self.reloads = 0

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
                except (OSError, ssl.SSLError, ValueError) as exc:
                    log.error("TLS files changed but cannot be loaded; keeping the previous certificate",
                              extra={"files": list(self.files), "error": str(exc)})
                else:
                    self._context, self._stamps = context, stamps
                    self.reloads += 1
                    log.info("TLS certificate reloaded", extra={"files": list(self.files)})
            return self._context


# --- the verbs' listener (gunicorn), with `--verbs-tls` ---------------------------------

_per_process: dict[tuple[str, str, str], ReloadingContext] = {}
_per_process_lock = threading.Lock()


def gunicorn_ssl_context(conf, default_factory) -> ssl.SSLContext:  # noqa: ARG001 - gunicorn hook
    """gunicorn's `ssl_context` hook, called for every accepted connection: the current
    context of a per-worker `ReloadingContext` (instead of re-reading the files each time)."""
    files = (conf.certfile, conf.keyfile, conf.ca_certs or "")
    with _per_process_lock:
        reloading = _per_process.get(files)
        if reloading is None:
            reloading = _per_process[files] = ReloadingContext(*files)
    return reloading.current()


def _reinit_after_fork() -> None:
    global _per_process_lock
    _per_process_lock = threading.Lock()
    _per_process.clear()


os.register_at_fork(after_in_child=_reinit_after_fork)
