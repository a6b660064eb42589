"""The node layer's indexes by taint set and by label: built once per layer
(`group_by_taints`, `build_label_index`), and patched when a layer evolves into the next
(`NodeIndex.evolve`) in O(the changed nodes): each step of that patch is one function
here, so the layer's class says what it keeps and this module how a change reaches it.

Positions stay put across a patch (an added node is appended; a deleted node's slot is
taken by the last node), so the per-key label codes are patched, not rebuilt. A value
that lost its last node keeps its code (no node maps to it: harmless).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from extender.model import Node, Taint

TaintGroups = dict[tuple[Taint, ...], list[Node]]
LabelIndex = dict[str, dict[str, set[str]]]


def group_by_taints(nodes: Iterable[Node]) -> TaintGroups:
    groups: TaintGroups = {}
    for node in nodes:
        groups.setdefault(node.taints, []).append(node)
    return groups


def build_label_index(nodes: Iterable[Node]) -> LabelIndex:
    index: LabelIndex = {}
    for node in nodes:
        name = node.name
        for key, value in node.labels.items():
            index.setdefault(key, {}).setdefault(value, set()).add(name)
    return index


def patched_groups(groups: TaintGroups, removed: list[Node], added: list[Node]) -> TaintGroups:
    """Taint groups with `removed` taken out and `added` put in (touched lists copied)."""
    out = dict(groups)
    fresh: set[tuple[Taint, ...]] = set()

    def own(taints: tuple[Taint, ...]) -> list[Node]:
        if taints not in fresh:
            out[taints] = list(out.get(taints, ()))
            fresh.add(taints)
        return out[taints]

    for node in removed:
        members = own(node.taints)
        for i, member in enumerate(members):
            if member is node:
                del members[i]
                break
        if not members:
            del out[node.taints]
            fresh.discard(node.taints)
    for node in added:
        own(node.taints).append(node)
    return out


def patched_label_index(
    index: LabelIndex, gone: list[tuple[str, str, str]], came: list[tuple[str, str, str]]
) -> LabelIndex:
    """The inverted label index without the (node, key, value) pairs `gone` and with
    those that `came` (only the touched entries are copied)."""
    out = dict(index)
    fresh_keys: set[str] = set()
    fresh_sets: set[tuple[str, str]] = set()

    def names(key: str, value: str) -> set[str]:
        if key not in fresh_keys:
            out[key] = dict(out.get(key, {}))
            fresh_keys.add(key)
        by_value = out[key]
        if (key, value) not in fresh_sets:
            by_value[value] = set(by_value.get(value, ()))
            fresh_sets.add((key, value))
        return by_value[value]

    for name, key, value in gone:
        members = names(key, value)
        members.discard(name)
        if not members:
            del out[key][value]
            fresh_sets.discard((key, value))
            if not out[key]:
                del out[key]
                fresh_keys.discard(key)
    for name, key, value in came:
        names(key, value).add(name)
    return out


def apply_changes(
    nodes: list[Node], by_name: dict[str, Node], position: dict[str, int], changes: Mapping[str, Node | None],
) -> tuple[set[int], list[Node], list[Node]]:
    """Apply `changes` (name -> new Node, or None for a deletion) to copies of a layer's
    node list, name table and position table, in place. Returns the positions whose node
    changed, the nodes that left (deleted or replaced) and those that came (added or
    replacing)."""
    moved: set[int] = set()  # positions whose node changed
    removed: list[Node] = []
    added: list[Node] = []
    for name, node in changes.items():
        old = by_name.get(name)
        if node is None:
            if old is None:
                continue
            i = position.pop(name)
            last = nodes.pop()
            if i < len(nodes):
                nodes[i] = last
                position[last.name] = i
                moved.add(i)
            moved.discard(len(nodes))
            del by_name[name]
            removed.append(old)
        elif old is None:
            position[name] = len(nodes)
            moved.add(len(nodes))
            nodes.append(node)
            by_name[name] = node
            added.append(node)
        else:
            nodes[position[name]] = node
            moved.add(position[name])
            by_name[name] = node
            removed.append(old)
            added.append(node)
    return moved, removed, added


def same_places(removed: list[Node], added: list[Node]) -> list[tuple[Node, Node]] | None:
    """(old, new) pairs when the change replaced nodes in place (same names, same
    positions: what the layer's candidate sets and taint memo need to stay valid), else
    None."""
    pairs = list(zip(removed, added, strict=True)) if len(removed) == len(added) else None
    if pairs is not None and all(o.name == n.name for o, n in pairs):
        return pairs
    return None


def patched_unschedulable(cordoned: frozenset[str], removed: list[Node], added: list[Node]) -> frozenset[str]:
    """The cordoned names after the change (`cordoned` itself when unchanged)."""
    after = set(cordoned)
    after.difference_update(n.name for n in removed)
    after.update(n.name for n in added if n.unschedulable)
    return cordoned if after == cordoned else frozenset(after)


def label_changes(
    removed: list[Node], added: list[Node]
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """The (node, key, value) label pairs the change took away and those it brought."""
    gone: list[tuple[str, str, str]] = []
    came: list[tuple[str, str, str]] = []
    olds = {n.name: n for n in removed}
    for node in added:
        old = olds.pop(node.name, None)
        before = old.labels.items() if old is not None else {}.items()
        gone += [(node.name, k, v) for k, v in before - node.labels.items()]
        came += [(node.name, k, v) for k, v in node.labels.items() - before]
    gone += [(n.name, k, v) for n in olds.values() for k, v in n.labels.items()]
    return gone, came


def patched_codes(
    codes_by_key: Mapping[str, tuple[np.ndarray, list[str]]], code_of_by_key: Mapping[str, dict[str, int]],
    nodes: list[Node], moved: Iterable[int],
) -> tuple[dict[str, tuple[np.ndarray, list[str]]], dict[str, dict[str, int]]]:
    """Each key's label codes (`NodeIndex.codes`) and value -> code table with the
    `moved` positions recoded from `nodes`; new values get the next codes."""
    new_codes: dict[str, tuple[np.ndarray, list[str]]] = {}
    new_code_of: dict[str, dict[str, int]] = {}
    for key, (codes, values) in codes_by_key.items():
        codes = np.resize(codes, len(nodes)) if len(codes) != len(nodes) else codes.copy()
        values = list(values)
        code_of = dict(code_of_by_key[key]) if key in code_of_by_key else {v: c for c, v in enumerate(values)}
        for i in moved:
            value = nodes[i].labels.get(key)
            if value is None:
                codes[i] = -1
                continue
            code = code_of.get(value)
            if code is None:
                code = code_of[value] = len(values)
                values.append(value)
            codes[i] = code
        new_codes[key] = (codes, values)
        new_code_of[key] = code_of
    return new_codes, new_code_of
