"""The one way a benchmark writes its result: indented JSON with a final newline, the
parent directory made first (`perf/results/*.json` are diffed by eye between runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_result(path: str | Path, result: Any, indent: int = 2) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent) + "\n")
    return path
