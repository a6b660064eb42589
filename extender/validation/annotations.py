"""The one validator of the annotation channel, shared by `/filter`, `explain`, the
admission webhook and `extender validate`, so all four agree on every input.

It decodes each annotation as kube-apiserver decodes the same field in `spec`
(`extender.validation.gojson`) and then applies API validation as the KEPs specify it
(`extender.validation.rules`), plus the per-pod limits (`extender.validation.limits`).
Field paths name the annotation, e.g.
`metadata.annotations[scheduling-extender.io/tolerations][0].value`.

The result for one annotation text depends only on (text, path, gates), so it is
memoised per distinct text (bounded in bytes): the pods of one Deployment share it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.caching import ByteLRU
from extender.features import FeatureGates
from extender.matching.semver import SEMVER_OPERATORS
from extender.validation import goschema
from extender.validation.field import FieldError, child, invalid, key, too_long, too_many
from extender.validation.gojson import GoJSONError
from extender.validation.limits import (
    MAX_ANNOTATION_BYTES,
    MAX_EXPRESSIONS_PER_POD,
    MAX_TOLERATIONS_PER_POD,
)
from extender.validation.rules import (
    current_slow_policy,
    unchecked_expressions,
    validate_node_affinity,
    validate_toleration,
    validate_volume_node_affinity,
)


@dataclass(frozen=True, slots=True)
class Checked:
    """One annotation, decoded and validated."""

    value: Any  # decoded value (canonical names only); None if absent or invalid
    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()
    expressions: int = 0  # CEL expressions in it
    items: int = 0  # tolerations in it


ABSENT = Checked(None)


def _check_tolerations(decoded: list, path: str, gates: FeatureGates) -> Checked:
    errors: list[FieldError] = []
    warnings: list[str] = []
    expressions = 0
    for i, t in enumerate(decoded):
        t = t or {}
        where = child(path, i)
        errors += validate_toleration(t, where, gates, warnings)
        if t.get("expression"):
            expressions += 1
        if t.get("effect") == "NoExecute" or t.get("tolerationSeconds") is not None:
            warnings.append(f"{where}: a NoExecute taint can only be tolerated from spec.tolerations: the node's "
                            "taint manager evicts a pod that only this annotation lets onto the node")
    value = None if errors else [t or {} for t in decoded]
    return Checked(value, tuple(errors), tuple(warnings), expressions, len(decoded))


# --- one annotation, memoised -----------------------------------------------------------

def _unknown_warning(path: str, segments: tuple) -> str:
    return f'unknown field "{child(path, *segments)}"'


VOLUME_NODE_AFFINITY = "volume-node-affinity"
SCHEMAS = {"tolerations": goschema.TOLERATIONS, "node-affinity": goschema.NODE_AFFINITY,
           VOLUME_NODE_AFFINITY: goschema.VOLUME_NODE_AFFINITY}


def _check(kind: str, text: str, path: str, gates: FeatureGates) -> Checked:
    if len(text) > MAX_ANNOTATION_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_ANNOTATION_BYTES:
        return Checked(None, (too_long(path, MAX_ANNOTATION_BYTES),))
    schema = SCHEMAS[kind]
    try:
        decoded = goschema.decode(text, schema)
    except GoJSONError as exc:
        detail = f"invalid JSON: {exc}" if exc.syntax else str(exc)
        return Checked(None, (FieldError(child(path, *exc.path), "Invalid value", detail=detail),))
    unknown = tuple(_unknown_warning(path, seg) for seg in decoded.unknown_fields)
    if decoded.value is None:
        return Checked(None, (), unknown)
    if kind == "tolerations":
        checked = _check_tolerations(decoded.value, path, gates)
        return Checked(checked.value, checked.errors, unknown + checked.warnings, checked.expressions, checked.items)
    if kind == VOLUME_NODE_AFFINITY:
        errors = tuple(validate_volume_node_affinity(decoded.value, path, gates))
        unknown += _ignored_fields(decoded.value, path)
    else:
        errors = tuple(validate_node_affinity(decoded.value, path, gates))
    return Checked(None if errors else decoded.value, errors, unknown)


def _ignored_fields(vna: dict, path: str) -> tuple[str, ...]:
    """`matchFields` of a PersistentVolume's terms never restrict anything: VolumeBinding
    matches a volume's affinity against the node's labels alone (`CheckNodeAffinity`)."""
    terms = ((vna.get("required") or {}).get("nodeSelectorTerms")) or []
    return tuple(f"{child(path, 'required', 'nodeSelectorTerms', i, 'matchFields')}: ignored: a "
                 "PersistentVolume's node affinity is matched against node labels only"
                 for i, term in enumerate(terms) if (term or {}).get("matchFields"))


# not a share of --memory-limit-bytes (nor in extender_cache_bytes): bounded on its own
_memo = ByteLRU("checked-annotations", max_bytes=8 << 20, accounted=False)


def check_annotation(kind: str, text: str, path: str, gates: FeatureGates) -> Checked:
    """`kind` is "tolerations", "node-affinity" (a pod's) or "volume-node-affinity" (a
    PersistentVolume's); memoised per (kind, text, path, gates, slow-expression policy)."""
    memo_key = (kind, text, path, gates, current_slow_policy())
    hit = _memo.get(memo_key)
    if hit is not None:
        return hit
    unchecked = unchecked_expressions()
    checked = _check(kind, text, path, gates)
    size = 4 * (len(text) + len(path)) + 512
    # over-long texts are never a key; nor an answer with expressions left unchecked (an
    # admission review's compile budget ran out): the next review checks them
    if size <= MAX_ANNOTATION_BYTES * 4 and unchecked_expressions() == unchecked:
        _memo.put(memo_key, checked, size)
    return checked


# the webhook thread of the gunicorn master may hold the lock when a worker is forked
os.register_at_fork(after_in_child=_memo.reset_lock)


# --- a whole pod (or pod template) ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class PodCheck:
    """The annotation channel of one pod: decoded values, errors by annotation, warnings."""

    tolerations: tuple[dict, ...] = ()
    affinity: dict | None = None
    toleration_errors: tuple[FieldError, ...] = ()
    affinity_errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def errors(self) -> tuple[FieldError, ...]:
        return self.toleration_errors + self.affinity_errors


CLEAN = PodCheck()


def _identity(t: Mapping[str, Any]) -> tuple:
    """What makes two tolerations the same (an empty operator means Equal)."""
    return tuple(str(x) for x in (t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "",
                                  t.get("effect") or "", t.get("tolerationSeconds"), t.get("expression") or ""))


def check_pod(annotations: Mapping[str, str], spec_tolerations: Sequence[Any], prefix: str,
              gates: FeatureGates, meta_path: str = "metadata", spec_path: str = "spec") -> PodCheck:
    """Validate a pod's annotation channel; `spec_tolerations` are the raw spec ones
    (counted for the per-pod limits, compared for duplicate warnings)."""
    tol_name, aff_name = f"{prefix}/tolerations", f"{prefix}/node-affinity"
    tol_text, aff_text = annotations.get(tol_name), annotations.get(aff_name)
    spec_tols = [t for t in spec_tolerations if isinstance(t, Mapping)]
    spec_expressions = sum(1 for t in spec_tols if t.get("expression"))
    if tol_text is None and aff_text is None and len(spec_tolerations) <= MAX_TOLERATIONS_PER_POD \
            and spec_expressions <= MAX_EXPRESSIONS_PER_POD:
        return CLEAN
    ann_path = child(meta_path, "annotations")
    tol_path = key(ann_path, tol_name)
    tols = ABSENT if tol_text is None else check_annotation("tolerations", tol_text, tol_path, gates)
    aff = ABSENT if aff_text is None else check_annotation("node-affinity", aff_text, key(ann_path, aff_name), gates)
    tol_errors = list(tols.errors)
    where = tol_path if tol_text is not None else child(spec_path, "tolerations")
    total = len(spec_tolerations) + tols.items
    if total > MAX_TOLERATIONS_PER_POD:
        tol_errors.append(too_many(where, total, MAX_TOLERATIONS_PER_POD, "tolerations per pod (spec and annotation)"))
    expressions = spec_expressions + tols.expressions
    if expressions > MAX_EXPRESSIONS_PER_POD:
        tol_errors.append(too_many(where, expressions, MAX_EXPRESSIONS_PER_POD,
                                   "CEL expressions per pod (spec and annotation)"))
    warnings = list(tols.warnings) + list(aff.warnings)
    if tols.value and spec_tols:
        first: dict[tuple, int] = {}
        for j, s in enumerate(spec_tols):
            first.setdefault(_identity(s), j)
        for i, t in enumerate(tols.value):
            j = first.get(_identity(t))
            if j is not None:
                warnings.append(f"{child(tol_path, i)}: duplicates {child(spec_path, 'tolerations', j)}")
    return PodCheck(
        tolerations=tuple(tols.value or ()) if not tol_errors else (),
        affinity=aff.value,
        toleration_errors=tuple(tol_errors),
        affinity_errors=aff.errors,
        warnings=tuple(warnings),
    )


# --- a PersistentVolume -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class VolumeCheck:
    """The annotation channel of one PersistentVolume: its decoded VolumeNodeAffinity."""

    affinity: dict | None = None  # None: no annotation, or an invalid one (see errors)
    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()


def _semver_in_spec(spec_affinity: Any, path: str) -> tuple[str, ...]:
    """Warnings for Semver operators in `spec.nodeAffinity`, where an API server with
    KEP-5721's gate stores them but a kube-scheduler without it cannot read them."""
    if not isinstance(spec_affinity, Mapping):
        return ()
    required_ = spec_affinity.get("required")
    terms = required_.get("nodeSelectorTerms") if isinstance(required_, Mapping) else None
    out = []
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        for j, rq in enumerate(exprs if isinstance(exprs, list) else []):
            if isinstance(rq, Mapping) and rq.get("operator") in SEMVER_OPERATORS:
                out.append(f"{child(path, 'required', 'nodeSelectorTerms', i, 'matchExpressions', j, 'operator')}: "
                           f"{rq['operator']} is read by kube-scheduler's VolumeBinding only with KEP-5721's gate; "
                           "without it that plugin rejects every node for this term: put the requirement in the "
                           "node-affinity annotation instead")
    return tuple(out)


def check_volume(annotations: Mapping[str, Any], spec_affinity: Any, prefix: str, gates: FeatureGates,
                 meta_path: str = "metadata", spec_path: str = "spec") -> VolumeCheck:
    """Validate a PersistentVolume's `<prefix>/node-affinity` annotation (a JSON
    VolumeNodeAffinity, read and validated as the API server reads `spec.nodeAffinity`)
    and warn about extended operators in `spec.nodeAffinity` itself."""
    name = f"{prefix}/node-affinity"
    warnings = _semver_in_spec(spec_affinity, child(spec_path, "nodeAffinity"))
    text = annotations.get(name)
    if text is None:
        return VolumeCheck(warnings=warnings)
    path = key(child(meta_path, "annotations"), name)
    if not isinstance(text, str):
        return VolumeCheck(None, (invalid(path, str(text), "annotation values must be strings"),), warnings)
    checked = check_annotation(VOLUME_NODE_AFFINITY, text, path, gates)
    return VolumeCheck(checked.value, checked.errors, checked.warnings + warnings)
