"""kube-scheduler's own KubeSchedulerConfiguration (`--scheduler-config`), read as
kube-scheduler reads it: `kubescheduler.config.k8s.io/v1` only, strict (an unknown or
repeated field stops start-up with its path, in kube-scheduler's words), defaulted as
upstream's v1 defaults, validated where a mistake would change our answers.

What the extender keeps of it (docs/reference/semantics.md §2.5): per profile, which of
the plugins it implements the profile disables in-tree (it answers for those only), their
score weights, PodTopologySpread's and NodeAffinity's arguments and
`percentageOfNodesToScore`; and the `extenders[]` list, for the start-up warnings.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.errors import ConfigError
from extender.model.objects import DEFAULT_SCHEDULER_NAME
from extender.plugins import registry

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
# The plugins' default weights, their in-tree points and argument parsers are their
# records' (`extender.plugins.registry`), read at each load.
LARGE_CLUSTER = 500  # nodes: past this, Node objects in every request cost megabytes
EXTENSION_POINTS = ("preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
                    "reserve", "permit", "preBind", "bind", "postBind", "multiPoint")

# The v1 types, field by field, for strict decoding. A type is "str", "int", "bool",
# "duration", "bytes", "any" (decoded by kube-scheduler, not read here), a dict (a struct)
# or a one-item list (a slice of that type).
_PLUGIN = {"name": "str", "weight": "int"}
_PLUGIN_SET = {"enabled": [_PLUGIN], "disabled": [_PLUGIN]}
_PROFILE = {
    "schedulerName": "str",
    "percentageOfNodesToScore": "int",
    "plugins": {point: _PLUGIN_SET for point in EXTENSION_POINTS},
    "pluginConfig": [{"name": "str", "args": "any"}],
}
_TLS = {k: "str" for k in ("serverName", "certFile", "keyFile", "caFile")} | {
    "insecure": "bool", "certData": "bytes", "keyData": "bytes", "caData": "bytes"}
_EXTENDER = {
    "urlPrefix": "str", "filterVerb": "str", "preemptVerb": "str", "prioritizeVerb": "str",
    "weight": "int", "bindVerb": "str", "enableHTTPS": "bool", "tlsConfig": _TLS,
    "httpTimeout": "duration", "nodeCacheCapable": "bool",
    "managedResources": [{"name": "str", "ignoredByScheduler": "bool"}], "ignorable": "bool",
}
_CONFIGURATION = {
    "apiVersion": "str", "kind": "str", "parallelism": "int", "leaderElection": "any",
    "clientConnection": "any", "enableProfiling": "bool", "enableContentionProfiling": "bool",
    "percentageOfNodesToScore": "int", "podInitialBackoffSeconds": "int",
    "podMaxBackoffSeconds": "int", "profiles": [_PROFILE], "extenders": [_EXTENDER],
    "delayCacheUntilActive": "bool",
}
_DURATION = re.compile(r"^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$|^0$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Profile:
    """What one profile means to the extender."""

    name: str
    delegated: frozenset[str]  # plugins disabled in-tree: the extender answers for them
    weights: dict[str, int] = field(default_factory=dict)
    plugin_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    percentage: int = 0  # percentageOfNodesToScore in effect (0: adaptive)


@dataclass(frozen=True)
class ExtenderEntry:
    url_prefix: str
    filter_verb: str
    prioritize_verb: str
    bind_verb: str
    weight: int
    node_cache_capable: bool
    ignorable: bool
    http_timeout: float  # seconds; 0 means kube-scheduler's 5 s
    managed_resources: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchedulerConfiguration:
    profiles: dict[str, Profile]  # by schedulerName, in the file's order
    extenders: tuple[ExtenderEntry, ...] = ()
    percentage: int = 0


class _StrictLoader(yaml.SafeLoader):
    """YAML as sigs.k8s.io/yaml reads it strictly: a key repeated in a map is an error."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f'strict decoding error: yaml: unmarshal errors: line {key_node.start_mark.line + 1}: '
                                  f'key {_quote(key)} already set in map')
            seen.add(key)
        return super().construct_mapping(node, deep)


def _quote(value: Any) -> str:
    return '"' + str(value).replace('"', '\\"') + '"'


def _unknown(path: str) -> ConfigError:
    return ConfigError(f"strict decoding error: unknown field {_quote(path)}")


