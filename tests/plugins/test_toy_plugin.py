"""A new plugin is its class plus one registry record: this file defines a toy filter and
score plugin (`Frozen`: nodes labelled frozen fail; nodes of the gold tier score 100),
registers it and nothing else in the package changes, yet /filter, /prioritize (through
the Flask app), `explain`, the drift report (its JSON, the gauge, `kubectl extender
drift`, the what-if), the configuration (its arguments, its weight, a scheduler
configuration's profiles) and the framework's contract check all know it."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from conftest import make_extender
from kubectl_extender.cli import render_drift

from extender.api.wire import ExtenderArgs
from extender.config import Config, build_config
from extender.drift import attach_tracker
from extender.drift import report as drift_report
from extender.drift.evaluate import gauge_labels
from extender.engine import Extender
from extender.errors import ConfigError
from extender.explain import explain
from extender.framework import (
    MAX_NODE_SCORE,
    Code,
    CycleState,
    FilterPlugin,
    Framework,
    NodeScore,
    PluginContractError,
    ScorePlugin,
    Status,
)
from extender.framework.drift import REQUIRED, Violation
from extender.framework.handle import Handle
from extender.framework.verdicts import Masks, masks_of
from extender.plugins import registry
from extender.plugins.registry import DriftRecord, PluginRecord
from extender.server.app import create_app
from extender.state import ClusterSnapshot, StaticSource
from extender.state.store import Store
from extender.whatif import offline
from testing.client import Client

NAME = "Frozen"
FROZEN = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) were frozen",))
TIER = "example.com/tier"


class Frozen(FilterPlugin, ScorePlugin):
    """Filter: a node whose `label` (its argument, default example.com/frozen) is "true"
    fails. Score: MAX_NODE_SCORE on gold-tier nodes, 0 elsewhere."""

    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.label = handle.plugin_args.get(NAME, {}).get("label", "example.com/frozen")

    def filter(self, state: CycleState, pod, node) -> Status:
        return FROZEN if node.labels.get(self.label) == "true" else Status()

    def filter_nodes(self, state: CycleState, pod, nodes) -> Masks:
        return masks_of({n.name: FROZEN for n in nodes if n.labels.get(self.label) == "true"}, nodes)

    def score(self, state: CycleState, pod, node) -> tuple[int, Status]:
        return (MAX_NODE_SCORE if node.labels.get(TIER) == "gold" else 0), Status()

    def score_nodes(self, state: CycleState, pod, nodes) -> np.ndarray:
        return np.array([self.score(state, pod, n)[0] for n in nodes], dtype=np.int64)

    def normalize_score(self, state: CycleState, pod, scores: list[NodeScore]) -> Status:
        return Status()

    def normalize_values(self, state: CycleState, pod, nodes, raw: np.ndarray) -> np.ndarray:
        return raw


def parse_args(args: dict, key: str) -> None:
    unknown = set(args) - {"label"}
    if unknown:
        raise ConfigError(f"{key}: unknown field(s) {', '.join(sorted(unknown))}")


# No `in_tree_points`: kube-scheduler has no such plugin, so it runs wherever a profile
# delegates any (as VolumeNodeAffinity does). Its drift verdict is its own Filter's
# (`DriftRecord`'s default judge, `by_filter`), and its reason labels the gauge.
RECORD = PluginRecord(NAME, Frozen, weight=5, parse_args=parse_args,
                      drift=DriftRecord(reasons=FROZEN.reasons, invalid="invalid frozen label"))


@pytest.fixture
def toy():
    assert NAME not in registry.PLUGINS
    registry.register(RECORD)
    yield RECORD
    registry.unregister(NAME)


def node(name: str, **labels: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}}


NODES = [node("gold", **{TIER: "gold"}), node("plain"), node("ice", **{"example.com/frozen": "true"}),
         node("ice-label", chill="true")]
NAMES = [n["metadata"]["name"] for n in NODES]
POD = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "default", "uid": "u-p"},
       "spec": {"containers": [{"name": "c", "image": "i"}]}}


def post(client: Client, verb: str, body: dict):
    response = client.post(f"/{verb}", data=orjson.dumps(body), content_type="application/json")
    assert response.status_code == 200
    return orjson.loads(response.data)


def test_filter_and_prioritize_over_http(toy):
    config = Config(slim_answers=False)
    assert config.weights[NAME] == 5  # its record's default weight
    extender = make_extender(NODES, config)
    assert extender.framework.plugin_names()[-1] == NAME
    client = Client(create_app(config, StaticSource(ClusterSnapshot.from_objects(NODES)), extender))

    result = post(client, "filter", {"Pod": POD, "NodeNames": NAMES})
    assert result["NodeNames"] == ["gold", "plain", "ice-label"]
    assert result["FailedAndUnresolvableNodes"] == {"ice": "node(s) were frozen"}

    scores = {h["Host"]: h["Score"] for h in post(client, "prioritize", {"Pod": POD, "NodeNames": ["gold", "plain"]})}
    assert scores["gold"] - scores["plain"] == 5 * MAX_NODE_SCORE // 10  # weight 5, in-tree mode


def test_explain_shows_its_verdicts_and_scores(toy):
    extender = make_extender(NODES, Config())
    report = explain(extender, [POD], NAMES)["results"][0]
    assert report["filter"]["NodeNames"] == ["gold", "plain", "ice-label"]
    assert report["nodes"]["ice"]["plugins"][NAME]["reasons"] == ["node(s) were frozen"]
    assert report["nodes"]["gold"]["plugins"][NAME]["score"] == MAX_NODE_SCORE
    assert report["nodes"]["plain"]["plugins"][NAME]["score"] == 0
    assert "node(s) were frozen" in report["summary"]["message"]


def test_reference_and_batch_forms_agree(toy):
    fast, slow = (explain(make_extender(NODES, Config(), fast=f), [POD], NAMES)["results"][0] for f in (True, False))
    assert fast["nodes"]["ice"]["plugins"][NAME]["reasons"] == ["node(s) were frozen"]
    assert slow == fast


@pytest.mark.filterwarnings("ignore::FutureWarning")  # pluginConfig and weights: deprecated
def test_its_arguments_are_configured_and_checked(toy, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"weights: {{{NAME}: 9}}\npluginConfig:\n- name: {NAME}\n  args: {{label: chill}}\n")
    config = build_config({}, env={}, config_file=str(path))
    assert config.weights[NAME] == 9 and config.plugin_args == {NAME: {"label": "chill"}}
    result = orjson.loads(make_extender(NODES, config).filter(ExtenderArgs(POD, None, NAMES)))
    assert result["NodeNames"] == ["gold", "plain", "ice"]

    path.write_text(f"pluginConfig:\n- name: {NAME}\n  args: {{lable: chill}}\n")
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\]\.args: unknown field\(s\) lable"):
        build_config({}, env={}, config_file=str(path))


def test_a_scheduler_configuration_profile_runs_it_with_its_weight(toy, tmp_path):
    path = tmp_path / "scheduler.yaml"
    path.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                    "profiles:\n- schedulerName: default-scheduler\n  plugins:\n"
                    "    multiPoint: {disabled: [{name: '*'}]}\n")
    profile = Config(scheduler_config=str(path)).profiles().profiles["default-scheduler"]
    assert profile.weights[NAME] == 5
    extender = make_extender(NODES, Config(scheduler_config=str(path)))
    assert NAME in extender.framework.plugin_names()


def running(name: str, node_name: str) -> dict:
    return {**POD, "metadata": {**POD["metadata"], "name": name, "uid": f"u-{name}"},
            "spec": {**POD["spec"], "nodeName": node_name}, "status": {"phase": "Running"}}


RUNNING = [running("on-ice", "ice"), running("on-gold", "gold")]


def test_the_drift_report_shows_its_verdict_on_a_running_pod(toy):
    """A pod running on a node the toy rejects is drifted by the toy's own Filter verdict,
    in the report's JSON, the gauge's labels, `kubectl extender drift` and a what-if."""
    config = Config(drift_report=True)
    store = Store()
    tracker = attach_tracker(store, config)
    store.load([*NODES, *RUNNING])
    fallback, profiles = Extender(config, StaticSource(store.snapshot())).plugins_by_profile()
    tracker.bind(fallback, profiles=profiles)
    tracker.settle()

    frozen = Violation(NAME, REQUIRED, "node(s) were frozen")
    assert [(key, d.node, d.violations) for key, d in tracker.entries()] == [(("default", "on-ice"), "ice", (frozen,))]
    assert (NAME, "node(s) were frozen", REQUIRED) in gauge_labels()
    assert (NAME, "invalid frozen label", REQUIRED) in gauge_labels()
    assert tracker.counts() == {(NAME, "node(s) were frozen", REQUIRED): 1}
    tracker.export_zeros()  # every label set, the toy's included, without a KeyError

    answer = drift_report.build(tracker)
    assert [(p["name"], p["node"], p["violations"]) for p in answer["pods"]] == [
        ("on-ice", "ice", [{"plugin": NAME, "severity": REQUIRED, "reason": "node(s) were frozen", "details": []}])]
    assert answer["totals"] == [{"plugin": NAME, "reason": "node(s) were frozen", "severity": REQUIRED, "pods": 1}]
    table = render_drift(orjson.loads(orjson.dumps(answer)), all_namespaces=False).splitlines()
    assert table[1].split() == ["on-ice", "ice", "required", NAME, "node(s)", "were", "frozen"]

    whatif = offline(config, [*NODES, *RUNNING], {"changes": [{"nodes": ["gold"], "label": "example.com/frozen=true"}]})
    [pod] = whatif["running"]["pods"]
    assert (pod["name"], pod["change"], pod["severity"]) == ("on-gold", "violates", REQUIRED)
    assert pod["after"] == [frozen.to_json()]


def test_unregistered_it_is_unknown_again():
    assert NAME not in registry.PLUGINS
    assert NAME not in Config().weights
    assert NAME not in make_extender(NODES, Config()).framework.plugin_names()


def test_a_plugin_claiming_a_point_without_all_its_methods_is_refused():
    class Half(FilterPlugin):
        name = "Half"

        def filter(self, state, pod, node):
            return Status()

    with pytest.raises(PluginContractError, match="plugin 'Half' implements Filter but does not define filter_nodes"):
        Framework([Half()], {})

    class Scoreless:  # duck-typed, no Protocol: its methods claim the point
        name = "Scoreless"

        def score(self, state, pod, node):
            return 0, Status()

    with pytest.raises(PluginContractError, match="implements Score but does not define score_nodes, "
                                                  "normalize_score, normalize_values"):
        Framework([Scoreless()], {})


def test_the_freshness_gate_checks_the_kinds_its_record_says_it_reads():
    """A verdict is refused while a kind it reads is not confirmed current: the engine asks
    every record which kinds a pod's verdict reads."""
    pod = make_extender(NODES, Config()).parse_pod(POD)
    assert make_extender(NODES, Config()).reads(pod) == ("Node",)
    registry.register(PluginRecord(NAME, Frozen, reads=lambda pod, plugin: ("Node", "Service")))
    try:
        assert make_extender(NODES, Config()).reads(pod) == ("Node", "Service")
    finally:
        registry.unregister(NAME)
