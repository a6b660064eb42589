"""A pod's scheduling shape: everything of the pod that filter and prioritize read.

kube-scheduler sends the replicas of a workload one after another, and they differ only
in name and uid. Within one cluster snapshot (every change to the cluster state is a
new snapshot) and one candidate list, pods of equal shape get byte-identical answers,
so the server computes an answer once per shape (`Extender.remembered_answer`).

The shape is every `Pod` field except `EXCLUDED`, serialised with sorted keys, so a
field added to `Pod` later is part of it unless someone decides otherwise here:
- `raw` and `annotations` are only read while parsing (the annotation channel is
  merged into `tolerations` and `affinity` by then);
- `name` and `uid` matter only to PodTopologySpread's nominated pods (a pod never
  counts itself); they join the shape when the pod's namespace has nominated pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

import orjson

from extender.model import Pod
from extender.plugins.podtopologyspread.index import spread_index
from extender.state.snapshot import ClusterSnapshot

EXCLUDED = frozenset({"raw", "annotations", "name", "uid"})
IDENTITY = ("name", "uid")
SHAPE_FIELDS = tuple(f.name for f in fields(Pod) if f.name not in EXCLUDED)


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} in a pod shape")


def pod_shape(pod: Pod, snapshot: ClusterSnapshot) -> bytes:
    values = [getattr(pod, name) for name in SHAPE_FIELDS]
    if spread_index(snapshot).namespace(pod.namespace).nominated:
        values += [getattr(pod, name) for name in IDENTITY]
    return orjson.dumps(values, default=_plain, option=orjson.OPT_SORT_KEYS)
