"""Read cluster dumps: a `kind: List` (what `kubectl get nodes,pods -A -o yaml` prints),
typed lists (`NodeList`, `PodList`), multi-document YAML, or JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.gotext import no_lone_surrogates

try:  # libyaml is an order of magnitude faster on 50k-pod dumps
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # pragma: no cover - pure-Python fallback
    from yaml import SafeLoader  # type: ignore[assignment]


class ClusterFileError(ValueError):
    """A cluster file that cannot be read or has the wrong shape."""


def _flatten(doc: Any, where: str) -> Iterator[dict[str, Any]]:
    if doc is None:
        return
    if isinstance(doc, list):
        for item in doc:
            yield from _flatten(item, where)
        return
    if not isinstance(doc, dict):
        raise ClusterFileError(f"{where}: expected Kubernetes objects, got {type(doc).__name__}")
    kind = doc.get("kind", "")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        item_kind = kind[: -len("List")]
        for item in doc.get("items") or []:
            if isinstance(item, dict) and item_kind and not item.get("kind"):
                item = {**item, "kind": item_kind}
            yield from _flatten(item, where)
        return
    yield doc


def documents(text: str | bytes) -> list[Any]:
    """The JSON document or the YAML documents of `text`, strings decoded as the API
    server decodes them: an escaped lone surrogate (``"\\ud800"``) becomes U+FFFD (Go's
    decoder; orjson refuses it and PyYAML keeps a surrogate no encoder accepts)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    escaped = b"\\u" in raw or b"\\U" in raw
    if raw.lstrip()[:1] in (b"{", b"["):
        try:
            return [orjson.loads(raw)]
        except orjson.JSONDecodeError:
            if not escaped:
                raise
            try:
                return [no_lone_surrogates(json.loads(raw))]
            except ValueError:
                pass
            raise
    docs = list(yaml.load_all(raw, Loader=SafeLoader))
    return [no_lone_surrogates(d) for d in docs] if escaped else docs


def parse_documents(text: str | bytes, where: str = "cluster file") -> list[dict[str, Any]]:
    """Parse JSON or (multi-document) YAML text into a flat list of objects."""
    try:
        docs = documents(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ClusterFileError(f"{where}: cannot parse: {exc}") from exc
    objects: list[dict[str, Any]] = []
    for doc in docs:
        objects.extend(_flatten(doc, where))
    return objects


def load_objects(path: str | Path) -> list[dict[str, Any]]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ClusterFileError(f"cannot read cluster file {str(path)!r}: {exc.strerror}") from exc
    return parse_documents(data, str(path))
