"""Configuration layering and validation: defaults < file < env < flags."""

from __future__ import annotations

import warnings

import pytest

from extender.config import Config, ConfigError, build_config
from extender.features import FeatureGates


def write(tmp_path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_defaults():
    config = build_config({}, env={})
    assert config.listen == "127.0.0.1:8888", "loopback: the bind verb has no authentication"
    assert config.workers == 1
    assert config.weights == {"TaintToleration": 3, "NodeAffinity": 2, "PodTopologySpread": 2}
    assert config.feature_gates == FeatureGates()
    assert config.max_body_bytes == 32 << 20
    assert config.max_inflight_bytes == 48 << 20
    assert config.cluster_file.endswith("cluster.yaml")
    assert config.worker_class == "inline"
    assert config.slim_answers is True  # what kube-scheduler reads, nothing more (semantics.md)


def test_layers_flag_beats_env_beats_file(tmp_path):
    path = write(tmp_path, "listen: 127.0.0.1:1000\nworkers: 3\nthreads: 7\nlogLevel: DEBUG\n")
    env = {"EXTENDER_LISTEN": "127.0.0.1:2000", "EXTENDER_WORKERS": "5"}
    config = build_config({"listen": "127.0.0.1:3000"}, env=env, config_file=path)
    assert config.listen == "127.0.0.1:3000"
    assert config.workers == 5
    assert config.threads == 7
    assert config.log_level == "debug"
    assert build_config({}, env={"EXTENDER_WORKER_CLASS": "pool"}).worker_class == "pool"
    assert build_config({}, env={"EXTENDER_SLIM_ANSWERS": "false"}).slim_answers is False
    assert build_config({}, env={}, config_file=write(tmp_path, "slimAnswers: false\n")).slim_answers is False


@pytest.mark.parametrize("layer, key", [("flag", "--worker-class"),
                                        ("env", "EXTENDER_WORKER_CLASS"), ("file", "workerClass")])
def test_gthread_is_a_deprecated_name_of_the_pool_worker_class(tmp_path, layer, key):
    """`gthread` never was gunicorn's gthread worker: it names `pool`, and says so."""
    flags = {"worker_class": "gthread"} if layer == "flag" else {}
    env = {"EXTENDER_WORKER_CLASS": "gthread"} if layer == "env" else {}
    path = write(tmp_path, "workerClass: gthread\n") if layer == "file" else None
    with pytest.warns(FutureWarning) as caught:
        config = build_config(flags, env=env, config_file=path)
    assert config.worker_class == "pool"
    (note,) = caught
    assert str(note.message) == (
        f"{key}: 'gthread' is deprecated and will be removed: it names the 'pool' worker "
        "class (every verb on a --threads pool thread); use 'pool'")


def test_the_worker_class_names_warn_only_for_the_deprecated_one():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build_config({"worker_class": "pool"}, env={}).worker_class == "pool"
        assert build_config({"worker_class": "inline"}, env={}).worker_class == "inline"


def test_config_file_from_env(tmp_path):
    path = write(tmp_path, "scoreMode: in-tree\n")
    assert build_config({}, env={"EXTENDER_CONFIG": path}).score_mode == "in-tree"


def test_feature_gates_from_flag_file_and_env(tmp_path):
    path = write(tmp_path, "featureGates:\n  TaintTolerationCEL: false\n")
    config = build_config(
        {"feature_gates": "TaintTolerationComparisonOperators=false"}, env={}, config_file=path
    )
    assert config.feature_gates.comparison_operators is False
    # a flag replaces the whole gate set given at a lower layer
    assert config.feature_gates.cel is True
    assert build_config({}, env={}, config_file=path).feature_gates.cel is False


def test_weights_and_plugin_config(tmp_path):
    path = write(
        tmp_path,
        "weights: {TaintToleration: 5}\n"
        "pluginConfig:\n- name: NodeAffinity\n  args: {}\n",
    )
    config = build_config({}, env={}, config_file=path)
    assert config.weights["TaintToleration"] == 5
    assert config.weights["NodeAffinity"] == 2
    assert config.plugin_args == {"NodeAffinity": {}}
    assert build_config({"weights": "NodeAffinity=9"}, env={}).weights["NodeAffinity"] == 9


def test_volume_node_affinity_is_a_known_plugin_without_arguments(tmp_path):
    path = write(tmp_path, "pluginConfig:\n- name: VolumeNodeAffinity\n  args: {}\n")
    assert build_config({}, env={}, config_file=path).plugin_args == {"VolumeNodeAffinity": {}}
    path = write(tmp_path, "pluginConfig:\n- name: VolumeNodeAffinity\n  args: {strict: true}\n")
    with pytest.raises(ConfigError, match=r"pluginConfig\[0\]\.args: this plugin takes no arguments, got strict"):
        build_config({}, env={}, config_file=path)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("listn: 1\n", "unknown key 'listn'"),
        ("workers: 0\n", "workers: must be >= 1"),
        ("workers: many\n", "workers: expected an integer"),
        ("listen: nowhere\n", "listen: expected HOST:PORT"),
        ("scoreMode: fancy\n", "scoreMode: must be one of scaled, in-tree"),
        ("workerClass: sync\n", "workerClass: must be one of inline, pool"),
        ("slimAnswers: sometimes\n", "slimAnswers: invalid boolean"),
        ("rememberAnswers: false\n", "rememberAnswers"),  # removed (CHANGELOG): an unknown key
        ("assumeTTL: 30\n", "assumeTTL"),
        ("featureGates: {Bogus: true}\n", "unknown feature gate 'Bogus'"),
        ("featureGates: {TaintTolerationCEL: maybe}\n", "invalid boolean"),
        ("weights: {Nope: 1}\n", "unknown score plugin 'Nope'"),
        ("annotationPrefix: 'bad prefix!'\n", "annotationPrefix"),
        ("pluginConfig: [{name: Foo}]\n", "pluginConfig[0].name: unknown plugin 'Foo'"),
        ("- a\n- b\n", "must be a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_values_name_the_key(tmp_path, text, fragment):
    with pytest.raises(ConfigError) as info:
        build_config({}, env={}, config_file=write(tmp_path, text))
    assert fragment in str(info.value)


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="EXTENDER_THREADS"):
        build_config({}, env={"EXTENDER_THREADS": "-1"})


def test_missing_config_file():
    with pytest.raises(ConfigError, match="cannot read"):
        build_config({}, env={}, config_file="/nonexistent/config.yaml")


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        Config().workers = 2  # type: ignore[misc]


def test_state_flags(tmp_path):
    from extender.cli import build_parser

    parser = build_parser()
    ns = parser.parse_args(["serve", "--in-cluster", "--max-staleness", "30"])
    config = build_config({k: v for k, v in vars(ns).items() if k not in ("command", "config")}, env={})
    assert config.in_cluster and config.live and config.max_staleness == 30
    ns = parser.parse_args(["serve", "--kubeconfig"])
    assert ns.kubeconfig == "default"  # the client's own lookup: $KUBECONFIG, ~/.kube/config
    assert build_config({}, env={"EXTENDER_KUBECONFIG": "/k"}).kubeconfig == "/k"
    assert build_config({}, env={}, config_file=write(tmp_path, "inCluster: true\n")).in_cluster
    with pytest.raises(ConfigError, match="exclude each other"):
        build_config({"cluster": "c.yaml", "kubeconfig": "/k"}, env={})
    with pytest.raises(ConfigError, match="exclude each other"):
        build_config({"in_cluster": "true", "kubeconfig": "/k"}, env={})
    with pytest.raises(ConfigError, match="--max-staleness"):
        build_config({"max_staleness": "0"}, env={})
    assert Config().cluster == "" and not Config().live


def test_no_bundled_example_in_a_container(monkeypatch):
    from extender.server import opening
    from extender.state import FileSource, UnconfiguredSource

    monkeypatch.setattr(opening, "in_container", lambda: True)
    source = opening.open_source(Config())
    assert isinstance(source, UnconfiguredSource) and not source.ready()
    assert "no cluster state configured" in source.readiness()[1]
    monkeypatch.setattr(opening, "in_container", lambda: False)
    assert isinstance(opening.open_source(Config(reload_interval=0)), FileSource)
    monkeypatch.setattr(opening, "in_container", lambda: True)
    explicit = opening.open_source(Config(cluster=Config().cluster_file, reload_interval=0))
    assert isinstance(explicit, FileSource)


def test_bad_api_client_settings_are_config_errors(tmp_path, monkeypatch):
    from extender.server import opening

    with pytest.raises(ConfigError, match="--kubeconfig: cannot configure the API client"):
        opening.open_source(Config(kubeconfig=str(tmp_path / "missing")))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="--in-cluster: cannot configure the API client"):
        opening.open_source(Config(in_cluster=True))


