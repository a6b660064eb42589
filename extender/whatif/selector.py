"""Label selectors as `kubectl -l` writes them (apimachinery's `labels.Parse`):
comma-separated requirements `KEY=VALUE`, `KEY==VALUE`, `KEY!=VALUE`, `KEY`, `!KEY`,
`KEY in (A,B)`, `KEY notin (A,B)`; every requirement must hold. (Gt/Lt requirements of
the selector syntax are left out: `kubectl taint -l` users do not write them.)"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from extender.matching.labels import validate_label_key, validate_label_value

Matcher = Callable[[Mapping[str, str]], bool]
MAX_SELECTOR = 4096

_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


class SelectorError(ValueError):
    pass


def _split(text: str) -> list[str]:
    """Requirements split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError("unbalanced ')'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorError("unbalanced '('")
    parts.append(text[start:])
    return parts


def _check(key: str, values: list[str]) -> None:
    errors = [f"key {key!r}: {e}" for e in validate_label_key(key)]
    errors += [f"value {v!r}: {e}" for v in values for e in validate_label_value(v)]
    if errors:
        raise SelectorError("; ".join(errors))


def parse_selector(text: str) -> Matcher:
    """A matcher over a node's labels (SelectorError for a malformed selector)."""
    if len(text) > MAX_SELECTOR:
        raise SelectorError(f"longer than {MAX_SELECTOR} characters")
    tests: list[Matcher] = []
    for part in _split(text):
        if not part.strip():
            raise SelectorError("an empty requirement")
        if m := _SET.match(part):
            key, op, values = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            _check(key, values)
            wanted = frozenset(values)
            if op == "in":
                tests.append(lambda labels, k=key, w=wanted: labels.get(k) in w)
            else:
                tests.append(lambda labels, k=key, w=wanted: labels.get(k) not in w)
        elif m := _EQ.match(part):
            key, op, value = m.groups()
            _check(key, [value])
            if op == "!=":
                tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif m := _EXISTS.match(part):
            negate, key = m.groups()
            _check(key, [])
            if negate:
                tests.append(lambda labels, k=key: k not in labels)
            else:
                tests.append(lambda labels, k=key: k in labels)
        else:
            raise SelectorError(f"cannot parse requirement {part.strip()[:100]!r}")
    return lambda labels: all(test(labels) for test in tests)
