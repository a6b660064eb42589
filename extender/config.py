"""Configuration: defaults < YAML file (`--config`) < environment < command-line flags.

Every setting has a flag and an `EXTENDER_*` environment twin. The YAML file uses the
camelCase keys below and may carry plugin arguments in KubeSchedulerConfiguration's
`pluginConfig` shape, so users can paste what they already have. Unknown keys and bad
values are rejected at start-up with the key named.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from extender.errors import ConfigError
from extender.features import FeatureGates, parse_bool, parse_feature_gates
from extender.framework.scoring import SCORE_MODES
from extender.matching.labels import validate_label_key
from extender.model.parse import DEFAULT_ANNOTATION_PREFIX
from extender.plugins import registry
from extender.schedconfig import SchedulerConfiguration, legacy_profile
from extender.schedconfig import load as load_scheduler_config

LOG_LEVELS = ("debug", "info", "warning", "error")
WORKER_CLASSES = ("inline", "pool")
# deprecated names still accepted, each with the class it names and a warning at start-up
WORKER_CLASS_ALIASES = {"gthread": "pool"}
# --max-inflight-bytes keeps its last SMALL_RESERVE bytes for requests of at most
# SMALL_REQUEST bytes (head + body; a NodeNames request for 15,000 nodes is ~0.7 MiB):
# the verbs' budget (`extender.server.budget`).
SMALL_REQUEST = 1 << 20
SMALL_RESERVE = 16 << 20


def bundled_cluster() -> str:
    return str(resources.files("extender") / "data" / "cluster.yaml")


@dataclass(frozen=True)
class Config:
    listen: str = "127.0.0.1:8888"  # loopback: `bind` has no authentication (issue 25)
    metrics_listen: str = "0.0.0.0:8889"  # "" (`off`): health and metrics on `listen` only
    workers: int = 1
    threads: int = 4
    worker_class: str = "inline"
    cluster: str = ""  # "": not given (the bundled example, outside containers)
    kubeconfig: str = ""  # live mode: a kubeconfig path, or "default" ($KUBECONFIG, ~/.kube/config)
    in_cluster: bool = False  # live mode with the pod's service account
    max_staleness: float = 20.0  # perf/staleness.py: a frozen quiet stream found in 4-8 s
    bind_watch_timeout: float = 1.0  # the Pod watch shows a pod we bound within this, or every kind is probed
    max_unready: float = 300.0  # seconds unready before /healthz fails (0: never)
    annotation_prefix: str = DEFAULT_ANNOTATION_PREFIX
    feature_gates: FeatureGates = FeatureGates()
    weights: dict[str, int] = field(default_factory=registry.default_weights)
    score_mode: str = "in-tree"
    # Nodes mode at 5,000 kubelet-registered nodes (~3.2 KB each without image lists) is
    # 16 MB; NodeNames at 15,000 nodes < 1 MiB (docs/operate/hardening.md, "Sizes")
    max_body_bytes: int = 32 << 20
    max_inflight_bytes: int = 48 << 20  # every request held at once (extender.server.budget)
    log_level: str = "info"
    plugin_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    cel_program_cache_size: int = 1024
    cel_result_cache_size: int = 100_000
    reload_interval: float = 2.0
    memory_limit_bytes: int = 256 << 20  # all caches together (extender.caching)
    request_deadline: float = 4.0
    slow_cel_expressions: str = "warn"  # admission: warn about / deny expressions too slow to answer
    webhook_listen: str = ""  # off unless set: the admission webhook's HTTPS listener
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    client_ca_file: str = ""
    # with a client CA: only certificates with one of these subjects (CN, DNS or URI SAN)
    client_cert_allowed_names: tuple[str, ...] = ()
    verbs_tls: bool = False  # serve the verbs' --listen over HTTPS with the same files
    scheduler_profile: str = "default-scheduler"  # deprecated: --scheduler-config
    # kube-scheduler's KubeSchedulerConfiguration: every profile's plugins, weights and
    # arguments (extender.schedconfig); "" keeps the single-profile settings above
    scheduler_config: str = ""
    inflight_wait: float = 1.0
    # /explain on the side listener, to users the API server vouches for about pods they may
    # read (extender.server.auth; docs/operate/security.md)
    explain_endpoint: bool = False
    explain_rate: float = 1.0  # explanations and /drift reports per second per process and user (token bucket)
    explain_burst: int = 5
    record_events: bool = False  # an Event on a pod the filter leaves without a node
    # the drift report (extender.drift, docs/operate/drift.md): running pods whose node no
    # longer satisfies them; the gauge, the side listener's /drift (shown to whoever may
    # use /explain), Events, and the opt-in topology spread report
    drift_report: bool = False
    drift_endpoint: bool = False
    drift_events: bool = False
    drift_topology_spread: bool = False
    # POST /whatif on the side listener (extender.whatif, docs/operate/what-if.md): the
    # engine on a hypothetical state; reads the drift report's running pods
    whatif_endpoint: bool = False
    # filter: failure maps only when no node fits; prioritize: only hosts above the
    # minimum score, shifted by it (docs/reference/semantics.md, "Slim answers")
    slim_answers: bool = True

    @property
    def cluster_file(self) -> str:
        """The cluster file file mode reads: `cluster`, or the bundled example."""
        return self.cluster or bundled_cluster()

    @property
    def drift(self) -> bool:
        """The drift report runs: asked for, or something that reads it is on."""
        return (self.drift_report or self.drift_endpoint or self.drift_events or self.drift_topology_spread
                or self.whatif_endpoint)

    def profiles(self) -> SchedulerConfiguration:
        """The profiles the extender answers for: those of `--scheduler-config`, else the
        one the deprecated single-profile settings describe (`--scheduler-profile`,
        `--weights`, `pluginConfig`). ConfigError naming the field of a bad file."""
        if self.scheduler_config:
            return load_scheduler_config(self.scheduler_config)
        profile = legacy_profile(self.scheduler_profile, self.weights, self.plugin_args)
        return SchedulerConfiguration({profile.name: profile}, percentage=100)

    @property
    def live(self) -> bool:
        """State from the API server (`--kubeconfig` / `--in-cluster`), not a file."""
        return bool(self.kubeconfig) or self.in_cluster


# setting -> (yaml key, env var, parser)
def _int_at_least(minimum: int):
    def parse(value: Any, key: str) -> int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if number < minimum:
            raise ConfigError(f"{key}: must be >= {minimum}, got {number}")
        return number

    return parse


def _float_at_least(minimum: float):
    def parse(value: Any, key: str) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if number < minimum:
            raise ConfigError(f"{key}: must be >= {minimum}, got {number}")
        return number

    return parse


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    try:
        return parse_bool(str(value), key)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _str(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: expected a non-empty string, got {value!r}")
    return value


def _listen(value: Any, key: str) -> str:
    text = _str(value, key)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}: expected HOST:PORT, got {text!r}")
    return text


def _listen_or_off(value: Any, key: str) -> str:
    """HOST:PORT, or empty (also `off`) for a listener that is not started."""
    text = "" if value is None else str(value).strip()
    return "" if text in ("", "off") else _listen(text, key)


def _path_or_empty(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a file path, got {value!r}")
    return value


def _names(value: Any, key: str) -> tuple[str, ...]:
    """A comma-separated string (flag, env) or a list of strings (YAML)."""
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ConfigError(f"{key}: expected a list of names, got {value!r}")
    return tuple(item for item in items if item)


def _choice(options: tuple[str, ...], lower: bool = False):
    def parse(value: Any, key: str) -> str:
        text = str(value).lower() if lower else str(value)
        if text not in options:
            raise ConfigError(f"{key}: must be one of {', '.join(options)}; got {value!r}")
        return text

    return parse


def _worker_class(value: Any, key: str) -> str:
    """inline or pool; `gthread`, the old name of pool (it never was gunicorn's gthread
    worker), is accepted with a FutureWarning that `extender serve` logs."""
    canonical = WORKER_CLASS_ALIASES.get(str(value))
    if canonical is None:
        return _choice(WORKER_CLASSES)(value, key)
    warnings.warn(f"{key}: {value!r} is deprecated and will be removed: it names the "
                  f"{canonical!r} worker class (every verb on a --threads pool thread); "
                  f"use {canonical!r}", FutureWarning, stacklevel=2)
    return canonical


def _gates(value: Any, key: str) -> FeatureGates:
    try:
        return parse_feature_gates(value)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _weights(value: Any, key: str) -> dict[str, int]:
    if isinstance(value, str):
        pairs = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, weight = part.partition("=")
            if not sep:
                raise ConfigError(f"{key}: expected Plugin=weight, got {part!r}")
            pairs[name.strip()] = weight.strip()
        value = pairs
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping of plugin name to weight")
    weights = registry.default_weights()
    for name, weight in value.items():
        if name not in weights:
            raise ConfigError(f"{key}: unknown score plugin {name!r} (known: {', '.join(weights)})")
        weights[name] = _int_at_least(0)(weight, f"{key}.{name}")
    return weights


def _prefix(value: Any, key: str) -> str:
    text = _str(value, key)
    problems = validate_label_key(text + "/x")
    if problems:
        raise ConfigError(f"{key}: {text!r} is not a valid annotation prefix: {'; '.join(problems)}")
    return text


SETTINGS: dict[str, tuple[str, Any]] = {
    # attribute: (yaml key, parser)
    "listen": ("listen", _listen),
    "metrics_listen": ("metricsListen", _listen_or_off),
    "workers": ("workers", _int_at_least(1)),
    "threads": ("threads", _int_at_least(1)),
    "worker_class": ("workerClass", _worker_class),
    "cluster": ("cluster", _str),
    "kubeconfig": ("kubeconfig", _str),
    "in_cluster": ("inCluster", _bool),
    "max_staleness": ("maxStaleness", _float_at_least(2)),
    "bind_watch_timeout": ("bindWatchTimeout", _float_at_least(0)),
    "max_unready": ("maxUnready", _float_at_least(0)),
    "annotation_prefix": ("annotationPrefix", _prefix),
    "feature_gates": ("featureGates", _gates),
    "weights": ("weights", _weights),
    "score_mode": ("scoreMode", _choice(SCORE_MODES)),
    "max_body_bytes": ("maxBodyBytes", _int_at_least(1)),
    "max_inflight_bytes": ("maxInflightBytes", _int_at_least(1 << 20)),
    "log_level": ("logLevel", _choice(LOG_LEVELS, lower=True)),
    "cel_program_cache_size": ("celProgramCacheSize", _int_at_least(1)),
    "cel_result_cache_size": ("celResultCacheSize", _int_at_least(0)),
    "reload_interval": ("reloadInterval", _float_at_least(0)),
    "memory_limit_bytes": ("memoryLimitBytes", _int_at_least(16 << 20)),
    "request_deadline": ("requestDeadline", _float_at_least(0)),
    "slow_cel_expressions": ("slowCelExpressions", _choice(("warn", "deny"), lower=True)),
    "webhook_listen": ("webhookListen", _listen_or_off),
    "tls_cert_file": ("tlsCertFile", _path_or_empty),
    "tls_private_key_file": ("tlsPrivateKeyFile", _path_or_empty),
    "client_ca_file": ("clientCaFile", _path_or_empty),
    "client_cert_allowed_names": ("clientCertAllowedNames", _names),
    "verbs_tls": ("verbsTls", _bool),
    "scheduler_profile": ("schedulerProfile", _str),
    "scheduler_config": ("schedulerConfig", _path_or_empty),
    "inflight_wait": ("inflightWait", _float_at_least(0)),
    "explain_endpoint": ("explainEndpoint", _bool),
    "explain_rate": ("explainRate", _float_at_least(0.001)),
    "explain_burst": ("explainBurst", _int_at_least(1)),
    "record_events": ("recordEvents", _bool),
    "drift_report": ("driftReport", _bool),
    "drift_endpoint": ("driftEndpoint", _bool),
    "drift_events": ("driftEvents", _bool),
    "drift_topology_spread": ("driftTopologySpread", _bool),
    "whatif_endpoint": ("whatifEndpoint", _bool),
    "slim_answers": ("slimAnswers", _bool),
}


def env_name(attr: str) -> str:
    return "EXTENDER_" + attr.upper()


def flag_name(attr: str) -> str:
    return "--" + attr.replace("_", "-")


def _plugin_config(value: Any, key: str) -> dict[str, dict[str, Any]]:
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of {{name, args}}")
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "args"}:
            raise ConfigError(f"{where}: expected {{name, args}}")
        name = entry.get("name")
        record = registry.PLUGINS.get(name) if isinstance(name, str) else None
        if record is None:
            raise ConfigError(f"{where}.name: unknown plugin {name!r}")
        args = entry.get("args") or {}
        if not isinstance(args, dict):
            raise ConfigError(f"{where}.args: expected a mapping")
        args = {k: v for k, v in args.items() if k not in ("apiVersion", "kind")}
        (record.parse_args or _no_args)(args, f"{where}.args")
        out[name] = args
    return out


def _no_args(args: dict[str, Any], key: str) -> None:
    """A plugin without an argument parser in its record takes none (as TaintToleration
    and NodeUnschedulable take none upstream either)."""
    if args:
        raise ConfigError(f"{key}: this plugin takes no arguments, got {', '.join(sorted(args))}")


def load_file(path: str | os.PathLike) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {str(path)!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {str(path)!r} must be a mapping")
    return data


def build_config(
    flags: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    config_file: str | None = None,
) -> Config:
    """Merge the layers; `flags` holds only the flags the user actually gave."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = os.environ if env is None else env
    config_file = config_file or env.get("EXTENDER_CONFIG")
    changes: dict[str, Any] = {}
    if config_file:
        data = load_file(config_file)
        by_yaml = {yaml_key: attr for attr, (yaml_key, _) in SETTINGS.items()}
        for key, value in data.items():
            if key == "pluginConfig":
                changes["plugin_args"] = _plugin_config(value, "pluginConfig")
                continue
            attr = by_yaml.get(key)
            if attr is None:
                known = ", ".join(sorted([*by_yaml, "pluginConfig"]))
                raise ConfigError(f"{config_file}: unknown key {key!r} (known: {known})")
            changes[attr] = SETTINGS[attr][1](value, key)
        if not os.path.isabs(changes.get("scheduler_config") or "/"):
            # beside the file that names it: both come from one ConfigMap (one directory)
            changes["scheduler_config"] = os.path.join(os.path.dirname(config_file), changes["scheduler_config"])
    for attr, (_, parse) in SETTINGS.items():
        name = env_name(attr)
        if name in env and env[name] != "":
            changes[attr] = parse(env[name], name)
    for attr, value in flags.items():
        if attr not in SETTINGS:
            raise ConfigError(f"unknown setting {attr!r}")
        changes[attr] = SETTINGS[attr][1](value, flag_name(attr))
    config = replace(Config(), **changes)
    legacy = sorted({"scheduler_profile", "weights", "plugin_args"} & set(changes))
    if config.scheduler_config and legacy:
        raise ConfigError(f"--scheduler-config: the profiles, weights and plugin arguments come from it; "
                          f"drop {', '.join(_legacy_name(a) for a in legacy)}")
    if legacy:
        warnings.warn(f"{', '.join(_legacy_name(a) for a in legacy)}: deprecated, removed in the next release: "
                      "give kube-scheduler's own configuration file with --scheduler-config (every profile, "
                      "its disabled plugins, weights and pluginConfig; docs/operate/upgrades.md)",
                      FutureWarning, stacklevel=2)
    if config.webhook_listen and not (config.tls_cert_file and config.tls_private_key_file):
        raise ConfigError("--webhook-listen: the API server calls webhooks over HTTPS only; "
                          "give --tls-cert-file and --tls-private-key-file")
    if config.verbs_tls and not (config.tls_cert_file and config.tls_private_key_file):
        raise ConfigError("--verbs-tls: give --tls-cert-file and --tls-private-key-file")
    if config.client_cert_allowed_names and not config.client_ca_file:
        raise ConfigError("--client-cert-allowed-names: client certificates are only asked for "
                          "with --client-ca-file; give it")
    if config.max_body_bytes > SMALL_REQUEST and config.max_inflight_bytes - SMALL_RESERVE < config.max_body_bytes:
        raise ConfigError(f"--max-inflight-bytes ({config.max_inflight_bytes}) must hold one request of "
                          f"--max-body-bytes ({config.max_body_bytes}) besides the {SMALL_RESERVE >> 20} MiB "
                          "kept for small requests")
    if config.kubeconfig and config.in_cluster:
        raise ConfigError("--kubeconfig and --in-cluster exclude each other: choose one")
    if config.live and config.cluster:
        raise ConfigError("--cluster (file mode) and --kubeconfig/--in-cluster (live mode) "
                          "exclude each other: choose one")
    return config



def _legacy_name(attr: str) -> str:
    return "pluginConfig" if attr == "plugin_args" else flag_name(attr)


def exposed_verbs_warning(config: Config) -> str | None:
    """A warning when the verbs listen beyond loopback without client certificates:
    whoever reaches the port can call `bind` (and `preempt`) as the extender's identity."""
    host = config.listen.rsplit(":", 1)[0].strip("[]")
    if host in ("127.0.0.1", "::1", "localhost") or (config.verbs_tls and config.client_ca_file):
        return None
    return (f"--listen {config.listen}: the verbs (bind included) are reachable beyond loopback "
            "without client certificates; keep 127.0.0.1 (the default) with kube-scheduler in "
            "the same pod, or add --verbs-tls true and --client-ca-file")
