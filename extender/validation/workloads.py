"""Validate any Kubernetes object that is or carries a pod template.

Pods are checked where they are; the workload kinds at the path of their pod template
(`spec.template` for Deployments, StatefulSets, DaemonSets, ReplicaSets,
ReplicationControllers and Jobs; `spec.jobTemplate.spec.template` for CronJobs;
`template` for PodTemplates), so a bad annotation is caught when the workload is
applied, not when its controller's pods stay Pending. PersistentVolumes carry a
node-affinity annotation of their own. Other kinds are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson
import yaml

from extender.features import FeatureGates
from extender.matching.numeric import go_quote
from extender.matching.operators import gates_to_ratchet
from extender.model.objects import DEFAULT_SCHEDULER_NAME
from extender.validation.annotations import check_pod, check_volume
from extender.validation.field import FieldError, Raw, invalid, key

TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


@dataclass(frozen=True, slots=True)
class ObjectCheck:
    kind: str
    name: str
    namespace: str
    checked: bool  # False: a kind without a pod template
    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_template(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """(the pod or pod template object, its path prefix) or None for other kinds."""
    path = TEMPLATE_PATHS.get(str(obj.get("kind") or ""))
    if path is None:
        return None
    node: Any = obj
    for part in path:
        node = _mapping(node).get(part)
    return _mapping(node), ".".join(path)


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = _mapping(obj.get("metadata"))
    name = meta.get("name") or meta.get("generateName") or ""
    return str(name), str(meta.get("namespace") or "")


PERSISTENT_VOLUME = "PersistentVolume"
CHECKED_KINDS = (*TEMPLATE_PATHS, PERSISTENT_VOLUME)


def check_object(obj: Mapping[str, Any], prefix: str, gates: FeatureGates,
                 profiles: Profiles | None = None) -> ObjectCheck:
    """The object's errors and warnings. `profiles` (`--scheduler-config`): also warn
    where the pods' own profile (`spec.schedulerName`) leaves an annotation unread."""
    kind = str(obj.get("kind") or "")
    name, namespace = _name(obj)
    if kind == PERSISTENT_VOLUME:
        meta = _mapping(obj.get("metadata"))
        check = check_volume(_mapping(meta.get("annotations")), _mapping(obj.get("spec")).get("nodeAffinity"),
                             prefix, gates)
        return ObjectCheck(kind, name, namespace, True, check.errors, check.warnings)
    found = pod_template(obj)
    if found is None:
        return ObjectCheck(kind, name, namespace, checked=False)
    template, base = found
    meta_path = f"{base}.metadata" if base else "metadata"
    spec_path = f"{base}.spec" if base else "spec"
    raw_annotations = _mapping(_mapping(template.get("metadata")).get("annotations"))
    annotations: dict[str, str] = {}
    errors: list[FieldError] = []
    for ann in (f"{prefix}/tolerations", f"{prefix}/node-affinity"):
        value = raw_annotations.get(ann)
        if value is None:
            continue
        if not isinstance(value, str):  # YAML `key: 5` or a list: the API server wants strings
            errors.append(invalid(key(f"{meta_path}.annotations", ann), Raw(_json_text(value)),
                                  "annotation values must be strings"))
            continue
        annotations[ann] = value
    tolerations = _mapping(template.get("spec")).get("tolerations")
    check = check_pod(annotations, tolerations if isinstance(tolerations, list) else [], prefix, gates,
                      meta_path, spec_path)
    unread = profile_warnings(profiles, _mapping(template.get("spec")).get("schedulerName"), annotations, prefix,
                              meta_path, spec_path)
    return ObjectCheck(kind, name, namespace, True, tuple(errors) + check.errors, (*check.warnings, *unread))



class Profiles(Protocol):
    """What validation reads of kube-scheduler's configuration (`extender.schedconfig`'s
    `SchedulerConfiguration`, a floor above): each profile by name, with `delegated`,
    the plugins it leaves to the extender."""

    @property
    def profiles(self) -> Mapping[str, Any]: ...

# the plugin of each annotation the extender reads for pods
ANNOTATION_PLUGINS = (("tolerations", "TaintToleration"), ("node-affinity", "NodeAffinity"))


