"""A request's candidate nodes, resolved against a cluster snapshot (`NodeNames`) or
parsed from the request itself (`Nodes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extender.model import Node
from extender.model.parse import ModelError, node_from_dict
from extender.state.nodeset import NodeSet, new_templates, template_budget
from extender.state.snapshot import ClusterSnapshot

ERR_UNPARSEABLE_NODE = "node object could not be read by the extender"


@dataclass(slots=True)
class Candidates:
    """The request's nodes resolved against cluster state (or taken from the request)."""

    nodes: NodeSet
    unknown: list[str] = field(default_factory=list)  # NodeNames the snapshot does not hold
    unparseable: list[tuple[str, str]] = field(default_factory=list)  # Nodes mode: (name, why)
    raw_by_name: dict[str, dict[str, Any]] | None = None  # Nodes mode: echo the objects


def resolve(snapshot: ClusterSnapshot, names: list[str] | None, nodes: list[dict] | None = None,
            names_key: bytes | None = None) -> Candidates:
    """`names_key` (the NodeNames array's JSON text) lets a repeated list be resolved
    once per node layer; the answer is shared, so it is never mutated. ModelError for a
    node object without a usable name (nothing to answer for)."""
    if nodes is not None:
        return _parsed(nodes)
    if names_key is not None and len(names or ()) <= len(snapshot.nodes.nodes):
        # a list longer than the cluster has repeats or unknown names: not remembered
        return snapshot.nodes.candidates(names_key, lambda: _shared(snapshot, names),
                                         lambda c: 2 * len(names_key) + 150 * len(c.nodes)
                                         + c.nodes.templates.maxsize)
    universe = snapshot.nodes
    names = names or []
    candidates = NodeSet(None, universe, names)
    if candidates.names <= universe.names:
        return Candidates(candidates)
    unknown = [n for n in names if n not in universe.by_name]
    known = [n for n in names if n in universe.by_name]
    return Candidates(NodeSet(None, universe, known), unknown)


def _shared(snapshot: ClusterSnapshot, names: list[str] | None) -> Candidates:
    cands = resolve(snapshot, names)
    # reused by many requests: worth templates, within what the cache is charged
    cands.nodes.templates = new_templates(template_budget(len(cands.nodes), cands.nodes.is_full))
    return cands


def _parsed(nodes: list[dict]) -> Candidates:
    parsed: list[Node] = []
    raw_by_name: dict[str, dict[str, Any]] = {}
    unparseable: list[tuple[str, str]] = []
    for i, raw in enumerate(nodes):
        try:
            node = node_from_dict(raw)
        except ModelError as exc:
            name = _node_name(raw)
            if not name:  # nothing to answer for: the request itself is invalid
                raise ModelError(f"Nodes.items[{i}]: {exc}") from exc
            unparseable.append((name, f"{ERR_UNPARSEABLE_NODE}: {exc}"))
            continue
        parsed.append(node)
        raw_by_name[node.name] = raw
    return Candidates(NodeSet(parsed), raw_by_name=raw_by_name, unparseable=unparseable)


def _node_name(raw: Any) -> str:
    """The name of a node object that failed to parse, if it has a usable one."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
