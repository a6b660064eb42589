"""`PodTopologySpreadArgs` (`pluginConfig[].args`): parsed and validated as upstream's
`ValidatePodTopologySpreadArgs` does, so a config kube-scheduler would reject is rejected
here too, at start-up, with the offending key named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.errors import ConfigError
from extender.matching.labels import validate_label_key

SYSTEM = "System"
LIST = "List"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

SYSTEM_DEFAULTS: tuple[Mapping[str, Any], ...] = (
    {"topologyKey": HOSTNAME, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 3},
    {"topologyKey": ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 5},
)
CONSTRAINT_FIELDS = {
    "maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains",
    "nodeAffinityPolicy", "nodeTaintsPolicy", "matchLabelKeys",
}


class ArgsError(ValueError):
    """Invalid PodTopologySpread args; the message names the key."""


@dataclass(frozen=True, slots=True)
class SpreadArgs:
    defaulting_type: str = SYSTEM
    default_constraints: tuple[Mapping[str, Any], ...] = ()

    @property
    def defaults(self) -> tuple[Mapping[str, Any], ...]:
        return SYSTEM_DEFAULTS if self.defaulting_type == SYSTEM else self.default_constraints

    @property
    def system_defaulted(self) -> bool:
        return self.defaulting_type == SYSTEM


def _constraint_errors(c: Any, where: str, seen: dict[tuple, int], i: int) -> list[str]:
    if not isinstance(c, Mapping):
        return [f"{where}: expected an object"]
    errors = [f"{where}.{k}: unknown field" for k in c if k not in CONSTRAINT_FIELDS]
    skew = c.get("maxSkew", 0)
    if isinstance(skew, bool) or not isinstance(skew, int) or skew <= 0:
        errors.append(f"{where}.maxSkew: Invalid value: {skew!r}: not in valid range")
    key = c.get("topologyKey", "")
    if not isinstance(key, str) or not key:
        errors.append(f"{where}.topologyKey: Required value: can not be empty")
    else:
        errors.extend(f"{where}.topologyKey: Invalid value: {key!r}: {p}" for p in validate_label_key(key))
    when = c.get("whenUnsatisfiable", "")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        errors.append(
            f'{where}.whenUnsatisfiable: Unsupported value: {when!r}: supported values: '
            f'"{DO_NOT_SCHEDULE}", "{SCHEDULE_ANYWAY}"'
        )
    if c.get("labelSelector") is not None:
        errors.append(
            f"{where}.labelSelector: Forbidden: constraint must not define a selector, "
            "as they deduced for each pod"
        )
    min_domains = c.get("minDomains")
    if min_domains is not None and (isinstance(min_domains, bool) or not isinstance(min_domains, int)):
        errors.append(f"{where}.minDomains: expected an integer")
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if c.get(policy) is not None and not isinstance(c.get(policy), str):
            errors.append(f"{where}.{policy}: expected a string")
    mlk = c.get("matchLabelKeys")
    if mlk is not None and (not isinstance(mlk, list) or not all(isinstance(k, str) for k in mlk)):
        errors.append(f"{where}.matchLabelKeys: expected a list of strings")
    pair = (key if isinstance(key, str) else repr(key), when if isinstance(when, str) else repr(when))
    if pair in seen:
        errors.append(
            f"{where}: Duplicate value: {{{pair[0]!r}, {pair[1]!r}}} (same as item {seen[pair]})"
        )
    else:
        seen[pair] = i
    return errors


def parse_args(args: Mapping[str, Any] | None, where: str = "PodTopologySpread.args") -> SpreadArgs:
    """Defaults (`defaultingType` empty -> System) then upstream validation."""
    args = dict(args or {})
    args.pop("apiVersion", None)
    args.pop("kind", None)
    errors = [f"{where}.{k}: unknown field" for k in args if k not in ("defaultingType", "defaultConstraints")]
    dtype = args.get("defaultingType") or SYSTEM
    raw = args.get("defaultConstraints")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        errors.append(f"{where}.defaultConstraints: expected a list")
        raw = []
    if dtype not in (SYSTEM, LIST):
        errors.append(
            f'{where}.defaultingType: Unsupported value: {dtype!r}: supported values: "{SYSTEM}", "{LIST}"'
        )
    elif dtype == SYSTEM and raw:
        errors.append(f"{where}.defaultingType: Invalid value: {dtype!r}: when .defaultConstraints are not empty")
    seen: dict[tuple, int] = {}
    for i, c in enumerate(raw):
        errors.extend(_constraint_errors(c, f"{where}.defaultConstraints[{i}]", seen, i))
    if errors:
        raise ArgsError("; ".join(errors))
    return SpreadArgs(dtype, tuple(dict(c) for c in raw))


def validate_args(args: Mapping[str, Any], key: str) -> None:
    """The `PLUGIN_ARG_VALIDATORS` entry: raise ConfigError naming the key."""

    try:
        parse_args(args, key)
    except ArgsError as exc:
        raise ConfigError(str(exc)) from None
