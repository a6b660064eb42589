"""The pod being scheduled, with its *effective* constraints.

They merge `spec` with the annotation channel (semantics §0.6): `<prefix>/tolerations`
(a JSON list of tolerations, unioned with `spec.tolerations`) and `<prefix>/node-affinity`
(a JSON NodeAffinity whose required selector is ANDed with the spec's and whose preferred
terms are added). The annotations are decoded and validated here (`check_pod`, as
kube-apiserver would treat the same fields in `spec`); any error is recorded on the pod
(`tolerations_error` / `affinity_error`, field paths included) so the plugins reject
every node loudly. The spec's own fields are parsed by `extender.model.parse`.
"""

from __future__ import annotations

from typing import Any

from extender.features import FeatureGates
from extender.model.objects import NodeAffinity, Pod
from extender.model.parse import (
    DEFAULT_ANNOTATION_PREFIX,
    _int,
    _is_deleting,
    _list,
    _obj,
    _str,
    _str_map,
    node_affinity_from_dict,
    pod_volume_claims,
    toleration_from_dict,
)
from extender.validation.annotations import check_pod
from extender.validation.field import aggregate


def pod_from_dict(raw: Any, annotation_prefix: str = DEFAULT_ANNOTATION_PREFIX, keep_raw: bool = True,
                  gates: FeatureGates | None = None) -> Pod:
    """The pod being scheduled, with its effective constraints; the annotations are
    decoded and validated by `extender.validation` exactly as the webhook does."""
    raw = _obj(raw, "pod")
    meta = _obj(raw.get("metadata"), "pod.metadata")
    spec = _obj(raw.get("spec"), "pod.spec")
    status = _obj(raw.get("status"), "pod.status")
    name = _str(meta.get("name"), "pod.metadata.name")
    namespace = _str(meta.get("namespace"), "pod.metadata.namespace") or "default"
    annotations = _str_map(meta.get("annotations"), "pod.metadata.annotations")

    spec_tolerations = _list(spec.get("tolerations"), "pod.spec.tolerations")
    tolerations = tuple(
        toleration_from_dict(t, f"pod.spec.tolerations[{i}]") for i, t in enumerate(spec_tolerations)
    )
    channel = check_pod(annotations, spec_tolerations, annotation_prefix, gates or FeatureGates())
    extra_tols = tuple(toleration_from_dict(t, "", f"{annotation_prefix}/tolerations") for t in channel.tolerations)
    # every error in either message, so /filter says what the webhook says
    full = aggregate(channel.errors) if channel.errors else None
    tol_err = full if channel.toleration_errors else None
    aff_err = full if channel.affinity_errors else None

    affinity = _obj(spec.get("affinity"), "pod.spec.affinity")
    spec_required, spec_preferred, spec_has_pref = node_affinity_from_dict(
        affinity.get("nodeAffinity"), "pod.spec.affinity.nodeAffinity"
    )
    ann_required, ann_preferred, ann_has_pref = None, (), False
    if channel.affinity is not None:
        ann_required, ann_preferred, ann_has_pref = node_affinity_from_dict(channel.affinity, "")
    required = tuple(s for s in (spec_required, ann_required) if s is not None)

    node_selector_raw = spec.get("nodeSelector")
    constraints = tuple(
        _obj(c, f"pod.spec.topologySpreadConstraints[{i}]")
        for i, c in enumerate(_list(spec.get("topologySpreadConstraints"), "pod.spec.topologySpreadConstraints"))
    )
    return Pod(
        namespace=namespace,
        name=name,
        uid=_str(meta.get("uid"), "pod.metadata.uid"),
        labels=_str_map(meta.get("labels"), "pod.metadata.labels"),
        annotations=annotations,
        node_name=_str(spec.get("nodeName"), "pod.spec.nodeName"),
        node_selector=_str_map(node_selector_raw, "pod.spec.nodeSelector"),
        has_node_selector=node_selector_raw is not None,
        tolerations=tolerations + extra_tols,
        affinity=NodeAffinity(required, spec_preferred + ann_preferred),
        has_required_affinity=bool(required),
        has_preferred_affinity=spec_has_pref or ann_has_pref,
        topology_spread_constraints=constraints,
        volume_claims=pod_volume_claims(spec, name),
        owner_references=tuple(
            _obj(o, "pod.metadata.ownerReferences[]")
            for o in _list(meta.get("ownerReferences"), "pod.metadata.ownerReferences")
        ),
        priority=_int(spec.get("priority"), "pod.spec.priority", bits=32),
        phase=_str(status.get("phase"), "pod.status.phase"),
        terminating=_is_deleting(meta),
        nominated_node_name=_str(status.get("nominatedNodeName"), "pod.status.nominatedNodeName"),
        preempts=_str(spec.get("preemptionPolicy"), "pod.spec.preemptionPolicy") != "Never",
        scheduler_name=_str(spec.get("schedulerName"), "pod.spec.schedulerName") or "default-scheduler",
        tolerations_error=tol_err,
        affinity_error=aff_err,
        raw=raw if keep_raw else None,
    )
