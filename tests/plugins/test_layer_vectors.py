"""The vector fast paths over a node layer against their per-node reference, on random
layers and on layers evolved from them (relabels, taint changes, nodes added and
removed: label codes patched, taint tables carried or rebuilt):

- `matching_mask(layer)` of node-selector requirements, terms, selectors and the
  required affinity (label codes, once per distinct value) against `matches(node)`;
- `TaintTable` (once per distinct taint) against the per-node taint tuples.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.matching.nodeselector import RequirementError, compile_term, required_affinity
from extender.model import Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Taint
from extender.state.nodeset import NodeIndex

KEYS = ["zone", "gen", "kernel", "kubernetes.io/hostname"]
VALUES = ["a", "b", "1", "10", "-5", "007", "1.2.3", "v1.3", "2.0.0-rc.1", ""]
OPS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "SemverGt", "SemverLt", "SemverEq"]
TAINTS = [Taint("k", v, e) for v in ("", "x", "800") for e in ("NoSchedule", "PreferNoSchedule", "NoExecute")]

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)
taints_st = st.lists(st.sampled_from(TAINTS), max_size=3).map(tuple)
names_st = st.lists(st.sampled_from([f"n{i}" for i in range(12)] + [""]), min_size=1, max_size=10, unique=True)


@st.composite
def layers(draw) -> tuple[NodeIndex, list[NodeIndex]]:
    """A layer and its evolutions (each built from the one before)."""
    names = draw(names_st)
    layer = NodeIndex([Node(n, draw(labels_st), draw(taints_st)) for n in names])
    layer.codes("zone")  # built before the evolutions: patched, not rebuilt
    layer.taint_table()
    evolved = []
    for _ in range(draw(st.integers(0, 3))):
        current = evolved[-1] if evolved else layer
        changes: dict[str, Node | None] = {}
        for name in draw(st.lists(st.sampled_from([*current.by_name, "new-1", "new-2"]), max_size=3, unique=True)):
            if draw(st.booleans()) and name in current.by_name:
                changes[name] = None
            else:
                changes[name] = Node(name, draw(labels_st), draw(taints_st))
        evolved.append(current.evolve(changes))
    return layer, evolved


requirement_st = st.builds(NodeSelectorRequirement, st.sampled_from(KEYS), st.sampled_from(OPS),
                           st.lists(st.sampled_from(VALUES), max_size=2).map(tuple))
field_st = st.builds(NodeSelectorRequirement, st.sampled_from(["metadata.name", "metadata.other"]),
                     st.sampled_from(["In", "NotIn"]), st.sampled_from(["n1", "n2", ""]).map(lambda v: (v,)))
term_st = st.builds(NodeSelectorTerm, st.lists(requirement_st, max_size=2).map(tuple),
                    st.lists(field_st, max_size=1).map(tuple))


@settings(max_examples=300, deadline=None)
@given(layers(), st.lists(term_st, max_size=3), st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES),
                                                                 max_size=1))
def test_label_masks_equal_the_per_node_matches(layer_and_evolved, terms, node_selector):
    layer, evolved = layer_and_evolved
    affinity = required_affinity(node_selector, (NodeSelector(tuple(terms)),), True)
    for current in (layer, *evolved):
        want = [affinity.matches(n) for n in current.nodes]
        assert affinity.matching_mask(current).tolist() == want
        for term in terms:
            try:
                compiled = compile_term(term, True)
            except RequirementError:
                continue
            assert compiled.matching_mask(current).tolist() == [compiled.matches(n) for n in current.nodes]


@settings(max_examples=300, deadline=None)
@given(layers(), st.sets(st.sampled_from(TAINTS)))
def test_taint_tables_equal_the_per_node_taints(layer_and_evolved, flagged):
    layer, evolved = layer_and_evolved
    for current in (layer, *evolved):
        table = current.taint_table()
        flags = table.flags(flagged.__contains__)
        assert table.any_per_node(flags).tolist() == [any(t in flagged for t in n.taints) for n in current.nodes]
        counts = table.count_per_node(flags)
        assert counts.dtype == np.int64
        assert counts.tolist() == [sum(t in flagged for t in n.taints) for n in current.nodes]
