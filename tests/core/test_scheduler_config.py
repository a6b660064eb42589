"""`--scheduler-config`: kube-scheduler's own KubeSchedulerConfiguration, decoded strictly,
defaulted and validated as kube-scheduler v1.30 does (the error texts below are what
kube-scheduler-v1.30.6 --config printed for the same files), and one engine answering
each pod by its own profile exactly as a single-profile engine configured with that
profile's arguments answers."""

from __future__ import annotations

import textwrap

import orjson
import pytest

from extender import metrics
from extender.api.wire import ExtenderArgs
from extender.config import Config, build_config
from extender.engine import Extender
from extender.errors import ConfigError
from extender.metrics import read
from extender.schedconfig import decode, start_warnings
from extender.state import ClusterSource
from extender.state.store import Store

HEAD = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
OFF = "      disabled: [{name: TaintToleration}, {name: NodeAffinity}, {name: NodeUnschedulable}, " \
      "{name: PodTopologySpread}]\n"


def config(body: str):
    return decode(HEAD + textwrap.dedent(body))


# --- refusals ---------------------------------------------------------------------------

REFUSED = [
    # (file body, the error; kube-scheduler's words where it has them)
    ("profiles:\n- schedulerName: a\n  plugins:\n    multiPoint:\n      disabled:\n      - name: TaintToleration\n"
     "        wieght: 3\n",
     'strict decoding error: unknown field "profiles[0].plugins.multiPoint.disabled[0].wieght"'),
    ("profile:\n- schedulerName: a\n", 'strict decoding error: unknown field "profile"'),
    ("extenders:\n- urlPrefix: http://x\n  nodeCacheable: true\n",
     'strict decoding error: unknown field "extenders[0].nodeCacheable"'),
    ("profiles:\n- schedulerName: a\n  schedulerName: b\n",
     'strict decoding error: yaml: unmarshal errors: line 5: key "schedulerName" already set in map'),
    ("percentageOfNodesToScore: 101\nprofiles:\n- schedulerName: a\n- plugins: {}\n"
     "extenders:\n- urlPrefix: http://x\n  prioritizeVerb: p\n",
     "[profiles[1].schedulerName: Required value, percentageOfNodesToScore: Invalid value: 101: not in valid "
     "range [0-100], extenders[0].weight: Invalid value: 0: must have a positive weight applied to it]"),
    ("profiles:\n- schedulerName: a\n  percentageOfNodesToScore: -1\n",
     "profiles[0].percentageOfNodesToScore: Invalid value: -1: not in valid range [0-100]"),
    ("profiles:\n- schedulerName: a\n- schedulerName: a\n",
     'profiles[1].schedulerName: Duplicate value: "a"'),
    ("extenders:\n- {urlPrefix: a, bindVerb: bind}\n- {urlPrefix: b, bindVerb: bind}\n",
     'extenders: Invalid value: "found 2 extenders implementing bind": only one extender can implement bind'),
    ("extenders:\n- {urlPrefix: a, httpTimeout: 5 seconds}\n", 'extenders[0].httpTimeout: time: invalid duration'),
    ("profiles:\n- schedulerName: a\n  percentageOfNodesToScore: all\n",
     "profiles[0].percentageOfNodesToScore: expected an integer"),
    # half-disabled: TaintToleration's Score would run without its PreScore state
    ("profiles:\n- schedulerName: a\n  plugins:\n    preScore:\n      disabled: [{name: TaintToleration}]\n",
     "profiles[0].plugins: TaintToleration is disabled at preScore but runs at filter, score: half-disabled"),
    ("profiles:\n- schedulerName: a\n  plugins:\n    multiPoint:\n" + OFF + "    score:\n"
     "      enabled: [{name: PodTopologySpread, weight: 4}]\n",
     "profiles[0].plugins: PodTopologySpread is disabled at preFilter, filter, preScore but runs at score"),
    ("profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: PodTopologySpread\n    args: {defaultingType: Sometimes}\n",
     "profiles[0].pluginConfig[0].args.defaultingType: Unsupported value: 'Sometimes'"),
    ("profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: NodeAffinity\n    args: {addedAffinty: {}}\n",
     "profiles[0].pluginConfig[0].args: unknown field(s) addedAffinty"),
]


