"""What the wire encoder keeps with a candidate set: the nodes' names encoded as JSON
strings (`json_names`, in `NodeSet.encoded_names`; every node layer's in its memo), and
the cache of templates and remembered answers (`NodeSet.templates`): what an entry
weighs and how many bytes a candidate set may keep. The cluster state only holds the
slots; what goes in them, and how big they may grow, is the encoder's business
(`extender.api.answers` fills them).
"""

from __future__ import annotations

import numpy as np
import orjson

from extender.caching import ByteLRU, memory_share
from extender.state.nodeset import NodeIndex, NodeSet, Reads, object_array

TEMPLATE_BYTES = 4 << 20  # encoder templates and remembered answers per candidate set
# The list of every node (each filter's NodeNames) keeps the filter answers of every
# workload that repeats (~35 B a node each): room for ~25 at 5,000 nodes, ~16 at 15,000.
FULL_TEMPLATE_BYTES = 8 << 20


def template_size(value: object) -> int:
    """Bytes an entry of `NodeSet.templates` holds (answers, numpy templates, tuples)."""
    if isinstance(value, tuple):
        return 64 + sum(template_size(v) for v in value)
    if isinstance(value, bytes):
        return 64 + len(value)
    return 64 + getattr(value, "nbytes", 0)


def new_templates(limit: int = TEMPLATE_BYTES) -> ByteLRU:
    """`NodeSet.templates`: bounded by `template_size` bytes, not exported (charged to
    the candidate set up front). A value larger than the whole cache is not stored
    (`ByteLRU.put`): the caller answers with what it computed, so an answer never
    depends on how small the cache is (a retried request answers as the first did)."""
    return ByteLRU("templates", max_bytes=limit, accounted=False)


def template_budget(nodes: int, full: bool = False) -> int:
    """Template bytes allowed for a candidate set of `nodes` names: enough for its
    encoded names and a few answers, charged up front to the candidate-set cache.
    `full` (the set is every node: what kube-scheduler sends to every filter) gets
    room for the filter answers of every workload in the queue: answers are kept by the
    exact verdict they encode, and under churn the verdicts of pods that do not spread
    repeat pod after pod while a smaller budget evicted them in a cycle."""
    if full:  # an eighth of the candidate-set cache at most: the set must still fit in it
        return min(FULL_TEMPLATE_BYTES, 65536 + 1000 * nodes, memory_share("candidate-sets") // 8)
    # Other lists (prioritize's: each workload's feasible nodes) hold a score template
    # or two (~45 B a node each) and an answer: charged 400 B a node, up to 4 MB, a
    # dozen of them filled the cache at 15,000 nodes, and the workloads' lists evicted
    # each other in a cycle (each prioritize then resolved its list again).
    return min(TEMPLATE_BYTES, 65536 + 150 * nodes)


def json_names(nodes: NodeSet) -> np.ndarray:
    """The candidates' names as JSON strings (bytes), an object array in request order:
    gathered from the universe's (`universe_json_names`), so a new candidate list (the
    feasible nodes of a pod that spreads) costs a gather, not an encoding per name."""
    names = nodes.encoded_names
    if names is None:
        names = nodes.encoded_names = universe_json_names(nodes.universe)[nodes.uidx]
    return names


def universe_json_names(universe: NodeIndex) -> np.ndarray:
    """Every node of the layer's name as a JSON string (bytes), in position order:
    encoded once per node layer and kept while names and places stand
    (`Reads.TAINTS`)."""
    return universe.memo(("json names",), lambda: object_array(
        [orjson.dumps(n.name) for n in universe.nodes]), Reads.TAINTS)
