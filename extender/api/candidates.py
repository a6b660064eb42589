"""A request's candidate nodes, resolved against a cluster snapshot (`NodeNames`) or
parsed from the request itself (`Nodes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from typing import Any

from extender.api.templatecache import new_templates, template_budget
from extender.model import Node
from extender.model.parse import ModelError, node_from_dict
from extender.state.nodeset import NodeSet
from extender.state.snapshot import ClusterSnapshot

ERR_UNPARSEABLE_NODE = "node object could not be read by the extender"


@dataclass(slots=True)
class Candidates:
    """The request's nodes resolved against cluster state (or taken from the request)."""

    nodes: NodeSet
    unknown: list[str] = field(default_factory=list)  # NodeNames the snapshot does not hold
    unparseable: list[tuple[str, str]] = field(default_factory=list)  # Nodes mode: (name, why)
    raw_by_name: dict[str, dict[str, Any]] | None = None  # Nodes mode: echo the objects
    served: int = 0  # requests a shared set answered (1: a list this layer had not seen)


def resolve(snapshot: ClusterSnapshot, names: list[str] | None, nodes: list[dict] | None = None,
            names_key: bytes | None = None) -> Candidates:
    """`names_key` (the NodeNames array's JSON text) lets a repeated list be resolved
    once per node layer; the answer is shared, so it is never mutated. ModelError for a
    node object without a usable name (nothing to answer for)."""
    if nodes is not None:
        return _parsed(nodes)
    if names_key is not None and len(names or ()) <= len(snapshot.nodes.nodes):
        # a list longer than the cluster has repeats or unknown names: not remembered
        cands = snapshot.nodes.candidates(names_key, lambda: _shared(snapshot, names), charged(names_key))
        cands.served += 1  # a race only miscounts: it decides an optimisation, never an answer
        return cands
    universe = snapshot.nodes
    names = names or []
    uidx = universe.lookup(names)
    if not len(uidx) or uidx.min() >= 0:
        return Candidates(NodeSet(None, universe, names, uidx))
    known = uidx >= 0
    return Candidates(NodeSet(None, universe, list(compress(names, known.tolist())), uidx[known]),
                      list(compress(names, (~known).tolist())))


def charged(key: bytes):
    """What a shared candidate set is charged in the layer's cache: its key's text, ~150 B
    a node, its template budget."""
    return lambda cands: 2 * len(key) + 150 * len(cands.nodes) + cands.nodes.templates.max_bytes


def _shared(snapshot: ClusterSnapshot, names: list[str] | None) -> Candidates:
    cands = resolve(snapshot, names)
    # reused by many requests: worth templates, within what the cache is charged
    full = len(cands.nodes) == len(snapshot.nodes.nodes) and not cands.unknown
    cands.nodes.templates = new_templates(template_budget(len(cands.nodes), full))
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