@pytest.mark.parametrize(("body", "error"), REFUSED)
def test_refused_with_the_field_named(body: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode(HEAD + body)
    assert str(caught.value).startswith(error)


@pytest.mark.parametrize(("head", "error"), [
    ("apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
     'apiVersion/kind: no kind "KubeSchedulerConfiguration" is registered for version '
     '"kubescheduler.config.k8s.io/v1beta3"'),
    ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: Foo\n",
     'apiVersion/kind: no kind "Foo" is registered for version "kubescheduler.config.k8s.io/v1"'),
    ("kind: KubeSchedulerConfiguration\n", "Object 'apiVersion' and 'Kind' are missing or empty"),
])
def test_only_v1_is_read(head: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode(head)
    assert str(caught.value).startswith(error)


def test_a_bad_file_stops_build_and_load_naming_the_file(tmp_path) -> None:
    path = tmp_path / "ks.yaml"
    path.write_text(HEAD + "profiles:\n- schedulerName: a\n  plugin: {}\n")
    cfg = build_config({"scheduler_config": str(path)}, env={})
    with pytest.raises(ConfigError, match=r"--scheduler-config '.*ks.yaml': strict decoding error: unknown field "
                                          r'"profiles\[0\].plugin"'):
        cfg.profiles()


# --- defaulting ---------------------------------------------------------------------------


def test_no_profiles_is_one_default_scheduler_keeping_every_in_tree_plugin() -> None:
    conf = decode(HEAD)
    assert list(conf.profiles) == ["default-scheduler"]
    assert conf.profiles["default-scheduler"].delegated == frozenset()
    assert conf.percentage == 0


def test_delegated_plugins_weights_and_arguments() -> None:
    conf = config("""\
        percentageOfNodesToScore: 100
        profiles:
        - schedulerName: multi
          plugins:
            multiPoint:
              disabled: [{name: "*"}]
        - schedulerName: points
          percentageOfNodesToScore: 50
          plugins:
            preFilter: {disabled: [{name: NodeAffinity}, {name: PodTopologySpread}]}
            filter: {disabled: [{name: NodeAffinity}, {name: PodTopologySpread}, {name: TaintToleration}]}
            preScore: {disabled: [{name: NodeAffinity}, {name: PodTopologySpread}, {name: TaintToleration}]}
            score: {disabled: [{name: NodeAffinity, weight: 7}, {name: PodTopologySpread}, {name: TaintToleration}]}
          pluginConfig:
          - name: NodeAffinity
            args: {addedAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
                   {matchExpressions: [{key: k, operator: Exists}]}]}}}
          - name: DefaultPreemption
            args: {minCandidateNodesPercentage: 100}
        - schedulerName: re-enabled
          plugins:
            multiPoint:
              disabled: [{name: "*"}]
            filter:
              enabled: [{name: NodeUnschedulable}]
        """)
    multi, points = conf.profiles["multi"], conf.profiles["points"]
    assert multi.delegated == {"TaintToleration", "NodeAffinity", "NodeUnschedulable", "PodTopologySpread"}
    assert multi.weights == {"TaintToleration": 3, "NodeAffinity": 2, "PodTopologySpread": 2}  # upstream's
    assert multi.percentage == 100 and points.percentage == 50
    assert points.delegated == {"TaintToleration", "NodeAffinity", "PodTopologySpread"}  # not NodeUnschedulable
    assert points.weights == {"TaintToleration": 3, "NodeAffinity": 7, "PodTopologySpread": 2}
    assert set(points.plugin_args) == {"NodeAffinity"}  # other plugins' arguments are kube-scheduler's
    # enabled again at its only point: kube-scheduler runs it, the extender does not
    assert conf.profiles["re-enabled"].delegated == {"TaintToleration", "NodeAffinity", "PodTopologySpread"}


def test_warnings_name_the_setting_and_the_reason() -> None:
    conf = config("""\
        profiles:
        - schedulerName: a
          plugins: {multiPoint: {disabled: [{name: TaintToleration}]}}
        extenders:
        - {urlPrefix: http://x, filterVerb: filter, prioritizeVerb: p, weight: 5}
        """)
    found = start_warnings(conf, nodes=1000)
    assert len(found) == 3
    assert found[0].startswith("profile 'a': percentageOfNodesToScore is 0 (adaptive), not 100")
    assert found[1].startswith("extenders[0].weight is 5, not 1: with --score-mode in-tree")
    assert found[2].startswith("extenders[0].nodeCacheCapable is false with 1000 nodes")
    assert start_warnings(decode(open("manifests/base/kube-scheduler-config.yaml").read()), nodes=5000) == []


def test_old_flags_warn_and_do_not_mix_with_the_file(tmp_path) -> None:
    with pytest.warns(FutureWarning, match="--scheduler-profile, --weights: deprecated"):
        cfg = build_config({"scheduler_profile": "x", "weights": "TaintToleration=5"}, env={})
    profile = cfg.profiles().profiles["x"]
    assert profile.weights["TaintToleration"] == 5 and len(profile.delegated) == 4
    with pytest.raises(ConfigError, match="drop --scheduler-profile"):
        build_config({"scheduler_profile": "x", "scheduler_config": str(tmp_path / "f")}, env={})


# --- one engine, two profiles ---------------------------------------------------------------

ZONE = "topology.kubernetes.io/zone"
TWO = HEAD + textwrap.dedent("""\
    percentageOfNodesToScore: 100
    profiles:
    - schedulerName: extended-scheduler
      plugins:
        multiPoint:
          disabled: [{name: TaintToleration}, {name: NodeAffinity}, {name: NodeUnschedulable},
                     {name: PodTopologySpread}]
      pluginConfig:
      - name: PodTopologySpread
        args:
          defaultingType: List
          defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone,
                                whenUnsatisfiable: ScheduleAnyway}]
    - schedulerName: extended-batch
      plugins:
        multiPoint:
          disabled: [{name: TaintToleration, weight: 1}, {name: NodeAffinity, weight: 5},
                     {name: NodeUnschedulable}, {name: PodTopologySpread}]
      pluginConfig:
      - name: NodeAffinity
        args:
          addedAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [batch, any]}]}]
            preferredDuringSchedulingIgnoredDuringExecution:
            - {weight: 10, preference: {matchExpressions: [{key: pool, operator: In, values: [batch]}]}}
    - schedulerName: in-tree
    extenders:
    - {urlPrefix: "http://127.0.0.1:8888/scheduler", filterVerb: filter, prioritizeVerb: prioritize,
       weight: 1, nodeCacheCapable: true}
    """)


class StoreSource(ClusterSource):
    def __init__(self, objects: list[dict]) -> None:
        self.store = Store()
        self.store.load(objects)
        self.store.publish()

    def snapshot(self):
        return self.store.snapshot()

    def ready(self) -> bool:
        return True


def _node(name: str, zone: str, pool: str, taints=()) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {ZONE: zone, "pool": pool}},
            "spec": {"taints": list(taints)}}


