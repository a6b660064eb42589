"""`extender validate`: the webhook's checks, offline, over manifest files for CI.

Inputs are files, directories (their `*.yaml`, `*.yml`, `*.json` files, sorted; with
`recursive`, as kubectl's `-R`, also those of subdirectories) or `-` (stdin): multi-document YAML, JSON, `kind: List` and typed lists, Helm output. Each
problem is one compiler-style line, `file:line:Kind/name: field: message` (`line` is the
line, from 1, where the object's YAML document starts, so editors and CI annotators
point at it; 1 for JSON); warnings go the same way with `warning:` before the field.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.features import FeatureGates
from extender.state.loader import _flatten, documents
from extender.validation.workloads import Profiles, check_object

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class Report:
    objects: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # files that cannot be read or parsed

    @property
    def error_count(self) -> int:
        return len(self.problems) + sum(len(o["errors"]) for o in self.objects)


def _inputs(paths: list[str], recursive: bool) -> Iterator[tuple[str, bytes | None, str | None]]:
    """(display name, bytes or None, error) per input file."""
    for raw in paths:
        if raw == "-":
            yield "-", sys.stdin.buffer.read(), None
            continue
        path = Path(raw)
        if path.is_dir():
            found = path.rglob("*") if recursive else path.glob("*")
            files = sorted(p for p in found if p.is_file() and p.suffix in SUFFIXES)
        else:
            files = [path]
        for f in files:
            try:
                yield str(f), f.read_bytes(), None
            except OSError as exc:
                yield str(f), None, f"cannot read: {exc.strerror}"


def _documents(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(document number from 1, the line it starts on, the document)."""
    docs = documents(data)
    lines = [1] * len(docs) if data.lstrip()[:1] in (b"{", b"[") else _start_lines(data)
    for number, (line, doc) in enumerate(zip(lines, docs, strict=True), start=1):
        yield number, line, doc


def _start_lines(data: bytes) -> list[int]:
    """The line (from 1) of each YAML document's first node, past comments and `---`."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    lines, pending = [], False
    for event in yaml.parse(data, Loader=loader):
        if isinstance(event, yaml.DocumentStartEvent):
            pending = True
        elif pending and isinstance(event, yaml.NodeEvent):
            lines.append(event.start_mark.line + 1)
            pending = False
    return lines


def validate_paths(paths: list[str], prefix: str, gates: FeatureGates, recursive: bool = False,
                   profiles: Profiles | None = None) -> Report:
    """`profiles` (`--scheduler-config`): warnings by the pods' own profile too."""
    report = Report()
    for name, data, error in _inputs(paths, recursive):
        if data is None:
            report.problems.append(f"{name}: error: {error}")
            continue
        try:
            docs = list(_documents(data))
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            report.problems.append(f"{name}: error: cannot parse: {' '.join(str(exc).split())}")
            continue
        for number, line, doc in docs:
            try:
                objects = list(_flatten(doc, f"{name}:{line}"))
            except ValueError as exc:
                report.problems.append(f"{exc}")
                continue
            for obj in objects:
                check = check_object(obj, prefix, gates, profiles)
                if not check.checked:
                    continue
                report.objects.append({
                    "file": name, "document": number, "line": line, "kind": check.kind, "name": check.name,
                    "namespace": check.namespace, "errors": [str(e) for e in check.errors],
                    "warnings": list(check.warnings),
                })
    return report


def render_text(report: Report) -> str:
    lines = list(report.problems)
    for o in report.objects:
        where = f"{o['file']}:{o['line']}:{o['kind']}/{o['name']}"
        lines += [f"{where}: {e}" for e in o["errors"]]
        lines += [f"{where}: warning: {w}" for w in o["warnings"]]
    checked = len(report.objects)
    lines.append(f"{checked} object(s) checked, {report.error_count} error(s)")
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    body = {"objects": report.objects, "problems": report.problems, "errorCount": report.error_count}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"
