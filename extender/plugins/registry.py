"""The plugins the engine runs: one record per plugin (upstream's in-tree registry,
`plugins/registry.go`, and `default_plugins.go`'s weights in one table).

Everything outside a plugin's own module that needs to know about it reads its record
here: the configuration (known names, argument parsers, default weights), the
scheduler configuration (the in-tree points a profile disables), the engine (which
kinds of objects a verdict reads, for the freshness gate), preemption (whether
evicting pods can change the verdict) and the drift report (how a running pod's node is
judged, and the gauge's labels). So adding a plugin is its module plus one
`register(PluginRecord(...))`.

The records live on the plugins' floor, not in `config`: the configuration and the
scheduler configuration sit above the plugins and read this table, and the framework
below never names a plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.framework.drift import REQUIRED, SEVERITIES, Judge, by_filter
from extender.framework.handle import Handle
from extender.model import Pod
from extender.plugins import nodeaffinity, tainttoleration, volumenodeaffinity
from extender.plugins.nodeaffinity import NodeAffinity
from extender.plugins.nodeaffinity import parse_args as parse_node_affinity_args
from extender.plugins.nodeunschedulable import NodeUnschedulable
from extender.plugins.podtopologyspread import PodTopologySpread
from extender.plugins.podtopologyspread.args import validate_args as validate_spread_args
from extender.plugins.tainttoleration import TaintToleration
from extender.plugins.volumenodeaffinity import VolumeNodeAffinity
from extender.state.layers import WORKLOAD_KINDS
from extender.state.volumes import VOLUME_KINDS


def reads_nodes(pod: Pod, plugin: Any) -> tuple[str, ...]:
    """A plugin that judges the node object alone."""
    return ("Node",)


@dataclass(frozen=True, slots=True)
class DriftRecord:
    """How the drift report judges a running pod's node by one plugin
    (`extender.framework.drift`).

    * `judge(plugin)`: the `Judge` of the profile's instance (built once per profile;
      `by_filter`: its own Filter verdict, `required`);
    * `reasons`: the plugin's own reasons, the `reason` labels of the gauge
      `extender_pods_violating`, each exported with every one of `severities`;
    * `invalid`: the label any other reason is counted under (a validation error's
      text, an invalid volume's message), so the label set stays bounded.
    """

    judge: Callable[[Any], Judge] = by_filter
    reasons: tuple[str, ...] = ()
    invalid: str = "other"
    severities: tuple[str, ...] = (REQUIRED,)

    def gauge_reason(self, reason: str) -> str:
        return reason if reason in self.reasons else self.invalid

    def gauge_labels(self, plugin: str) -> list[tuple[str, str, str]]:
        """(plugin, reason, severity) of every series the gauge can have for it."""
        return [*((plugin, reason, s) for reason in self.reasons for s in self.severities),
                (plugin, self.invalid, REQUIRED)]


@dataclass(frozen=True, slots=True)
class PluginRecord:
    """What the rest of the extender knows of one plugin.

    * `factory(handle)` builds it for a profile (arguments in `handle.plugin_args`);
    * `weight`: its default score weight (upstream's default_plugins.go), None if it
      does not score;
    * `parse_args(args, key)` validates its `pluginConfig` arguments, raising
      ConfigError naming the key; None: it takes none;
    * `in_tree_points`: the points of kube-scheduler's plugin of that name
      (KubeSchedulerConfiguration spelling), which a profile disables to delegate it;
      None: no such plugin, it runs whenever the profile delegates any;
    * `reads(pod, plugin)`: the kinds of objects its Filter verdict for `pod` reads
      (`plugin`: the profile's instance, None if the profile does not run it), which
      the freshness gate must see current;
    * `eviction_matters(pod)`: removing pods from a node can change its verdict there
      (preemption then judges the node again without the victims); None: never;
    * `drift`: how the drift report judges a running pod's node by it; None: it does
      not (a cordoned node keeps running pods by design);
    * `inflight_selectors(pod, plugin, snapshot)`: the label selectors of the pods (of
      `pod`'s namespace) whose coming or going can change its Filter verdict for `pod`
      (the engine then waits for those in flight between a filter and their bind);
      None: other pods never change it;
    * `reads_other_nodes(pod, plugin, snapshot)`: its Filter verdict for `pod` on a node
      reads other nodes too (a what-if then judges every node again, not only the
      touched ones); None: never.
    """

    name: str
    factory: Callable[[Handle], Any]
    weight: int | None = None
    parse_args: Callable[[dict[str, Any], str], Any] | None = None
    in_tree_points: tuple[str, ...] | None = None
    reads: Callable[[Pod, Any], tuple[str, ...]] = reads_nodes
    eviction_matters: Callable[[Pod], bool] | None = None
    drift: DriftRecord | None = None
    inflight_selectors: Callable[[Pod, Any, Any], list] | None = None
    reads_other_nodes: Callable[[Pod, Any, Any], bool] | None = None


def _volume_reads(pod: Pod, plugin: Any) -> tuple[str, ...]:
    return ("Node", *VOLUME_KINDS) if pod.volume_claims else ("Node",)


def _spread_reads(pod: Pod, plugin: Any) -> tuple[str, ...]:
    """Its own constraints count pods; the profile's default ones, when they are hard,
    also read the workloads that select the pod."""
    if pod.topology_spread_constraints:
        return ("Pod",)
    if plugin is not None and plugin.hard_defaults:
        return ("Pod", *WORKLOAD_KINDS)
    return ()


def _spread_selectors(pod: Pod, plugin: Any, snapshot: Any) -> list:
    return plugin.hard_selectors(pod, snapshot)


def _spread_reads_other_nodes(pod: Pod, plugin: Any, snapshot: Any) -> bool:
    """Hard constraints count every node's labels and pods."""
    return plugin.has_hard_constraints(pod, snapshot)


def _hard_spread(pod: Pod) -> bool:
    return any(c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
               for c in pod.topology_spread_constraints)


# In upstream's default multiPoint order (VolumeNodeAffinity where VolumeBinding is).
PLUGINS: dict[str, PluginRecord] = {}


def register(record: PluginRecord, before: str | None = None) -> None:
    """Add a plugin (at the end of the order, or before the plugin named `before`)."""
    if record.name in PLUGINS:
        raise ValueError(f"plugin {record.name!r} is already registered")
    if before is None:
        PLUGINS[record.name] = record
        return
    items = list(PLUGINS.items())
    at = [name for name, _ in items].index(before)
    PLUGINS.clear()
    PLUGINS.update(items[:at] + [(record.name, record)] + items[at:])


def unregister(name: str) -> None:
    del PLUGINS[name]


def records() -> list[PluginRecord]:
    return list(PLUGINS.values())


def default_weights() -> dict[str, int]:
    """The score plugins' default weights, in order."""
    return {r.name: r.weight for r in PLUGINS.values() if r.weight is not None}


def in_tree_points() -> dict[str, tuple[str, ...]]:
    """Each plugin kube-scheduler also has -> the points a profile disables it at."""
    return {r.name: r.in_tree_points for r in PLUGINS.values() if r.in_tree_points is not None}


def default_plugins(handle: Handle) -> list:
    """Every registered plugin, built for `handle`, in order."""
    return [r.factory(handle) for r in PLUGINS.values()]


for _record in (
    PluginRecord(NodeUnschedulable.name, NodeUnschedulable, in_tree_points=("filter",)),
    # master's PreFilter of TaintToleration is not counted: disabling it there alone
    # changes nothing the extender answers for
    PluginRecord(TaintToleration.name, TaintToleration, weight=3, in_tree_points=("filter", "preScore", "score"),
                 drift=DriftRecord(tainttoleration.drift_judge, (tainttoleration.ERR_REASON_UNTOLERATED,),
                                   "invalid tolerations annotation", SEVERITIES)),
    PluginRecord(NodeAffinity.name, NodeAffinity, weight=2, parse_args=parse_node_affinity_args,
                 in_tree_points=("preFilter", "filter", "preScore", "score"),
                 drift=DriftRecord(nodeaffinity.drift_judge, (nodeaffinity.ERR_REASON_POD, nodeaffinity.ERR_REASON_ENFORCED),
                                   "invalid node-affinity annotation")),
    PluginRecord(VolumeNodeAffinity.name, VolumeNodeAffinity, reads=_volume_reads,
                 drift=DriftRecord(volumenodeaffinity.drift_judge, (volumenodeaffinity.ERR_REASON_NODE_CONFLICT,),
                                   "invalid PersistentVolume node affinity")),
    PluginRecord(PodTopologySpread.name, PodTopologySpread, weight=2, parse_args=validate_spread_args,
                 in_tree_points=("preFilter", "filter", "preScore", "score"), reads=_spread_reads,
                 eviction_matters=_hard_spread, inflight_selectors=_spread_selectors,
                 reads_other_nodes=_spread_reads_other_nodes),
):
    register(_record)
