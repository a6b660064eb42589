"""Read cluster dumps: a `kind: List` (what `kubectl get nodes,pods -A -o yaml` prints),
typed lists (`NodeList`, `PodList`), multi-document YAML, or JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from extender.gotext import no_lone_surrogates

try:  # libyaml is an order of magnitude faster on 50k-pod dumps
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # pragma: no cover - pure-Python fallback
    from yaml import SafeLoader  # type: ignore[assignment]


class ClusterFileError(ValueError):
    """A cluster file that cannot be read or has the wrong shape."""


# Larger files are parsed in small steps, so that other threads of the worker (probes
# included) get the GIL in between: orjson parses a whole JSON document in one call
# (~0.1 s at 10 MB), hence an item at a time; YAML's leftovers are freed gradually.
INCREMENTAL_JSON_BYTES = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


try:  # libyaml's events, composed into nodes by PyYAML's Python composer (below)
    from yaml.cyaml import CParser as _Parser
except ImportError:  # pragma: no cover - pure-Python fallback
    from yaml.parser import Parser as _Parser  # type: ignore[assignment]


class _GradualLoader(_Parser, Composer, SafeConstructor, Resolver):  # type: ignore[misc, valid-type]
    """The safe loader (libyaml's parser), in steps other threads can come in between:
    libyaml composes a whole document's node graph in one call holding the GIL (~1 s at
    10 MB, measured with py-spy in a worker), so PyYAML's Python composer builds it from
    libyaml's events instead; and what a document leaves behind (its node graph, the
    node -> object map) is freed a piece at a time, not in one statement."""

    def __init__(self, stream: str | bytes) -> None:
        _Parser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)

    # the Python composer, not libyaml's (CParser defines these too)
    check_node = Composer.check_node
    get_node = Composer.get_node
    compose_document = Composer.compose_document
    compose_node = Composer.compose_node

    def construct_document(self, node: yaml.Node) -> Any:
        constructed = self.constructed_objects  # replaced by a new dict at the end
        data = super().construct_document(node)
        while constructed:
            for _ in range(min(256, len(constructed))):
                constructed.popitem()
        return data


def _yaml_documents(text: str | bytes) -> list[Any]:
    if len(text) < INCREMENTAL_JSON_BYTES:
        return list(yaml.load_all(text, Loader=SafeLoader))
    loader = _GradualLoader(text)
    docs = []
    try:
        while loader.check_node():
            node = loader.get_node()
            docs.append(loader.construct_document(node))
            _free_node(node)
    finally:
        loader.dispose()
    return docs


def _free_node(node: yaml.Node) -> None:
    """Take a composed node graph apart one child at a time (small subtrees are freed
    whole), so that reference counting frees it in small steps."""
    stack = [node]
    while stack:
        children = stack.pop().value
        if not isinstance(children, list):
            continue
        while children:
            child = children.pop()
            if isinstance(child, tuple):  # a mapping's (key, value)
                child = child[1]
            if isinstance(child.value, list) and len(child.value) > 16:
                stack.append(child)
            del child


def _json_document(text: str | bytes) -> Any:
    if len(text) < INCREMENTAL_JSON_BYTES:
        return orjson.loads(text)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError(f"not UTF-8: {exc.reason}", "", exc.start) from None
    pos = _WS.match(text).end()
    opening = text[pos:pos + 1]
    if opening == "[":
        value, pos = _json_array(text, pos)
    elif opening == "{":
        value, pos = _json_object(text, pos)
    else:
        return orjson.loads(text)  # a scalar: orjson says what is wrong with it
    if _WS.match(text, pos).end() != len(text):
        raise json.JSONDecodeError("extra data after the document", text, pos)
    return value


def _json_object(text: str, pos: int) -> tuple[dict[str, Any], int]:
    """The object at `pos` ('{'), each member decoded on its own, `items` arrays item
    by item (what a `kind: List` dump is made of)."""
    out: dict[str, Any] = {}
    pos = _WS.match(text, pos + 1).end()
    if text[pos:pos + 1] == "}":
        return out, pos + 1
    while True:
        if text[pos:pos + 1] != '"':
            raise json.JSONDecodeError("expected a member name", text, pos)
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _WS.match(text, pos).end()
        if text[pos:pos + 1] != ":":
            raise json.JSONDecodeError("expected ':'", text, pos)
        pos = _WS.match(text, pos + 1).end()
        if key == "items" and text[pos:pos + 1] == "[":
            out[key], pos = _json_array(text, pos)
        else:
            out[key], pos = _DECODER.raw_decode(text, pos)
        done, pos = _after_value(text, pos, "}")
        if done:
            return out, pos


def _json_array(text: str, pos: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    pos = _WS.match(text, pos + 1).end()
    if text[pos:pos + 1] == "]":
        return out, pos + 1
    while True:
        item, pos = _DECODER.raw_decode(text, pos)
        out.append(item)
        done, pos = _after_value(text, pos, "]")
        if done:
            return out, pos


def _after_value(text: str, pos: int, close: str) -> tuple[bool, int]:
    """After a member or an item: (True, past `close`) at the container's end, or
    (False, the next value's start) after a comma."""
    pos = _WS.match(text, pos).end()
    mark = text[pos:pos + 1]
    if mark == close:
        return True, pos + 1
    if mark != ",":
        raise json.JSONDecodeError(f"expected ',' or '{close}'", text, pos)
    return False, _WS.match(text, pos + 1).end()


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
            doc = _json_document(raw)
        except (orjson.JSONDecodeError, json.JSONDecodeError):
            if not escaped:
                raise
            try:
                return [no_lone_surrogates(json.loads(raw))]
            except ValueError:
                pass
            raise
        # the step-wise parser (large files) keeps lone surrogates, as json does
        return [no_lone_surrogates(doc) if escaped and len(raw) >= INCREMENTAL_JSON_BYTES else doc]
    docs = _yaml_documents(raw)
    return [no_lone_surrogates(d) for d in docs] if escaped else docs


def parse_documents(text: str | bytes, where: str = "cluster file") -> list[dict[str, Any]]:
    """Parse JSON or (multi-document) YAML text into a flat list of objects."""
    try:
        docs = documents(text)
    except (orjson.JSONDecodeError, json.JSONDecodeError, RecursionError, yaml.YAMLError) as exc:
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
