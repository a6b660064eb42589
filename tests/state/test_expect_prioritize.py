"""A filter answer over a list the layer had not seen registers the candidates of the
prioritize call that follows (its NodeNames are the answer's feasible names, in order):
that call is then served from the registration, with the same answer as a call that
decodes and resolves every name."""

from __future__ import annotations

import random

import numpy as np
import orjson
from conftest import EXAMPLES, example_pod

from extender.api.answers import expect_prioritize
from extender.api.candidates import resolve
from extender.api.wire import decode_args, known_names_cache
from extender.config import Config
from extender.engine import Extender
from extender.state.source import FileSource


def engine() -> Extender:
    return Extender(Config(), FileSource(str(EXAMPLES / "cluster.yaml")))


def test_the_next_prioritize_is_served_from_the_filter_answer():
    ext, fresh = engine(), engine()
    names = [n.name for n in ext.source.snapshot().nodes.nodes]
    rng = random.Random(3)
    for _ in range(5):
        rng.shuffle(names)  # kube-scheduler's lists come in a new order for every pod
        pod = example_pod("sla-gt")
        answer = orjson.loads(ext.filter(decode_args(orjson.dumps({"Pod": pod, "NodeNames": names}))))
        feasible = answer["NodeNames"]
        assert len(feasible) >= 2
        text = orjson.dumps(feasible)  # as Go writes it
        assert known_names_cache().get(text) == feasible
        registered = ext.source.snapshot().nodes._candidates.get(text)
        assert registered is not None and registered.nodes.order == feasible
        body = orjson.dumps({"Pod": pod, "NodeNames": feasible})
        assert ext.prioritize(decode_args(body)) == fresh.prioritize(decode_args(body + b" "))  # not cut: decoded


def test_a_list_seen_before_registers_nothing():
    ext = engine()
    snapshot = ext.source.snapshot()
    names = [n.name for n in snapshot.nodes.nodes]
    key = orjson.dumps(names)
    first, again = resolve(snapshot, names, names_key=key), resolve(snapshot, names, names_key=key)
    assert first is again and again.served == 2  # one shared set, answered twice
    feasible = np.zeros(len(names), dtype=bool)
    feasible[[0, 2]] = True
    expect_prioritize(snapshot, again, feasible)  # a list served before: nothing to expect
    text = orjson.dumps([names[0], names[2]])
    assert snapshot.nodes._candidates.get(text) is None
    first.served = 1
    expect_prioritize(snapshot, first, feasible)  # a list first seen now: registered
    assert snapshot.nodes._candidates.get(text).nodes.uidx.tolist() == [0, 2]


def test_the_registered_text_is_the_answers_names_or_a_fresh_join():
    from extender.api.answers import feasible_names_text

    ext = engine()
    snapshot = ext.source.snapshot()
    names = [n.name for n in snapshot.nodes.nodes]
    cands = resolve(snapshot, names, names_key=orjson.dumps(names))
    feasible = np.zeros(len(names), dtype=bool)
    feasible[[0, 1]] = True
    slim = b'{"Nodes":null,"NodeNames":[' + b",".join(orjson.dumps(n) for n in names[:2]) + \
        b'],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'
    assert feasible_names_text(slim) == orjson.dumps(names[:2])
    padded = slim.replace(b'",', b'"  ,')
    assert orjson.loads(padded) == orjson.loads(slim) and feasible_names_text(padded) is None
    assert feasible_names_text(b'{"Nodes":null,"NodeNames":["a"],"FailedNodes":{"b":"x"},'
                               b'"FailedAndUnresolvableNodes":{},"Error":""}') is None
    cands.served = 1
    expect_prioritize(snapshot, cands, feasible, padded)  # padded: the names joined afresh
    assert snapshot.nodes._candidates.get(orjson.dumps(names[:2])).nodes.order == names[:2]


def test_node_names_must_all_be_strings():
    import pytest

    from extender.api.wire import WireError, all_str

    assert all_str([]) and all_str(["a", "b"]) and not all_str(["a", 1]) and not all_str([None])
    with pytest.raises(WireError, match="list of strings"):
        decode_args(b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a",2],"Nodes":null} ')
    with pytest.raises(WireError, match="list of strings"):
        decode_args(b'{"Pod":{"metadata":{"name":"p"}},"Nodes":null,"NodeNames":["a",2]}')
