"""A strict checker for `kubescheduler.config.k8s.io/v1` KubeSchedulerConfiguration.

The field table is written from upstream's `staging/src/k8s.io/kube-scheduler/config/v1/
types.go` (and the component-base `LeaderElectionConfiguration`,
`ClientConnectionConfiguration`, `DebuggingConfiguration` it embeds): every JSON field
name with its Go type. kube-scheduler decodes its config strictly, so an unknown or
misspelt field is an error here too. A few of upstream's validation rules
(`pkg/scheduler/apis/config/validation`) that a deployment can get wrong are checked on
top: profile names, percentages, extender weight/bind rules, multiPoint plugin names.
"""

from __future__ import annotations

import re
from typing import Any

# Go types as checkers' names: "bool", "int32", "int64", "float32", "string",
# "duration" (metav1.Duration), "bytes" ([]byte: base64 string), a dict (a struct),
# or ("list", element).
PLUGIN = {"name": "string", "weight": "int32"}
PLUGIN_SET = {"enabled": ("list", PLUGIN), "disabled": ("list", PLUGIN)}
PLUGINS = {name: PLUGIN_SET for name in (
    "preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
    "reserve", "permit", "preBind", "bind", "postBind", "multiPoint",
    "placementGenerate", "placementScore", "placementFeasible", "podGroupPostFilter",
)}
PLUGIN_CONFIG = {"name": "string", "args": "raw"}
PROFILE = {
    "schedulerName": "string",
    "percentageOfNodesToScore": "int32",
    "percentageOfPlacementsToScore": "int32",
    "plugins": PLUGINS,
    "pluginConfig": ("list", PLUGIN_CONFIG),
}
EXTENDER_TLS = {
    "insecure": "bool", "serverName": "string", "certFile": "string", "keyFile": "string",
    "caFile": "string", "certData": "bytes", "keyData": "bytes", "caData": "bytes",
}
EXTENDER = {
    "urlPrefix": "string", "filterVerb": "string", "preemptVerb": "string",
    "prioritizeVerb": "string", "weight": "int64", "bindVerb": "string",
    "enableHTTPS": "bool", "tlsConfig": EXTENDER_TLS, "httpTimeout": "duration",
    "nodeCacheCapable": "bool",
    "managedResources": ("list", {"name": "string", "ignoredByScheduler": "bool"}),
    "ignorable": "bool",
}
LEADER_ELECTION = {
    "leaderElect": "bool", "leaseDuration": "duration", "renewDeadline": "duration",
    "retryPeriod": "duration", "resourceLock": "string", "resourceName": "string",
    "resourceNamespace": "string",
}
CLIENT_CONNECTION = {
    "kubeconfig": "string", "acceptContentTypes": "string", "contentType": "string",
    "qps": "float32", "burst": "int32",
}
CONFIGURATION = {
    "apiVersion": "string", "kind": "string",
    "parallelism": "int32",
    "leaderElection": LEADER_ELECTION,
    "clientConnection": CLIENT_CONNECTION,
    # DebuggingConfiguration is embedded inline (json:""): its fields sit at the top.
    "enableProfiling": "bool", "enableContentionProfiling": "bool",
    "percentageOfNodesToScore": "int32",
    "percentageOfPlacementsToScore": "int32",
    "podInitialBackoffSeconds": "int64",
    "podMaxBackoffSeconds": "int64",
    "profiles": ("list", PROFILE),
    "extenders": ("list", EXTENDER),
    "delayCacheUntilActive": "bool",
}

INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
DURATION = re.compile(r"^-?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$|^0$")
RESOURCE_LOCKS = ("leases", "endpointsleases", "configmapsleases")


def _check(value: Any, schema: Any, path: str, errors: list[str]) -> None:
    if value is None:
        return  # null is the zero value for every field kind here
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key not in schema:
                errors.append(f"{where}: unknown field")
            else:
                _check(item, schema[key], where, errors)
    elif isinstance(schema, tuple):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, schema[1], f"{path}[{i}]", errors)
    elif schema in INT_RANGES:
        low, high = INT_RANGES[schema]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            errors.append(f"{path}: expected {schema}, got {value!r}")
    elif schema == "float32":
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(f"{path}: expected a number, got {value!r}")
    elif schema == "bool":
        if not isinstance(value, bool):
            errors.append(f"{path}: expected a boolean, got {value!r}")
    elif schema in ("string", "bytes"):
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {value!r}")
    elif schema == "duration":
        if not isinstance(value, str) or not DURATION.match(value):
            errors.append(f"{path}: expected a Go duration like 5s, got {value!r}")
    elif schema != "raw":
        raise AssertionError(f"bad schema at {path}: {schema!r}")