def profile_warnings(profiles: Profiles | None, scheduler_name: Any, annotations: Mapping[str, str],
                     prefix: str, meta_path: str, spec_path: str) -> list[str]:
    """Annotations the pods' own profile leaves unread: kube-scheduler's in-tree
    TaintToleration and NodeAffinity read `spec` only, so an annotation counts only where
    the profile disables that plugin and the extender answers for it; a schedulerName
    that is no profile of the file is placed by a scheduler that does not ask the
    extender. Warnings, not errors: the pod is valid, it just does not get what the
    annotation says."""
    if profiles is None or not annotations:
        return []
    name = scheduler_name if isinstance(scheduler_name, str) and scheduler_name else DEFAULT_SCHEDULER_NAME
    profile = profiles.profiles.get(name)
    present = [(f"{prefix}/{suffix}", plugin) for suffix, plugin in ANNOTATION_PLUGINS
               if f"{prefix}/{suffix}" in annotations]
    if profile is None:
        return [f"{spec_path}.schedulerName: {go_quote(name)} is not a profile of the scheduler configuration "
                f"(profiles: {', '.join(profiles.profiles)}): the scheduler that places these pods does not ask "
                f"the extender, so {' and '.join(a for a, _ in present)} {'is' if len(present) == 1 else 'are'} "
                "ignored"]
    return [f"{key(f'{meta_path}.annotations', annotation)}: profile {go_quote(name)} runs {plugin} in "
            f"kube-scheduler (it does not disable it), which reads spec only: this annotation is ignored when "
            "these pods are placed" for annotation, plugin in present if plugin not in profile.delegated]


def _json_text(value: Any) -> str:
    """A non-string annotation value as the JSON the user wrote (never a Python repr)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # YAML-only values (dates ...): their YAML text
        return yaml.safe_dump(value, default_flow_style=True).strip()


def ratcheted_gates(old: Mapping[str, Any] | None, kind: str, prefix: str,
                    gates: FeatureGates) -> FeatureGates:
    """The gates an UPDATE is validated with: a gated feature the old object already uses
    stays allowed with its gate off (the KEPs' ratcheting, as Kubernetes' validation
    options `AllowTaintToleration...: gate on || the old pod spec uses it`)."""
    if kind == PERSISTENT_VOLUME:
        return _ratcheted_volume_gates(_mapping(old), prefix, gates)
    found = pod_template({**_mapping(old), "kind": kind}) if old else None
    if found is None:
        return gates
    template = found[0]
    annotations = _mapping(_mapping(template.get("metadata")).get("annotations"))
    spec = _mapping(template.get("spec"))
    tolerations = _list(spec.get("tolerations")) + _list(_json(annotations.get(f"{prefix}/tolerations")))
    affinity = [_mapping(_mapping(spec.get("affinity")).get("nodeAffinity")),
                _mapping(_json(annotations.get(f"{prefix}/node-affinity")))]
    operators = {str(_mapping(t).get("operator") or "") for t in tolerations}
    changes = gates_to_ratchet(gates, operators, _affinity_operators(affinity))
    if not gates.cel and any(_mapping(t).get("expression") for t in tolerations):
        changes["cel"] = True
    return replace(gates, **changes) if changes else gates


def _ratcheted_volume_gates(old: Mapping[str, Any], prefix: str,
                            gates: FeatureGates) -> FeatureGates:
    """A PersistentVolume's gated features are those of its node affinity's operators
    (spec or annotation, both VolumeNodeAffinity: `required.nodeSelectorTerms`)."""
    annotations = _mapping(_mapping(old.get("metadata")).get("annotations"))
    affinities = [_mapping(_mapping(old.get("spec")).get("nodeAffinity")),
                  _mapping(_json(annotations.get(f"{prefix}/node-affinity")))]
    terms = [term for va in affinities
             for term in _list(_mapping(va.get("required")).get("nodeSelectorTerms"))]
    changes = gates_to_ratchet(gates, (), _term_operators(terms))
    return replace(gates, **changes) if changes else gates


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _affinity_operators(affinities: list[Mapping[str, Any]]) -> set[str]:
    """Operators of every matchExpressions requirement, required and preferred terms."""
    terms: list[Any] = []
    for na in affinities:
        terms += _list(_mapping(na.get("requiredDuringSchedulingIgnoredDuringExecution"))
                       .get("nodeSelectorTerms"))
        terms += [_mapping(p).get("preference")
                  for p in _list(na.get("preferredDuringSchedulingIgnoredDuringExecution"))]
    return _term_operators(terms)


def _term_operators(terms: list[Any]) -> set[str]:
    return {str(_mapping(rq).get("operator") or "") for term in terms
            for rq in _list(_mapping(term).get("matchExpressions"))}
