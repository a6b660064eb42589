"""Node selector matching: `labels.Requirement`, `LazyErrorNodeSelector`,
`RequiredNodeAffinity` and `PreferredSchedulingTerms` from component-helpers, plus the
extender's `SemverGt/Lt/Eq` operators (KEP-5721). The operators that compare a label
with a value (Gt, Lt, the Semver family) are records in `extender.matching.operators`.

Each requirement can answer three ways: `matches(node)` for one node (the reference
path), `matching_names(index, universe)` as a set computed from the inverted label
index, and `matching_mask(layer)` as a bool vector over a node layer (`NodeIndex`),
judged once per distinct label value and spread to the nodes by their label codes (the
fast path: no Python loop over nodes). Selectors are immutable values, so parsing is
cached per distinct selector.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from extender.caching import OnFirstUse
from extender.features import FeatureGates
from extender.matching.labels import validate_label_key, validate_label_value
from extender.matching.numeric import go_quote
from extender.matching.operators import (
    EXISTENCE_OPERATORS,
    SELECTOR_OPERATORS,
    SET_OPERATORS,
    enabled,
)
from extender.model import Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from extender.state.nodeset import LabelIndex

#: Selectors are compiled with the Semver gate alone (the only gate a selector operator
#: has); the other gates read as on.
_GATES = {True: FeatureGates(), False: FeatureGates(semver_operators=False)}
NODE_FIELD_NAME = "metadata.name"


class RequirementError(ValueError):
    """A requirement that does not parse: its term never matches (lazy errors)."""


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str
    values: frozenset[str]
    #: a comparison operator's value as its record read it; `compare`, its comparison
    wanted: object = None
    compare: Callable[[str, object], bool] | None = field(default=None, compare=False)

    def matches_value(self, present: bool, value: str) -> bool:
        op = self.operator
        if op == "In":
            return present and value in self.values
        if op == "NotIn":
            return not present or value not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        return present and self.compare(value, self.wanted)  # type: ignore[misc]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        return self.matches_value(value is not None, value or "")

    def describe(self) -> str:
        """`key Op [values]` as written (values sorted: they are a set here)."""
        if self.operator in EXISTENCE_OPERATORS:
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} [{', '.join(sorted(self.values))}]"

    def why_not(self, labels: Mapping[str, str]) -> str:
        """Why this requirement is false for a node's labels (explain output)."""
        value = labels.get(self.key)
        seen = "the node has no such label" if value is None else f"the node's value is {go_quote(value)}"
        return f"{self.describe()}: {seen}"

    def matching_names(self, index: LabelIndex, universe: frozenset[str]) -> frozenset[str] | set[str]:
        by_value = index.get(self.key, {})
        op = self.operator
        if op in SET_OPERATORS:
            hit: set[str] = set()
            for value in self.values:
                hit |= by_value.get(value, set())
            return hit if op == "In" else universe - hit
        present: set[str] = set()
        if op in EXISTENCE_OPERATORS:
            for names in by_value.values():
                present |= names
            return present if op == "Exists" else universe - present
        for value, names in by_value.items():
            if self.matches_value(True, value):
                present |= names
        return present


    def matching_mask(self, layer) -> np.ndarray:
        """`matches` for every node of `layer` (a NodeIndex), by label code: In/NotIn by
        code lookups, the other operators once per distinct value of the key."""
        codes, values = layer.codes(self.key)
        op = self.operator
        by_value = np.zeros(len(values) + 1, dtype=bool)  # last slot: code -1, no such label
        if op in SET_OPERATORS:
            code_of = layer.code_of(self.key)
            by_value[[code_of[v] for v in self.values if v in code_of]] = True
            if op == "NotIn":
                by_value = ~by_value
        elif op in EXISTENCE_OPERATORS:
            by_value[:-1] = op == "Exists"
            by_value[-1] = op == "DoesNotExist"
        else:
            by_value[:-1] = np.fromiter((self.matches_value(True, v) for v in values), dtype=bool, count=len(values))
        return by_value[codes]


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """`fields.Selector` requirement: only `metadata.name` has a value; others read "". """

    key: str
    operator: str  # In or NotIn, exactly one value
    value: str

    def _field(self, name: str) -> str:
        return name if self.key == NODE_FIELD_NAME else ""

    def matches(self, node: Node) -> bool:
        return (self._field(node.name) == self.value) == (self.operator == "In")

    def matching_mask(self, layer) -> np.ndarray:
        """`matches` for every node of `layer` (nodes without a name: see CompiledTerm)."""
        equal = np.zeros(len(layer.nodes), dtype=bool)
        if self.key == NODE_FIELD_NAME:
            if self.value in layer.by_name:
                equal[layer.positions([self.value])] = True
        elif self.value == "":
            equal[:] = True
        return equal if self.operator == "In" else ~equal

    def matching_names(self, universe: frozenset[str]) -> frozenset[str] | set[str]:
        if self.key == NODE_FIELD_NAME:
            equal: frozenset[str] | set[str] = {self.value} & universe
        else:
            equal = universe if self.value == "" else frozenset()
        return equal if self.operator == "In" else universe - equal


