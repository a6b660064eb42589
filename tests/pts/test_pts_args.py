"""PodTopologySpreadArgs: upstream validation (`ValidatePodTopologySpreadArgs`), config
file plumbing, and the shipped example config."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pts_harness import FakeCel

from extender.api.candidates import resolve
from extender.api.wire import ExtenderArgs
from extender.config import ConfigError, build_config
from extender.engine import Extender
from extender.plugins.podtopologyspread.args import (
    LIST,
    SYSTEM,
    SYSTEM_DEFAULTS,
    ArgsError,
    parse_args,
)
from extender.state import ClusterSnapshot, StaticSource, load_objects

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}


def test_defaults_to_system() -> None:
    args = parse_args({})
    assert args.defaulting_type == SYSTEM and args.system_defaulted
    assert args.defaults == SYSTEM_DEFAULTS
    assert parse_args({"defaultingType": LIST}).defaults == ()


def test_valid_list() -> None:
    second = {**GOOD, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2, "nodeTaintsPolicy": "Honor"}
    args = parse_args({"defaultingType": "List", "defaultConstraints": [GOOD, second]})
    assert [c["whenUnsatisfiable"] for c in args.defaults] == ["DoNotSchedule", "ScheduleAnyway"]
    assert not args.system_defaulted


@pytest.mark.parametrize(
    "args,message",
    [
        ({"defaultingType": "Bogus"}, "defaultingType: Unsupported value"),
        ({"defaultConstraints": [GOOD]}, "defaultingType: Invalid value: 'System': when .defaultConstraints are not empty"),
        ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "maxSkew": 0}]}, "defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range"),
        ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "maxSkew": -1}]}, "maxSkew: Invalid value: -1"),
        ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "topologyKey": ""}]}, "topologyKey: Required value: can not be empty"),
        ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "topologyKey": "bad key!"}]}, "topologyKey: Invalid value: 'bad key!'"),
        ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "whenUnsatisfiable": "Maybe"}]}, "whenUnsatisfiable: Unsupported value: 'Maybe'"),
        ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "labelSelector": {}}]}, "labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"),
        ({"defaultingType": "List", "defaultConstraints": [GOOD, {**GOOD, "maxSkew": 2}]}, "defaultConstraints[1]: Duplicate value"),
        ({"defaultingType": "List", "defaultConstraints": [{**GOOD, "bogus": 1}]}, "defaultConstraints[0].bogus: unknown field"),
        ({"defaultingType": "List", "extra": 1}, "extra: unknown field"),
        ({"defaultingType": "List", "defaultConstraints": "x"}, "defaultConstraints: expected a list"),
    ],
)
def test_invalid_args(args, message) -> None:
    with pytest.raises(ArgsError) as info:
        parse_args(args, "args")
    assert message in str(info.value)


def test_config_file_rejects_bad_args_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "pluginConfig:\n- name: PodTopologySpread\n  args:\n    defaultingType: List\n"
        "    defaultConstraints:\n    - {maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}\n"
    )
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\]\.args\.defaultConstraints\[0\]\.maxSkew"):
        build_config(env={}, config_file=str(path))


def test_example_list_config_applies_cluster_defaults() -> None:
    config = build_config(env={}, config_file=str(ROOT / "examples" / "config-pts-list.yaml"))
    args = config.plugin_args["PodTopologySpread"]
    assert args["defaultingType"] == "List" and len(args["defaultConstraints"]) == 2
    snapshot = ClusterSnapshot.from_objects(load_objects(str(ROOT / "examples" / "cluster.yaml")))
    ext = Extender(config, StaticSource(snapshot), cel=FakeCel())
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "controller": True}
    pod = {"metadata": {"name": "web-x", "namespace": "shop", "ownerReferences": [owner],
                        "labels": {"app": "web", "pod-template-hash": "7d9f"}}, "spec": {}}
    names = [n.name for n in snapshot.nodes.nodes]
    state = ext.new_state(snapshot)
    outcome = ext.framework.run_score(state, ext.parse_pod(pod), resolve(snapshot, names).nodes)
    assert outcome.scores["PodTopologySpread"] is not None
    st = state.read("PreScorePodTopologySpread")
    assert [c.topology_key for c in st.constraints] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    # Service `web` (app=web) AND the owning ReplicaSet's selector
    assert str(st.constraints[0].selector) == "app=web,pod-template-hash=7d9f"
    # a pod in no Service / workload gets no defaults: PreScore skips
    lone = {"metadata": {"name": "lone", "namespace": "shop", "labels": {"x": "y"}}, "spec": {}}
    assert ext.framework.run_score(ext.new_state(snapshot), ext.parse_pod(lone),
                                   resolve(snapshot, names).nodes).scores["PodTopologySpread"] is None
    assert orjson.loads(ext.prioritize(ExtenderArgs(pod, None, names)))