SOFT = {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}
NODES = [_node("a1", "a", "batch"), _node("a2", "a", "web", [SOFT]), _node("b1", "b", "any"),
         _node("b2", "b", "web"), _node("c1", "c", "batch", [SOFT])]
# running pods of the web Deployment: zone a is full (ScheduleAnyway defaults prefer b, c)
SERVICE = {"kind": "Service", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"selector": {"app": "web"}}}
RUNNING = [{"kind": "Pod", "metadata": {"name": f"r{i}", "namespace": "default", "labels": {"app": "web"},
                                        "uid": f"r{i}"},
            "spec": {"nodeName": n, "containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running"}}
           for i, n in enumerate(["a1", "a2", "a1"])]


def _pod(name: str, scheduler: str | None) -> dict:
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}, "uid": name}, "spec": spec}


def _answers(engine: Extender, pod: dict) -> tuple[bytes, bytes]:
    names = [n["metadata"]["name"] for n in NODES]
    return engine.filter(ExtenderArgs(pod, None, names)), engine.prioritize(ExtenderArgs(pod, None, names))


@pytest.fixture
def files(tmp_path):
    path = tmp_path / "ks.yaml"
    path.write_text(TWO)
    return str(path)


def test_each_pod_is_answered_by_its_own_profile_as_a_single_profile_engine_would(files) -> None:
    objects = NODES + RUNNING + [SERVICE]
    both = Extender(Config(scheduler_config=files), StoreSource(objects))
    conf = decode(TWO).profiles
    for name in ("extended-scheduler", "extended-batch"):
        profile = conf[name]
        alone = Extender(Config(scheduler_profile=name, plugin_args=profile.plugin_args,
                                weights={**Config().weights, **profile.weights}), StoreSource(objects))
        assert _answers(both, _pod("p", name)) == _answers(alone, _pod("p", name))
    # and the two profiles do answer differently: batch's addedAffinity, web's defaults
    web, batch = (_answers(both, _pod("p", n)) for n in ("extended-scheduler", "extended-batch"))
    assert orjson.loads(web[0])["NodeNames"] == ["a1", "a2", "b1", "b2", "c1"]
    assert orjson.loads(batch[0])["NodeNames"] == ["a1", "b1", "c1"]
    assert web[1] != batch[1]


