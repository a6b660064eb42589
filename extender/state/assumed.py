"""Pods assumed by the bind verb: an overlay on the store's pod layer, kept apart from the
store as kube-scheduler's cache keeps its assumed pods apart from its node infos.

`assume` puts the pod, bound to its node, into the pod layer before the API call;
`forget` (the call failed) restores what the watch last said (the *shadow*: every
update the watch delivers under an assumption is kept here, not applied). A successful
binding (`bound`) is never expired by a timer, as upstream's cache never expires an
assumed pod whose binding succeeded: the assumption ends only when the state shows the
pod bound (to any node), deleted, replaced by a pod of another UID, or absent from a
relist that started after the binding succeeded, or listed unbound by such a relist (the
binding was undone: an etcd restore). Until then it is the only truth we have.

A pod the API bound for us and the watch has not shown yet is also a witness of the
watch's health (`oldest_unconfirmed_bind`, read by `extender.state.readiness`).

The store owns the pod layer and the lock: it calls this bookkeeping with its lock held,
so an assumption and the pod layer always change together.
"""

from __future__ import annotations

import dataclasses
import time

from extender import metrics
from extender.model import Pod

PodKey = tuple[str, str]


@dataclasses.dataclass(slots=True)
class Assumed:
    pod: Pod  # bound to its node
    bound_at: float | None = None  # monotonic time the binding call succeeded


class AssumedPods:
    """The assumptions, what the watch says under each, and the binds the watch has not
    shown yet (see the module docstring). Every method runs under the store's lock."""

    def __init__(self) -> None:
        self._assumed: dict[PodKey, Assumed] = {}
        self._shadow: dict[PodKey, Pod | None] = {}  # what the watch says under an assumption
        # bound by the API for us, not shown by the watch yet, in the order bound (-> when)
        self._awaiting: dict[PodKey, float] = {}

    def __contains__(self, key: PodKey) -> bool:
        return key in self._assumed

    def get(self, key: PodKey) -> Assumed | None:
        """The assumption of `key`, if one stands."""
        return self._assumed.get(key)

    def assume(self, key: PodKey, bound: Pod, watched: Pod | None) -> None:
        """Count `bound` (the pod on its node) from now on; `watched`: what the pod layer
        held, restored by `end` unless the watch says otherwise meanwhile."""
        if key not in self._assumed:
            self._shadow[key] = watched
        self._assumed[key] = Assumed(bound)
        metrics.ASSUMED_PODS.set(len(self._assumed))

    def bound(self, key: PodKey) -> None:
        """The binding call succeeded: from now on only the state ends the assumption."""
        assumed = self._assumed.get(key)
        if assumed is not None and assumed.bound_at is None:
            assumed.bound_at = time.monotonic()
            self._awaiting[key] = assumed.bound_at

    def holds_back(self, pod: Pod, listed_at: float | None) -> bool:
        """The watch delivered `pod`: True when an assumption stands and the pod is only
        kept as its shadow; False when the pod goes into the pod layer (there was no
        assumption, or this ends it). `listed_at`: the pod comes from a list that
        started then."""
        key = (pod.namespace, pod.name)
        assumed = self._assumed.get(key)
        if assumed is None:
            return False
        other = pod.uid and assumed.pod.uid and pod.uid != assumed.pod.uid  # deleted, recreated
        # a list that started after the binding succeeded shows what the API holds:
        # listed unbound, the binding is gone (undone by an etcd restore)
        undone = listed_at is not None and assumed.bound_at is not None and assumed.bound_at < listed_at
        if not pod.node_name and not other and not undone:  # not bound yet as far as the watch knows
            self._shadow[key] = pod
            return True
        self.end(key)  # confirmed (or bound elsewhere, or replaced: the watch wins)
        return False

    def end(self, key: PodKey) -> Pod | None:
        """Drop the assumption of `key`; returns what the watch last said."""
        self._assumed.pop(key)
        self._awaiting.pop(key, None)
        metrics.ASSUMED_PODS.set(len(self._assumed))
        return self._shadow.pop(key, None)

    def oldest_unconfirmed_bind(self, after: float = 0.0) -> tuple[PodKey, float] | None:
        """The pod bound longest ago (after `after`, monotonic) that the watch has not
        shown yet, with when it was bound; None if there is none."""
        older = []
        found = None
        for key, at in self._awaiting.items():
            if at > after:
                found = (key, at)
                break
            older.append(key)
        for key in older:  # looked into already: the assumption stays, the check does not
            del self._awaiting[key]
        return found

    def listed_too_early(self, key: PodKey, started: float) -> bool:
        """An assumed pod missing from a list that started before its binding succeeded
        (or while the call is still out): the watch from that list will show it."""
        assumed = self._assumed.get(key)
        return assumed is not None and (assumed.bound_at is None or assumed.bound_at >= started)

    def nodes(self) -> dict[PodKey, str]:
        """(namespace, name) -> the node each assumed pod is on."""
        return {k: a.pod.node_name for k, a in self._assumed.items()}