def _parse_label_requirement(req: NodeSelectorRequirement, semver_enabled: bool) -> LabelRequirement:
    errors = list(validate_label_key(req.key))
    op, values = req.operator, req.values
    rule = SELECTOR_OPERATORS.get(op)
    wanted = None
    if op in SET_OPERATORS:
        if not values:
            errors.append("for 'in', 'notin' operators, values set can't be empty")
    elif op in EXISTENCE_OPERATORS:
        if values:
            errors.append("values set must be empty for exists and does not exist")
    elif rule is not None and enabled(rule.gate, _GATES[semver_enabled]):
        if len(values) != 1:
            errors.append(rule.count_error)
        else:
            try:
                wanted = rule.read(values[0])
            except ValueError as exc:
                errors.append(str(exc))
    else:
        errors.append(f"operator: Unsupported value: {op!r}")
    if rule is None or rule.label_values:
        for value in values:
            errors.extend(validate_label_value(value))
    if errors:
        raise RequirementError(f"key {req.key!r}: " + "; ".join(errors))
    return LabelRequirement(req.key, op, frozenset(values), wanted, rule.compare if rule is not None else None)


def _parse_field_requirement(req: NodeSelectorRequirement) -> FieldRequirement:
    if req.operator not in SET_OPERATORS:
        raise RequirementError(
            f"field {req.key!r}: operator: Unsupported value: {req.operator!r}: "
            'supported values: "In", "NotIn"'
        )
    if len(req.values) != 1:
        raise RequirementError(f"field {req.key!r}: values: Invalid value: must have one element")
    return FieldRequirement(req.key, req.operator, req.values[0])


@dataclass(frozen=True, slots=True)
class CompiledTerm:
    expressions: tuple[LabelRequirement, ...]
    fields: tuple[FieldRequirement, ...]

    def matches(self, node: Node) -> bool:
        labels = node.labels
        for req in self.expressions:
            if not req.matches(labels):
                return False
        if node.name:
            for req in self.fields:
                if not req.matches(node):
                    return False
        return True

    def matching_names(self, index: LabelIndex, universe: frozenset[str]) -> frozenset[str] | set[str]:
        result: frozenset[str] | set[str] = universe
        for req in self.expressions:
            result = result & req.matching_names(index, universe)
            if not result:
                return result
        if self.fields:
            nameless = "" in result  # a node without a name ignores matchFields
            for req in self.fields:
                result = result & req.matching_names(universe)
            if nameless:
                result = result | {""}
        return result


    def matching_mask(self, layer) -> np.ndarray:
        result = np.ones(len(layer.nodes), dtype=bool)
        for req in self.expressions:
            result &= req.matching_mask(layer)
        if self.fields:
            nameless = result.copy() if "" in layer.by_name else None  # a nameless node ignores matchFields
            for req in self.fields:
                result &= req.matching_mask(layer)
            if nameless is not None:
                at = layer.positions([""])
                result[at] = nameless[at]
        return result


