"""/metrics in multiprocess mode reads every worker's file; another worker may be
creating or growing its file at that moment (prometheus-client cannot map a file still
empty: ValueError). The read is tried again, and only a persistent failure is an error."""

from __future__ import annotations

import pytest

from extender.server import app


def test_a_failed_read_of_the_workers_files_is_tried_again(monkeypatch, tmp_path):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    calls = []

    def flaky(registry):
        calls.append(registry)
        if len(calls) == 1:
            raise ValueError("cannot mmap an empty file")
        return b"# ok\n"

    monkeypatch.setattr(app, "generate_latest", flaky)
    assert app._metrics_payload() == b"# ok\n" and len(calls) == 2


def test_a_persistent_failure_is_not_hidden(monkeypatch, tmp_path):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))

    def broken(registry):
        raise ValueError("cannot mmap an empty file")

    monkeypatch.setattr(app, "generate_latest", broken)
    with pytest.raises(ValueError):
        app._metrics_payload()