def _validate(cfg: dict[str, Any], errors: list[str]) -> None:
    """Upstream validation rules a deployment can break."""
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1":
        errors.append(f"apiVersion: expected kubescheduler.config.k8s.io/v1, got {cfg.get('apiVersion')!r}")
    if cfg.get("kind") != "KubeSchedulerConfiguration":
        errors.append(f"kind: expected KubeSchedulerConfiguration, got {cfg.get('kind')!r}")
    pct = cfg.get("percentageOfNodesToScore")
    if pct is not None and not 0 <= pct <= 100:
        errors.append(f"percentageOfNodesToScore: not in valid range [0-100], got {pct}")
    lock = (cfg.get("leaderElection") or {}).get("resourceLock")
    if lock is not None and lock not in RESOURCE_LOCKS:
        errors.append(f"leaderElection.resourceLock: must be one of {RESOURCE_LOCKS}, got {lock!r}")
    names: set[str] = set()
    for i, profile in enumerate(cfg.get("profiles") or []):
        name = profile.get("schedulerName") or ""
        if not name:
            errors.append(f"profiles[{i}].schedulerName: Required value")
        elif name in names:
            errors.append(f"profiles[{i}].schedulerName: Duplicate value: {name!r}")
        names.add(name)
        plugins = profile.get("plugins") or {}
        for point, sets in plugins.items():
            for kind in ("enabled", "disabled"):
                for j, plugin in enumerate((sets or {}).get(kind) or []):
                    if not plugin.get("name"):
                        errors.append(f"profiles[{i}].plugins.{point}.{kind}[{j}].name: Required value")
        for j, plugin_config in enumerate(profile.get("pluginConfig") or []):
            if plugin_config.get("name") == "DefaultPreemption":
                _default_preemption_args(plugin_config.get("args") or {},
                                         f"profiles[{i}].pluginConfig[{j}].args", errors)
    binders = 0
    for i, ext in enumerate(cfg.get("extenders") or []):
        where = f"extenders[{i}]"
        if not ext.get("urlPrefix"):
            errors.append(f"{where}.urlPrefix: Required value")
        if ext.get("prioritizeVerb") and (ext.get("weight") or 0) <= 0:
            errors.append(f"{where}.weight: must have a positive weight applied to it")
        binders += bool(ext.get("bindVerb"))
        for j, res in enumerate(ext.get("managedResources") or []):
            if "/" not in (res.get("name") or ""):
                errors.append(f"{where}.managedResources[{j}].name: must be an extended resource name")
    if binders > 1:
        errors.append("extenders: only one extender can implement bind")


DEFAULT_PREEMPTION_ARGS = {"apiVersion": "string", "kind": "string",
                           "minCandidateNodesPercentage": "int32", "minCandidateNodesAbsolute": "int32"}


def _default_preemption_args(args: dict[str, Any], path: str, errors: list[str]) -> None:
    """`DefaultPreemptionArgs` and upstream's ValidateDefaultPreemptionArgs (the
    defaults 10 / 100 apply to a missing field)."""
    found: list[str] = []
    _check(args, DEFAULT_PREEMPTION_ARGS, path, found)
    errors.extend(found)
    if found:
        return
    pct = args.get("minCandidateNodesPercentage", 10)
    absolute = args.get("minCandidateNodesAbsolute", 100)
    if not 0 <= pct <= 100:
        errors.append(f"{path}.minCandidateNodesPercentage: not in valid range [0, 100], got {pct}")
    if absolute < 0:
        errors.append(f"{path}.minCandidateNodesAbsolute: not in valid range [0, inf), got {absolute}")
    if pct == 0 and absolute == 0:
        errors.append(f"{path}: minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be zero")


def check_scheduler_config(cfg: Any) -> list[str]:
    """Every problem found, as `field.path: message` lines; empty when valid."""
    errors: list[str] = []
    if not isinstance(cfg, dict):
        return ["expected a KubeSchedulerConfiguration object"]
    _check(cfg, CONFIGURATION, "", errors)
    if not errors:
        _validate(cfg, errors)
    return errors
