"""PATCH bodies and field selectors, as far as kube-scheduler's requests need them.

Written from the API server's behaviour (apimachinery `strategicpatch`, `jsonmergepatch`,
`fields` packages; read, not copied):

- **strategic merge patch** (`application/strategic-merge-patch+json`): objects merge
  key by key, `null` deletes a key; lists named in `MERGE_KEYS` merge item by item on
  their merge key (a `{"$patch": "delete"}` item removes one), other lists are
  replaced; `$setElementOrder/<list>` reorders a merged list; `$retainKeys` and other
  directives are dropped. kube-scheduler's `PatchPodStatus` sends exactly this for the
  `PodScheduled` condition and `nominatedNodeName`.
- **server-side apply** (`application/apply-patch+yaml`; client-go sends JSON, which is
  YAML): applied as a strategic merge of the applied fields (no field managers).
  kube-scheduler's preemption applies a `DisruptionTarget` condition to each victim
  this way before deleting it.
- **JSON merge patch** (`application/merge-patch+json`, RFC 7386): lists are replaced.
- **field selectors**: `a=b`, `a==b`, `a!=b` terms joined by commas over the fields the
  informers use (`status.phase!=Succeeded,status.phase!=Failed` on pods).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

# list field name -> merge key (the `patchMergeKey` tags of k8s.io/api/core/v1 the
# double's writers use); any other list is replaced whole (atomic), as upstream.
MERGE_KEYS = {
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "containers": "name",
    "initContainers": "name",
    "taints": "key",
    "ownerReferences": "uid",
}

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"


class PatchError(ValueError):
    """A patch the double cannot apply (the server answers 415 or 422)."""


def apply_patch(obj: dict, patch: Any, content_type: str) -> dict:
    """`obj` with `patch` applied (a new dict; `obj` is not changed)."""
    kind = content_type.split(";")[0].strip()
    if kind == JSON_PATCH:
        raise PatchError("the double does not support JSON patch (application/json-patch+json)")
    if not isinstance(patch, dict):
        raise PatchError("a merge patch must be a JSON object")
    if kind in (STRATEGIC, APPLY):
        return strategic_merge(obj, patch)
    if kind == MERGE:
        return merge_patch(obj, patch)
    raise PatchError(f"unsupported patch content type {content_type!r}")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: dict) -> dict:
    out = dict(target) if isinstance(target, dict) else {}
    orders = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
            continue
        if key.startswith("$"):
            continue  # $retainKeys, $patch on a map, $deleteFromPrimitiveList: not used here
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = strategic_merge(out.get(key), value)
        elif isinstance(value, list) and key in MERGE_KEYS:
            out[key] = _merge_list(out.get(key) or [], value, MERGE_KEYS[key])
        else:
            out[key] = copy.deepcopy(value)
    for key, order in orders.items():
        if isinstance(out.get(key), list) and key in MERGE_KEYS:
            out[key] = _reorder(out[key], order, MERGE_KEYS[key])
    return out


def _merge_list(current: list, patch: list, merge_key: str) -> list:
    out = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"list item without its merge key {merge_key!r}: {item!r}")
        at = next((i for i, old in enumerate(out) if old.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(strategic_merge({}, item))
        else:
            out[at] = strategic_merge(out[at], item)
    return out


def _reorder(items: list, order: list, merge_key: str) -> list:
    rank = {entry.get(merge_key): i for i, entry in enumerate(order) if isinstance(entry, dict)}
    return sorted(items, key=lambda item: rank.get(item.get(merge_key), len(rank)))


# ---- field selectors -------------------------------------------------------------------

FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName", "status.phase")


def field_value(obj: dict, path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def field_selector(text: str) -> Callable[[dict], bool] | None:
    """A predicate for `fieldSelector=text` (None when empty); PatchError when a term
    names a field the double does not index or is not `=`, `==` or `!=`."""
    terms = []
    for raw in (t.strip() for t in text.split(",")):
        if not raw:
            continue
        if "!=" in raw:
            path, value = raw.split("!=", 1)
            negate = True
        elif "=" in raw:
            path, value = raw.replace("==", "=", 1).split("=", 1)
            negate = False
        else:
            raise PatchError(f"invalid field selector term {raw!r}")
        if path not in FIELDS:
            raise PatchError(f'field label not supported: "{path}"')
        terms.append((path, value, negate))
    if not terms:
        return None

    def matches(obj: dict) -> bool:
        return all((field_value(obj, path) == value) != negate for path, value, negate in terms)

    return matches