def compile_term(term: NodeSelectorTerm, semver_enabled: bool) -> CompiledTerm:
    """Parse one term eagerly; raise RequirementError on the first invalid requirement."""
    exprs = tuple(_parse_label_requirement(r, semver_enabled) for r in term.match_expressions)
    fields = tuple(_parse_field_requirement(r) for r in term.match_fields)
    return CompiledTerm(exprs, fields)


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """`LazyErrorNodeSelector`: valid terms are ORed; broken terms never match."""

    terms: tuple[CompiledTerm, ...]
    errors: tuple[str, ...]

    def matches(self, node: Node) -> bool:
        return any(term.matches(node) for term in self.terms)

    def matching_names(self, index: LabelIndex, universe: frozenset[str]) -> set[str]:
        hit: set[str] = set()
        for term in self.terms:
            hit |= term.matching_names(index, universe)
        return hit

    def matching_mask(self, layer) -> np.ndarray:
        hit = np.zeros(len(layer.nodes), dtype=bool)
        for term in self.terms:
            hit |= term.matching_mask(layer)
        return hit

    def labels_only(self) -> CompiledSelector:
        """The selector as `CheckNodeAffinity` applies it (a PersistentVolume's affinity
        against a node built from labels alone): `matchFields` restrict nothing, so a term
        of fields only matches every node."""
        return CompiledSelector(tuple(CompiledTerm(t.expressions, ()) for t in self.terms), self.errors)

    def why_not(self, labels: Mapping[str, str]) -> str:
        """Why no term matches a node's labels: each term's first false requirement, and
        the terms that never match because they do not parse (explain output)."""
        reasons = []
        for term in self.terms:
            failed = next((r for r in term.expressions if not r.matches(labels)), None)
            if failed is not None:
                reasons.append(failed.why_not(labels))
        reasons += [f"invalid term never matches: {e}" for e in self.errors]
        if not reasons:
            return "no term matches"
        return reasons[0] if len(reasons) == 1 else "no term matches: " + "; ".join(reasons)


compiled_selectors = OnFirstUse("node-selectors", max_entries=4096)


def selector_bytes(selector: NodeSelector) -> int:
    """Estimated memory of a selector and its compiled form (the key holds the former)."""
    size = 256
    for term in selector.terms:
        for req in term.match_expressions + term.match_fields:
            size += 200 + len(req.key) + sum(60 + len(v) for v in req.values)
    return 3 * size


def compile_selector(selector: NodeSelector, semver_enabled: bool = True) -> CompiledSelector:
    """Compiled once per distinct selector, in a byte-bounded cache (pods send them)."""
    cache = compiled_selectors()
    key = (selector, semver_enabled)
    hit = cache.get(key)
    if hit is None:
        hit = _compile_selector(selector, semver_enabled)
        cache.put(key, hit, selector_bytes(selector))
    return hit


def _compile_selector(selector: NodeSelector, semver_enabled: bool) -> CompiledSelector:
    terms, errors = [], []
    for term in selector.terms:
        if not term.match_expressions and not term.match_fields:
            continue  # a nil or empty term matches no objects
        try:
            terms.append(compile_term(term, semver_enabled))
        except RequirementError as exc:
            errors.append(str(exc))
    return CompiledSelector(tuple(terms), tuple(errors))


@dataclass(frozen=True, slots=True)
class RequiredAffinity:
    """`RequiredNodeAffinity`: nodeSelector AND every required selector."""

    node_selector: tuple[tuple[str, str], ...]
    selectors: tuple[CompiledSelector, ...]

    def matches(self, node: Node) -> bool:
        labels = node.labels
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        return all(sel.matches(node) for sel in self.selectors)

    def matching_names(self, index: LabelIndex, universe: frozenset[str]) -> frozenset[str] | set[str]:
        result: frozenset[str] | set[str] = universe
        for key, value in self.node_selector:
            result = result & index.get(key, {}).get(value, set())
        for sel in self.selectors:
            if not result:
                break
            result = result & sel.matching_names(index, universe)
        return result

    def matching_mask(self, layer) -> np.ndarray:
        result = np.ones(len(layer.nodes), dtype=bool)
        for key, value in self.node_selector:
            codes, _ = layer.codes(key)
            code = layer.code_of(key).get(value)
            if code is None:
                return np.zeros(len(layer.nodes), dtype=bool)
            result &= codes == code
        for sel in self.selectors:
            result &= sel.matching_mask(layer)
        return result

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(e for sel in self.selectors for e in sel.errors)


def required_affinity(
    node_selector: Mapping[str, str], selectors: tuple[NodeSelector, ...], semver_enabled: bool
) -> RequiredAffinity:
    return RequiredAffinity(
        tuple(sorted(node_selector.items())),
        tuple(compile_selector(s, semver_enabled) for s in selectors),
    )


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    weight: int
    term: CompiledTerm


def preferred_terms(preferred, semver_enabled: bool) -> tuple[WeightedTerm, ...]:
    """`NewPreferredSchedulingTerms`: weight-0 and empty terms are skipped; any parse
    error fails the whole set (raises RequirementError), as upstream's PreScore does."""
    out = []
    for p in preferred:
        if p.weight == 0:
            continue
        if not p.preference.match_expressions and not p.preference.match_fields:
            continue
        out.append(WeightedTerm(p.weight, compile_term(p.preference, semver_enabled)))
    return tuple(out)
