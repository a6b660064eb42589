"""The node layer evolves in O(changes) and equals a layer built from scratch."""

from __future__ import annotations

import random

from extender.model import Node, Taint
from extender.state.nodeset import NodeIndex
from extender.state.store import DEFAULT_TOPOLOGY_KEYS, prepare_nodes


def _node(rng: random.Random, name: str) -> Node:
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": rng.choice("abcd")}
    if rng.random() < 0.5:
        labels["pool"] = rng.choice(["spot", "od", "gpu"])
    taints = tuple(Taint(k, "x", "NoSchedule") for k in rng.sample(["t1", "t2", "t3"], rng.randrange(3)))
    return Node(name=name, labels=labels, taints=taints, unschedulable=rng.random() < 0.2)


def _same(evolved: NodeIndex, fresh: NodeIndex) -> None:
    assert evolved.names == fresh.names and set(evolved.by_name) == set(fresh.by_name)
    assert evolved.unschedulable == fresh.unschedulable
    assert len(evolved.nodes) == len(fresh.nodes)
    assert {n.name for n in evolved.nodes} == fresh.names
    assert all(evolved.nodes[evolved._position[n]] is evolved.by_name[n] for n in evolved.names)
    as_sets = lambda groups: {t: {n.name for n in ns} for t, ns in groups.items()}  # noqa: E731
    assert as_sets(evolved.taint_groups()) == as_sets(fresh.taint_groups())
    assert evolved.label_index() == fresh.label_index()
    for key in (*DEFAULT_TOPOLOGY_KEYS, "pool"):
        codes, values = evolved.codes(key)
        for i, node in enumerate(evolved.nodes):
            want = node.labels.get(key)
            assert (values[codes[i]] if codes[i] >= 0 else None) == want, (key, node.name)
        assert evolved.names_with_key(key) == fresh.names_with_key(key)


def test_evolve_matches_a_fresh_build_through_random_changes():
    rng = random.Random(5)
    current = {f"n{i}": _node(rng, f"n{i}") for i in range(60)}
    layer = NodeIndex(list(current.values()))
    prepare_nodes(layer)
    layer.codes("pool")
    serial = 60
    for _ in range(200):
        changes: dict[str, Node | None] = {}
        for _ in range(rng.randrange(1, 4)):
            op = rng.random()
            if op < 0.3 and current:
                name = rng.choice(sorted(current))
                changes[name] = None
                current.pop(name)
            elif op < 0.6:
                serial += 1
                name = f"n{serial}"
                current[name] = changes[name] = _node(rng, name)
            elif current:
                name = rng.choice(sorted(current))
                current[name] = changes[name] = _node(rng, name)
        before = layer
        layer = before.evolve(changes)
        assert layer.version > before.version
        fresh = NodeIndex(list(current.values()))
        _same(layer, fresh)
    assert before.names != layer.names or before.nodes is not layer.nodes  # a new object each time


def test_evolve_leaves_the_old_layer_untouched():
    rng = random.Random(1)
    nodes = [_node(rng, f"n{i}") for i in range(10)]
    old = NodeIndex(nodes)
    prepare_nodes(old)
    snapshot = (list(old.nodes), dict(old.label_index()), {k: set(v) for k, v in old.label_index()["topology.kubernetes.io/zone"].items()},
                old.codes("topology.kubernetes.io/zone")[0].copy())
    new = old.evolve({"n0": None, "n3": _node(rng, "n3"), "x": _node(rng, "x")})
    assert old.nodes == snapshot[0] and old.label_index().keys() == snapshot[1].keys()
    assert {k: set(v) for k, v in old.label_index()["topology.kubernetes.io/zone"].items()} == snapshot[2]
    assert (old.codes("topology.kubernetes.io/zone")[0] == snapshot[3]).all()
    assert "n0" in old.names and "n0" not in new.names and "x" in new.names


def test_lookup_table_holds_copies_of_the_names_and_answers_as_the_nodes_do():
    """The position table's keys are fresh strings side by side, not the Node objects'
    own (scattered over the heap: a cache miss per name looked up), and it finds
    exactly what the nodes hold: -1 for a stranger, the same after an evolve."""
    rng = random.Random(9)
    nodes = [_node(rng, f"node-{i:04d}") for i in range(300)]
    layer = NodeIndex(nodes)
    names = [n.name for n in nodes]
    asked = [*rng.sample(names, len(names)), "stranger", "node-0007"]
    want = [names.index(n) if n in names else -1 for n in asked]
    assert layer.lookup(asked).tolist() == want
    assert not any(key is node.name for key, node in zip(layer._position, nodes, strict=True))
    assert layer.positions(names[::-1]).tolist() == list(range(len(names)))[::-1]
    evolved = layer.evolve({"node-0003": None, "node-new": _node(rng, "node-new")})
    got = evolved.lookup(["node-new", "node-0003", "node-0299"]).tolist()
    assert got[1] == -1 and evolved.nodes[got[0]].name == "node-new" and evolved.nodes[got[2]].name == "node-0299"


def test_position_table_keeps_a_name_orjson_will_not_write():
    from extender.state.nodeset import position_table

    assert position_table(["a", "b\ud800", "c"]) == {"a": 0, "b\ud800": 1, "c": 2}