def test_verbs_beyond_loopback_without_client_certificates_are_warned_about():
    """Issue 25 item 9: `bind` has no authentication of its own."""
    from extender.config import exposed_verbs_warning

    assert exposed_verbs_warning(build_config({}, env={})) is None
    assert exposed_verbs_warning(build_config({"listen": "[::1]:8888"}, env={})) is None
    warning = exposed_verbs_warning(build_config({"listen": "0.0.0.0:8888"}, env={}))
    assert warning and "bind" in warning and "--client-ca-file" in warning
    tls_only = build_config({"listen": "0.0.0.0:8888", "verbs_tls": "true", "tls_cert_file": "c",
                             "tls_private_key_file": "k"}, env={})
    assert exposed_verbs_warning(tls_only), "TLS without client certificates still lets anyone bind"
    mtls = build_config({"listen": "0.0.0.0:8888", "verbs_tls": "true", "tls_cert_file": "c",
                         "tls_private_key_file": "k", "client_ca_file": "ca"}, env={})
    assert exposed_verbs_warning(mtls) is None


def test_the_removed_no_op_flags_are_refused(tmp_path):
    """`--remember-answers` and `--assume-ttl` had no effect since issues 26 and 22 and
    are gone (CHANGELOG): an old flag or file key is an error that names it, not
    silently ignored."""
    from extender.cli import build_parser

    for flag in ("--remember-answers", "--assume-ttl"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", flag, "1"])
    serve = next(a for a in build_parser()._subparsers._group_actions[0].choices.values() if a.prog.endswith("serve"))
    assert "--assume-ttl" not in serve.format_help() and "--remember-answers" not in serve.format_help()
