"""A cluster-state reload frees the snapshot it replaces (and the caches hanging off
it): `settle_heap` freezes the heap after each load, and without unfreezing first every
reload kept a whole snapshot for ever (found by `make soak`)."""

from __future__ import annotations

import gc
import shutil
import weakref

from conftest import EXAMPLES, example_pod

from extender.api.wire import decode_args
from extender.config import Config
from extender.service import Extender
from extender.state import FileSource


def test_a_replaced_snapshot_is_freed(tmp_path):
    path = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLES / "cluster.yaml", path)
    source = FileSource(str(path), poll_seconds=0)
    engine = Extender(Config(), source)
    body = b'{"Pod":' + __import__("orjson").dumps(example_pod("sla-gt")) + \
        b',"Nodes":null,"NodeNames":["od-a1","od-b1","spot-a1"]}'
    old = []
    try:
        for i in range(3):
            engine.filter_bytes(decode_args(body))  # fills the per-snapshot caches (cycles)
            old.append(weakref.ref(source.snapshot()))
            path.write_text(path.read_text() + f"\n# change {i}\n")
            assert source.reload("test")
        gc.collect()
        assert [ref() is None for ref in old] == [True, True, True]
    finally:
        gc.unfreeze()