def test_an_unknown_profile_gets_an_error_and_an_in_tree_one_a_neutral_answer(files) -> None:
    from extender.engine.extender import UnknownProfile

    engine = Extender(Config(scheduler_config=files), StoreSource(NODES))
    answer = orjson.loads(engine.filter(ExtenderArgs(_pod("p", None), None, ["a1", "b1"])))
    assert answer["Error"] == ("pod default/p: spec.schedulerName 'default-scheduler' is not a profile of the "
                               "extender's scheduler configuration (profiles: extended-scheduler, extended-batch, "
                               "in-tree); the extender has no plugins, weights or arguments for it")
    assert answer["NodeNames"] is None
    with pytest.raises(UnknownProfile):  # the server answers 400 (ModelError)
        engine.prioritize(ExtenderArgs(_pod("p", "other"), None, ["a1"]))
    # a profile that keeps every in-tree plugin: nothing to add (kube-scheduler's decide)
    tainted = [_node("t", "a", "x", [{"key": "k", "value": "v", "effect": "NoSchedule"}])]
    engine = Extender(Config(scheduler_config=files), StoreSource(tainted))
    filtered, scored = _answers_for(engine, _pod("p", "in-tree"), ["t"])
    assert orjson.loads(filtered)["NodeNames"] == ["t"]
    assert all(h["Score"] == 0 for h in orjson.loads(scored))


def _answers_for(engine: Extender, pod: dict, names: list[str]) -> tuple[bytes, bytes]:
    return engine.filter(ExtenderArgs(pod, None, names)), engine.prioritize(ExtenderArgs(pod, None, names))


def test_metrics_carry_each_pods_profile(files) -> None:
    engine = Extender(Config(scheduler_config=files), StoreSource(NODES))

    def evaluations(profile: str) -> float:
        return read(metrics.PLUGIN_EVALUATION_TOTAL, "scheduler_plugin_evaluation_total", plugin="TaintToleration",
                    extension_point="Filter", profile=profile, status="Success")

    before = {p: evaluations(p) for p in ("extended-scheduler", "extended-batch")}
    _answers(engine, _pod("p", "extended-batch"))
    assert evaluations("extended-batch") == before["extended-batch"] + 5  # no taint it does not tolerate
    assert evaluations("extended-scheduler") == before["extended-scheduler"]
    _answers(engine, _pod("q", "extended-scheduler"))
    assert evaluations("extended-scheduler") == before["extended-scheduler"] + 5
    assert evaluations("extended-batch") == before["extended-batch"] + 5


def test_explain_uses_the_pods_profile(files) -> None:
    from extender.explain import explain_pod

    engine = Extender(Config(scheduler_config=files), StoreSource(NODES + RUNNING + [SERVICE]))
    batch = explain_pod(engine, _pod("p", "extended-batch"), None)
    assert batch["filter"]["NodeNames"] == ["a1", "b1", "c1"]  # its addedAffinity
    web = explain_pod(engine, _pod("p", "extended-scheduler"), None)
    assert web["filter"]["NodeNames"] == ["a1", "a2", "b1", "b2", "c1"]
    assert batch["prioritize"] != web["prioritize"]


def test_serve_stops_at_start_naming_the_field(tmp_path, capsys) -> None:
    from extender.cli import main

    path = tmp_path / "ks.yaml"
    path.write_text(TWO.replace("nodeCacheCapable: true", "nodeCacheCapable: true, ignorabel: true"))
    code = main(["serve", "--scheduler-config", str(path), "--metrics-listen", "off",
                 "--cluster", "examples/cluster.yaml"])
    assert code == 2
    assert 'strict decoding error: unknown field "extenders[0].ignorabel"' in capsys.readouterr().err
