"""Cluster files: formats, errors, reload on change and SIGHUP, broken reloads."""

from __future__ import annotations

import os
import signal
import time

import orjson
import pytest

from extender import metrics
from extender.metrics import read
from extender.state import ClusterSnapshot, FileSource, load_objects
from extender.state.loader import ClusterFileError, parse_documents

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}},
        "spec": {"taints": [{"key": "k", "value": "1", "effect": "NoSchedule"}]}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}, "spec": {"nodeName": "n1"}}


def test_kind_list_typed_lists_multidoc_and_json():
    as_list = parse_documents(orjson.dumps({"kind": "List", "items": [NODE, POD]}))
    typed = parse_documents(orjson.dumps({"kind": "NodeList", "items": [{"metadata": {"name": "n1"}}]}))
    multi = parse_documents("kind: Node\nmetadata: {name: n1}\n---\nkind: Pod\nmetadata: {name: p}\n---\n")
    assert [o["kind"] for o in as_list] == ["Node", "Pod"]
    assert typed[0]["kind"] == "Node"
    assert [o["kind"] for o in multi] == ["Node", "Pod"]


def test_snapshot_contents():
    snap = ClusterSnapshot.from_objects([NODE, POD, {"kind": "Service", "metadata": {"name": "s", "namespace": "x"}}])
    (node,) = snap.nodes.nodes
    assert node.taints[0].value == "1" and node.labels == {"a": "b"}
    assert snap.pods_by_namespace["x"][0].node_name == "n1"
    assert len(snap.workloads_in("Service", "x")) == 1
    assert snap.counts()["nodes"] == 1


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("kind: Node\nmetadata: {name: [1]}\n", "node.metadata.name: expected a string"),
        ("kind: Node\nmetadata: {name: a}\nspec: {taints: 3}\n", "expected a list"),
        ("kind: Node\nmetadata: {}\n", "node without metadata.name"),
        ("kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: a}\n", "duplicate node 'a'"),
        ("- 1\n- 2\n", "expected Kubernetes objects"),
        ("a: [\n", "cannot parse"),
    ],
)
def test_bad_cluster_files_name_the_problem(text, fragment):
    with pytest.raises(ClusterFileError) as info:
        ClusterSnapshot.from_objects(parse_documents(text))
    assert fragment in str(info.value)


def test_missing_file():
    with pytest.raises(ClusterFileError, match="cannot read cluster file"):
        load_objects("/nonexistent/cluster.yaml")


def _write(path, names):
    path.write_text(orjson.dumps({"kind": "List", "items": [{"kind": "Node", "metadata": {"name": n}} for n in names]}).decode())


def _wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_reload_when_the_file_changes_and_keep_old_state_on_error(tmp_path):
    path = tmp_path / "cluster.json"
    _write(path, ["a"])
    source = FileSource(path, poll_seconds=0.05)
    source.start(install_sighup=False)
    try:
        assert source.snapshot().nodes.names == {"a"}
        _write(path, ["a", "b", "c"])
        os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        assert _wait_for(lambda: source.snapshot().nodes.names == {"a", "b", "c"})
        good = source.snapshot()
        failed = read(metrics.CLUSTER_STATE_RELOADS_TOTAL, "extender_cluster_state_reloads_total", result="error")
        path.write_text("{broken")
        os.utime(path, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
        # the broken file was read and refused (its reload counted), not a clock
        assert _wait_for(lambda: read(metrics.CLUSTER_STATE_RELOADS_TOTAL, "extender_cluster_state_reloads_total",
                                      result="error") > failed, timeout=30)
        assert source.snapshot() is good
        assert source.ready()
    finally:
        source.stop()


def test_a_file_rewritten_in_place_while_it_is_read_is_read_again(tmp_path, monkeypatch):
    """A writer that truncates and then writes (`write_bytes`, `>` in a shell) can finish
    between the reload's read of the partial file and its bookkeeping: the reload refuses
    what it read, and the finished file is still read on the next poll, not taken for the
    broken one (it once kept a cordon from ever being applied, under load)."""
    from extender.state import source as source_module

    path = tmp_path / "cluster.json"
    _write(path, ["a"])
    source = FileSource(path, poll_seconds=0, last_good=False)
    real_read = source_module.read_bytes
    path.write_text("")  # the writer has truncated: the reload reads this

    def read_then_the_writer_finishes(p):
        data = real_read(p)
        _write(path, ["a", "b"])  # the rest of the write lands after the read
        os.utime(path, ns=(time.time_ns() + 10**9,) * 2)
        return data

    monkeypatch.setattr(source_module, "read_bytes", lambda p: read_then_the_writer_finishes(p))
    assert not source.reload_if_changed()  # the empty file it read is refused, not applied
    assert source.snapshot().nodes.names == {"a"}
    monkeypatch.setattr(source_module, "read_bytes", real_read)
    assert source.reload_if_changed()  # the finished file, on the next poll
    assert source.snapshot().nodes.names == {"a", "b"}


def test_an_empty_file_on_reload_keeps_the_state_an_empty_list_empties_it(tmp_path):
    path = tmp_path / "cluster.json"
    _write(path, ["a"])
    source = FileSource(path, poll_seconds=0, last_good=False)
    path.write_text(" \n")
    assert not source.reload("test")
    assert source.snapshot().nodes.names == {"a"}
    _write(path, [])
    assert source.reload("test")
    assert source.snapshot().nodes.names == set()


def test_reload_on_sighup(tmp_path):
    path = tmp_path / "cluster.json"
    _write(path, ["a"])
    source = FileSource(path, poll_seconds=0)
    previous = signal.getsignal(signal.SIGHUP)
    source.start(install_sighup=True)
    try:
        _write(path, ["z"])
        os.kill(os.getpid(), signal.SIGHUP)
        assert _wait_for(lambda: source.snapshot().nodes.names == {"z"})
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_loaded_snapshots_come_with_their_indexes_built(tmp_path):
    """Built at load (in gunicorn's master, before forking), not by the first request:
    the node layer's taint groups and label index; the pod layer is indexed as it is fed."""
    path = tmp_path / "cluster.json"
    _write(path, ["a", "b"])
    source = FileSource(path, poll_seconds=0)
    nodes = source.snapshot().nodes
    assert nodes._taint_groups is not None and nodes._label_index is not None
    _write(path, ["a", "b", "c"])
    assert source.reload("test")
    nodes = source.snapshot().nodes
    assert nodes._taint_groups is not None and nodes._label_index is not None
    assert nodes.names == {"a", "b", "c"}