def _check(value: Any, kind: Any, path: str) -> None:
    """Strict decoding of `value` as `kind`; raise ConfigError naming the field's path."""
    if value is None:
        return  # null: the zero value, as Go's decoder
    if isinstance(kind, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{path or 'configuration'}: expected an object, got {value!r}")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in kind:
                raise _unknown(where)
            _check(item, kind[key], where)
    elif isinstance(kind, list):
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        for i, item in enumerate(value):
            _check(item, kind[0], f"{path}[{i}]")
    elif kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    elif kind == "bool" and not isinstance(value, bool):
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    elif kind in ("str", "bytes") and not isinstance(value, str):
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    elif kind == "duration" and not (isinstance(value, str) and _DURATION.match(value)):
        raise ConfigError(f'{path}: time: invalid duration {_quote(value)}')


def _seconds(text: str | None) -> float:
    if not text or text == "0":
        return 0.0
    return sum(float(n) * _UNITS[u] for n, _, u in re.findall(r"([0-9]+(\.[0-9]*)?)(ns|us|µs|ms|s|m|h)", text))


def load(path: str | os.PathLike) -> SchedulerConfiguration:
    """Read, decode, default and validate the file; ConfigError naming the field."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--scheduler-config: cannot read {str(path)!r}: {exc.strerror}") from None
    try:
        return decode(text)
    except ConfigError as exc:
        raise ConfigError(f"--scheduler-config {str(path)!r}: {exc}") from None


def decode(text: str) -> SchedulerConfiguration:
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("expected a KubeSchedulerConfiguration object")
    version, kind = data.get("apiVersion"), data.get("kind")
    if not version or not kind:
        raise ConfigError("Object 'apiVersion' and 'Kind' are missing or empty")  # apimachinery's words
    if version != API_VERSION or kind != KIND:
        raise ConfigError(f"apiVersion/kind: no kind {_quote(kind)} is registered for version {_quote(version)} "
                          f"(the extender reads {KIND} {API_VERSION} only)")
    _check(data, _CONFIGURATION, "")
    percentage = data.get("percentageOfNodesToScore") or 0
    raw_profiles = data.get("profiles") or [{}]
    errors: list[str] = []  # in kube-scheduler's order: profiles, global settings, extenders
    profiles: dict[str, Profile] = {}
    for i, raw in enumerate(raw_profiles):
        raw = raw or {}
        name = raw.get("schedulerName")
        if name is None and len(raw_profiles) == 1:
            name = DEFAULT_SCHEDULER_NAME  # upstream defaults the name of a lone profile only
        if not name:
            errors.append(f"profiles[{i}].schedulerName: Required value")
            continue
        if name in profiles:
            errors.append(f"profiles[{i}].schedulerName: Duplicate value: {_quote(name)}")
            continue
        own = raw.get("percentageOfNodesToScore")
        if own is not None and not 0 <= own <= 100:
            errors.append(f"profiles[{i}].percentageOfNodesToScore: Invalid value: {own}: not in valid range [0-100]")
        try:
            profiles[name] = _profile(raw, name, f"profiles[{i}]", percentage if own is None else own)
        except ConfigError as exc:
            errors.append(str(exc))
    if not 0 <= percentage <= 100:
        errors.append(f"percentageOfNodesToScore: Invalid value: {percentage}: not in valid range [0-100]")
    extenders = tuple(_extender(e or {}) for e in data.get("extenders") or [])
    for i, ext in enumerate(extenders):
        if ext.prioritize_verb and ext.weight <= 0:
            errors.append(f"extenders[{i}].weight: Invalid value: {ext.weight}: must have a positive weight applied to it")
    binders = sum(1 for e in extenders if e.bind_verb)
    if binders > 1:
        errors.append(f'extenders: Invalid value: "found {binders} extenders implementing bind": '
                      "only one extender can implement bind")
    if errors:
        raise ConfigError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return SchedulerConfiguration(profiles, extenders, percentage)


def _extender(raw: dict[str, Any]) -> ExtenderEntry:
    return ExtenderEntry(
        url_prefix=raw.get("urlPrefix") or "", filter_verb=raw.get("filterVerb") or "",
        prioritize_verb=raw.get("prioritizeVerb") or "", bind_verb=raw.get("bindVerb") or "",
        weight=raw.get("weight") or 0, node_cache_capable=bool(raw.get("nodeCacheCapable")),
        ignorable=bool(raw.get("ignorable")), http_timeout=_seconds(raw.get("httpTimeout")),
        managed_resources=tuple((m or {}).get("name") or "" for m in raw.get("managedResources") or []))


def _names(plugin_set: dict[str, Any] | None, which: str) -> list[dict[str, Any]]:
    return [p or {} for p in ((plugin_set or {}).get(which) or [])]


def _enabled_at(plugins: dict[str, Any], plugin: str, point: str) -> bool:
    """Whether kube-scheduler runs `plugin` at `point` in this profile: upstream's
    mergePlugins of the default multiPoint set with the profile's, then the framework's
    multiPoint expansion (a plugin disabled at a point is skipped there; one enabled at
    a point runs there)."""
    multi = plugins.get("multiPoint") or {}
    multi_disabled = {p.get("name") for p in _names(multi, "disabled")}
    multi_enabled = {p.get("name") for p in _names(multi, "enabled")}
    in_multi = plugin in registry.in_tree_points() and not (
        {plugin, "*"} & multi_disabled)
    in_multi = in_multi or plugin in multi_enabled
    at = plugins.get(point) or {}
    if plugin in {p.get("name") for p in _names(at, "enabled")}:
        return True
    return in_multi and not ({plugin, "*"} & {p.get("name") for p in _names(at, "disabled")})


def _weight(plugins: dict[str, Any], plugin: str) -> int:
    """The score weight the extender gives a plugin it answers for: kube-scheduler has
    none to give a disabled plugin, so a `weight` on its `disabled` entry (score, else
    multiPoint; kube-scheduler decodes and ignores it) sets it, else upstream's default."""
    for point in ("score", "multiPoint"):
        for entry in _names(plugins.get(point), "disabled"):
            if entry.get("name") == plugin and entry.get("weight"):
                return entry["weight"]
    return registry.PLUGINS[plugin].weight


def _profile(raw: dict[str, Any], name: str, where: str, percentage: int) -> Profile:
    plugins = raw.get("plugins") or {}
    delegated = set()
    for plugin, points in registry.in_tree_points().items():
        running = [p for p in points if _enabled_at(plugins, plugin, p)]
        if running and len(running) < len(points):
            off = [p for p in points if p not in running]
            raise ConfigError(
                f"{where}.plugins: {plugin} is disabled at {', '.join(off)} but runs at {', '.join(running)}: "
                "half-disabled, its in-tree points that still run would read state the disabled ones never "
                "wrote (disable it at multiPoint, or at every point it implements)")
        if not running:
            delegated.add(plugin)
    args: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(raw.get("pluginConfig") or []):
        entry = entry or {}
        plugin = entry.get("name")
        if plugin in args:
            raise ConfigError(f"{where}.pluginConfig[{i}]: Duplicate value: {_quote(plugin)}")
        record = registry.PLUGINS.get(plugin) if isinstance(plugin, str) else None
        if record is not None and record.parse_args is not None:
            value = {k: v for k, v in (entry.get("args") or {}).items() if k not in ("apiVersion", "kind")}
            record.parse_args(value, f"{where}.pluginConfig[{i}].args")
            args[plugin] = value
    # a plugin kube-scheduler does not have runs wherever the profile delegates any
    runs = delegated | ({r.name for r in registry.records() if r.in_tree_points is None} if delegated else set())
    weights = {p: _weight(plugins, p) for p in registry.default_weights() if p in runs}
    return Profile(name, frozenset(delegated), weights, args, percentage)


def legacy_profile(name: str, weights: dict[str, int], plugin_args: dict[str, dict[str, Any]]) -> Profile:
    """The single profile the old flags describe (`--scheduler-profile`, `--weights`,
    `pluginConfig`): every plugin answered for."""
    return Profile(name, frozenset(registry.in_tree_points()), dict(weights), dict(plugin_args), 100)


def start_warnings(config: SchedulerConfiguration, nodes: int = 0, score_mode: str = "in-tree") -> list[str]:
    """Settings that break what the extender assumes, each with the reason; `nodes`:
    the cluster's size when known (0: not yet, live mode at start)."""
    out = []
    for profile in config.profiles.values():
        if profile.delegated and profile.percentage != 100:
            shown = "0 (adaptive)" if profile.percentage == 0 else str(profile.percentage)
            out.append(f"profile {profile.name!r}: percentageOfNodesToScore is {shown}, not 100: kube-scheduler "
                       "stops filtering once it has found that share of feasible nodes, so the extender scores "
                       "a sample and placements differ from the in-tree plugins' over every node")
    expected = 1 if score_mode == "in-tree" else 7
    for i, ext in enumerate(config.extenders):
        if ext.prioritize_verb and ext.weight != expected:
            out.append(f"extenders[{i}].weight is {ext.weight}, not {expected}: with --score-mode {score_mode} "
                       f"kube-scheduler's weight x 10 then scales the extender's scores away from the in-tree "
                       f"magnitude, so they outweigh (or yield to) the other score plugins unlike the disabled ones")
        if ext.filter_verb and not ext.node_cache_capable and (nodes == 0 or nodes > LARGE_CLUSTER):
            size = f"with {nodes} nodes" if nodes else "(the cluster's size is not known yet)"
            out.append(f"extenders[{i}].nodeCacheCapable is false {size}: kube-scheduler then sends every "
                       f"Node object in each request (~3 KB a node, megabytes per pod past {LARGE_CLUSTER} "
                       "nodes) for the extender to parse; the extender keeps its own node cache: set "
                       "nodeCacheCapable: true")
    return out
