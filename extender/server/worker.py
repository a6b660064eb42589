"""The gunicorn worker: `extender.server.listener` on the sockets the master opened.

gunicorn stays what it is good at, on its public worker API (a subclass of
`gunicorn.workers.base.Worker`, as its `worker_class` setting documents): the master
process, forking and preloading, `--workers`, HUP, restarts of a dead worker, the
heartbeat. Reading and answering HTTP is the listener's, the same code that serves
`--metrics-listen` and the webhook: whole requests buffered on an event loop, one
deadline per request, the in-flight byte budget, lanes for the verbs
(`extender.server.app`).

`--worker-class inline` (the default) answers cheap verbs on the loop; `pool` answers
every verb on a `--threads` pool thread (requests in flight interleave). Both are this
one gunicorn worker class (`gthread`, the deprecated name of `pool`, never meant
gunicorn's own gthread worker). On SIGTERM (or when the master goes away) the worker
stops accepting, lets the answers in flight finish for up to gunicorn's graceful
timeout, and exits.
"""

from __future__ import annotations

import os
import time

from gunicorn.workers.base import Worker

from extender.server.app import serve


class ExtenderWorker(Worker):
    def run(self) -> None:
        app = self.wsgi  # what `ExtenderServer.load` built: an `extender.server.app.App`
        listener = serve(app, app.config, sockets=self.sockets)
        stop_by: list[float] = []

        def tick() -> bool:
            self.notify()
            if self.alive and self.ppid == os.getppid():
                return True
            if not stop_by:  # stop accepting; answers in flight may finish
                self.alive = False
                listener.stop_accepting()
                stop_by.append(time.monotonic() + self.cfg.graceful_timeout)
            return listener.busy() and time.monotonic() < stop_by[0]

        try:
            listener.serve(tick)
        finally:
            listener.stop()
