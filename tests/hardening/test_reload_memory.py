"""A cluster-state reload frees the snapshot it replaces (and the caches hanging off
it): an earlier design froze the heap after each load and kept every replaced snapshot
for ever (found by `make soak`). A reload that changes nothing keeps the snapshot, so
each round here really changes a node."""

from __future__ import annotations

import gc
import shutil
import weakref

import yaml
from conftest import EXAMPLES, example_pod

from extender.api.wire import decode_args
from extender.config import Config
from extender.engine import Extender
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
            engine.filter(decode_args(body))  # fills the per-snapshot caches (cycles)
            old.append(weakref.ref(source.snapshot()))
            objects = yaml.safe_load(path.read_text())
            objects["items"][0]["metadata"]["labels"]["example.com/round"] = str(i)
            path.write_text(yaml.safe_dump(objects))
            assert source.reload("test")
        gc.collect()
        assert [ref() is None for ref in old] == [True, True, True]
    finally:
        source.stop()
