"""A large cluster-file reload does not stall the worker's other threads (issue #28
item 9: a 9 MB reload held the GIL 0.2-0.5 s, the verbs listener's /healthz waited).

The causes were three full collections of the growing heap during the load, orjson
parsing the whole JSON document in one call, libyaml composing and freeing a whole
YAML document's node graph in single calls. What can be checked without a clock is
checked here: no full collection runs during a reload; the step-wise parsers give
exactly the one-shot parsers' objects; in the serving process the replaced state is
freed although the heap is frozen. The probe latency during reloads is measured by
`perf/reload_stall.py` (docs/operate/hardening.md)."""

from __future__ import annotations

import gc
import json
import weakref

import orjson
import pytest
import yaml

from extender.state import FileSource
from extender.state.heap import ReplacedStates
from extender.state.loader import (
    INCREMENTAL_JSON_BYTES,
    ClusterFileError,
    _flatten,
    parse_documents,
)
from perf.generate import generate_cluster


@pytest.fixture(scope="module")
def cluster() -> dict:
    doc, _ = generate_cluster(1500, 9000, seed=5)
    return doc


def write(tmp_path, cluster: dict, fmt: str, round_: int) -> str:
    cluster["items"][0]["metadata"]["labels"]["round"] = str(round_)
    path = tmp_path / f"cluster.{fmt}"
    data = orjson.dumps(cluster) if fmt == "json" else yaml.dump(cluster, Dumper=yaml.CSafeDumper).encode()
    assert len(data) > 4 * INCREMENTAL_JSON_BYTES
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_large_reload_runs_no_full_collection(tmp_path, cluster, fmt):
    source = FileSource(write(tmp_path, cluster, fmt, 0), poll_seconds=0, last_good=False)
    full: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    write(tmp_path, cluster, fmt, 1)
    gc.callbacks.append(record)
    try:
        assert source.reload("test")
    finally:
        gc.callbacks.remove(record)
    assert source.snapshot().pod_layer is not None
    assert full == []  # each full pass walked the whole heap with the GIL held
    assert gc.isenabled()


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_step_wise_parsing_gives_the_one_shot_parsers_objects(tmp_path, cluster, fmt):
    path = write(tmp_path, cluster, fmt, 2)
    data = open(path, "rb").read()
    one_shot = [orjson.loads(data)] if fmt == "json" else list(yaml.load_all(data, Loader=yaml.CSafeLoader))
    assert parse_documents(data) == [obj for doc in one_shot for obj in _flatten(doc, "x")]


PAD = b" " * INCREMENTAL_JSON_BYTES  # past the threshold: the step-wise parsers run


@pytest.mark.parametrize("text", [
    b'{"kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}},{"kind":"Pod"}],"extra":[1,{"x":null}]}',
    b'[{"kind":"Node","metadata":{"name":"a"}}, {"kind":"NodeList","items":[{"metadata":{"name":"b"}}]}]',
    b'{"kind":"NodeList","items":[],"metadata":{}}',
    b'{"kind":"Node","metadata":{"name":"\\u00e9\\"x","labels":{"a":"1"}},"items":"not a list"}',
])
def test_step_wise_json_edge_cases(text):
    assert parse_documents(text + PAD) == parse_documents(text)


@pytest.mark.parametrize("text", [
    b"kind: List\nitems:\n- &n {kind: Node, metadata: {name: a, labels: &l {x: '1'}}}\n- <<: *n\n  spec: {}\n",
    b"---\nkind: Node\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: p, annotations: {t: '2024-01-01'}}\n",
    b"kind: NodeList\nitems:\n- metadata:\n    name: b\n    labels: {n: 12, f: 1.5, b: true, z: null}\n",
])
def test_step_wise_yaml_edge_cases(text):
    assert parse_documents(text + b"#" + PAD) == parse_documents(text)


@pytest.mark.parametrize("text", [
    b'{"kind":"List","items":[{"a":1},]}', b'{"kind":"List","items":[1 2]}', b'{"kind" 1}',
    b'{"kind":"List","items":[]} x', b'{"items":[{"a":"\\ud800"', b"kind: [unclosed\n",
])
def test_step_wise_parsing_reports_broken_files(text):
    with pytest.raises(ClusterFileError, match="cannot parse"):
        parse_documents(text + PAD if text.startswith(b"{") else text + b"#" + PAD)


def test_the_serving_process_frees_replaced_states_while_the_heap_is_frozen(tmp_path, cluster):
    """`freeze=True` (extender serve): the state is frozen after each load without a
    collection; a replaced state is freed by reference counting alone."""
    source = FileSource(write(tmp_path, cluster, "json", 3), poll_seconds=0, last_good=False, freeze=True)
    try:
        before = weakref.ref(source.snapshot())
        write(tmp_path, cluster, "json", 4)
        assert source.reload("test")
        assert gc.get_freeze_count() > 0
        assert before() is None  # no gc.collect(): freed the moment it was replaced
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual


def test_a_replaced_state_kept_by_a_cycle_is_collected_after_the_grace():
    class State:
        pass

    watch = ReplacedStates(grace=0.0)
    state = State()
    state.me = state  # a cycle: reference counting alone never frees it
    ref = weakref.ref(state)
    watch.replaced(state)
    del state
    gc.freeze()
    try:
        assert watch.check() is True  # past the grace and still alive: collected
        assert ref() is None
        assert watch.check() is False
    finally:
        gc.unfreeze()


def test_broken_json_is_not_silently_accepted_by_the_step_wise_parser():
    with pytest.raises(json.JSONDecodeError):
        from extender.state.loader import _json_document

        _json_document(b'{"items":[{"a":1}' + PAD)
