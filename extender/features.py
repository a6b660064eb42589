"""Feature gates, by their upstream names, parsed from `--feature-gates=A=true,B=false`.

All gates default to on here (the point of the extender is to offer these features
today); turning one off gives upstream's gate-off behaviour: the operator never matches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

GATE_NAMES = {
    "TaintTolerationComparisonOperators": "comparison_operators",
    "TaintTolerationNodeAffinitySemverComparisonOperators": "semver_operators",
    "TaintTolerationCEL": "cel",
    "NodeInclusionPolicyInPodTopologySpread": "node_inclusion_policy",
    "MatchLabelKeysInPodTopologySpread": "match_label_keys",
}


@dataclass(frozen=True, slots=True)
class FeatureGates:
    comparison_operators: bool = True
    semver_operators: bool = True
    cel: bool = True
    node_inclusion_policy: bool = True
    match_label_keys: bool = True

    def as_dict(self) -> dict[str, bool]:
        by_attr = {attr: name for name, attr in GATE_NAMES.items()}
        return {by_attr[f.name]: getattr(self, f.name) for f in fields(self)}


def parse_bool(text: str, what: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "t", "yes"):
        return True
    if lowered in ("false", "0", "f", "no"):
        return False
    raise ValueError(f"{what}: invalid boolean {text!r}")


def parse_feature_gates(spec: str | dict | None, base: FeatureGates | None = None) -> FeatureGates:
    """Parse `A=true,B=false` (or a mapping) onto `base`; unknown gates are errors."""
    gates = base or FeatureGates()
    if not spec:
        return gates
    items: list[tuple[str, object]]
    if isinstance(spec, dict):
        items = list(spec.items())
    else:
        items = []
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"feature-gates: missing '=' in {part!r} (want Name=true|false)")
            name, _, value = part.partition("=")
            items.append((name.strip(), value))
    changes = {}
    for name, value in items:
        if name not in GATE_NAMES:
            known = ", ".join(sorted(GATE_NAMES))
            raise ValueError(f"feature-gates: unknown feature gate {name!r} (known: {known})")
        flag = value if isinstance(value, bool) else parse_bool(str(value), f"feature-gates {name}")
        changes[GATE_NAMES[name]] = flag
    return replace(gates, **changes)
