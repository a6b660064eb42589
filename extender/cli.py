"""`extender serve | explain | whatif | validate | version` — thin argparse front-end over config and the engine."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

from extender import __version__, metrics
from extender.config import (
    SETTINGS,
    ConfigError,
    build_config,
    env_name,
    exposed_verbs_warning,
    flag_name,
)
from extender.logs import setup_logging
from extender.schedconfig import start_warnings
from extender.server.multiproc import prepare_multiprocess_metrics
from extender.state import ClusterSnapshot, load_objects
from extender.state.loader import parse_documents

HELP = {
    "listen": "address of the verbs, HOST:PORT (default 127.0.0.1:8888: loopback only, since "
    "`bind` has no authentication; another address only with --verbs-tls and --client-ca-file)",
    "metrics_listen": "separate listener for /healthz, /readyz, /metrics that verb work never "
    "blocks, HOST:PORT or off (default 0.0.0.0:8889; the main listener serves them too)",
    "workers": "gunicorn worker processes (default 1)",
    "threads": "threads per worker for requests not answered on its event loop (default 4)",
    "worker_class": "inline (default: complete requests up to 1 MiB answered on the event "
    "loop; one scheduler) or pool (every verb answered on a --threads pool thread, "
    "interleaved; several schedulers or expensive pods; gthread is a deprecated name for "
    "it). Both buffer whole requests before answering",
    "cluster": "file mode: cluster dump, kind: List / multi-document YAML / JSON (default: the "
    "bundled example, except in a container or a cluster, where no state is served)",
    "kubeconfig": "live mode: watch the API server with this kubeconfig; with no FILE, "
    "$KUBECONFIG or ~/.kube/config. A FILE that changes (renewed credentials) stops serve "
    "gracefully in a container, which restarts with it",
    "in_cluster": "live mode: watch the API server with the pod's service account",
    "max_staleness": "live mode: seconds the cluster state may go unconfirmed by the API server "
    "(an event, a bookmark, or a probe of a silent watch); past it /readyz fails and the verbs "
    "answer an Error, as they do until every kind has listed once; a silent stream is probed after a "
    "third of it (default 20, at least 2)",
    "bind_watch_timeout": "live mode: seconds the watch may take to show a pod the bind verb bound; "
    "past it every watched kind is probed at once and verdicts that read a kind not yet "
    "confirmed current answer an Error until it is; 0 disables (default 1)",
    "max_unready": "live mode: seconds the cluster state may stay unready (not synced, stale) "
    "before /healthz fails too, so that a process that cannot recover is restarted; 0 "
    "disables (default 300)",
    "annotation_prefix": "prefix of the tolerations / node-affinity annotations (default scheduling-extender.io)",
    "feature_gates": "comma-separated Name=true|false, upstream gate names (all on by default)",
    "weights": "deprecated (use --scheduler-config): score plugin weights, e.g. "
    "TaintToleration=3,NodeAffinity=2,PodTopologySpread=2",
    "score_mode": "in-tree (default: sum(weight*score)/10, use extender weight 1) or scaled (0..10, weight 7)",
    "max_body_bytes": "largest request body accepted, bytes (default 32 MiB: Nodes mode at 5,000 "
    "nodes; NodeNames requests stay under 1 MiB at 15,000)",
    "max_inflight_bytes": "request bytes the verbs' listener holds at once, a body counted as at least "
    "a sixth of what it becomes once parsed; past it requests are answered 503 with Retry-After "
    "(default 48 MiB; the last 16 MiB only for requests under 1 MiB; --metrics-listen and the webhook "
    "have small budgets of their own)",
    "log_level": "debug, info, warning or error (default info)",
    "cel_program_cache_size": "compiled CEL programs kept in the shared LRU (default 1024)",
    "cel_result_cache_size": "memoized CEL (expression, taint) results (default 100000)",
    "memory_limit_bytes": "ceiling for all caches together, bytes, split between them "
    "(default 256 MiB; keep it well below the container's memory limit)",
    "reload_interval": "seconds between cluster-file change checks; 0 disables (default 2)",
    "request_deadline": "seconds a filter/prioritize request may spend (CEL evaluation); past it "
    "the request answers an Error, never a verdict; 0 disables (default 4, below "
    "kube-scheduler's 5 s httpTimeout). It also bounds how long bind waits for its API call, "
    "counted from the request's arrival (4 s when 0, and a second at most); a call still out "
    "then is answered as in progress and goes on",
    "slow_cel_expressions": "warn (default) or deny: what the admission webhook and `extender "
    "validate` do with a CEL toleration whose estimated cost a first /filter on a 5,000-node "
    "cluster (100 distinct taints) could not evaluate within --request-deadline",
    "webhook_listen": "HOST:PORT of the HTTPS admission webhook (POST /validate), e.g. 0.0.0.0:9443 "
    "(default: off)",
    "tls_cert_file": "webhook serving certificate (PEM, chain first); reloaded when the file changes",
    "tls_private_key_file": "webhook serving private key (PEM); reloaded when the file changes",
    "client_ca_file": "CA bundle (PEM): the webhook (and the verbs with --verbs-tls) then require "
    "client certificates signed by it (never a CA certificate: basicConstraints CA:TRUE is refused)",
    "client_cert_allowed_names": "comma-separated names: with --client-ca-file, only client "
    "certificates whose subject common name, or a DNS or URI subject alternative name, equals "
    "one of them are served (DNS names without regard to case); default: any subject",
    "verbs_tls": "true: serve --listen (verbs, health, metrics) over HTTPS with --tls-cert-file/"
    "--tls-private-key-file (default false)",
    "scheduler_profile": "deprecated (use --scheduler-config): the one kube-scheduler profile "
    "(schedulerName) calling this extender, the `profile` label of the scheduler_* metrics "
    "(default default-scheduler)",
    "scheduler_config": "kube-scheduler's own KubeSchedulerConfiguration file (v1; the same file "
    "kube-scheduler reads): each pod is answered by its spec.schedulerName's profile, for the "
    "plugins that profile disables in-tree, with its pluginConfig and weights; unknown fields and "
    "contradictions stop start-up with the field named (replaces --scheduler-profile, --weights "
    "and pluginConfig); `validate` and the webhook also warn where a pod's profile leaves an "
    "annotation unread",
    "inflight_wait": "seconds a filter/prioritize/preempt waits at most for a pod answered "
    "earlier and not yet bound that one of its DoNotSchedule spread constraints selects (same "
    "namespace; the next pod then counts it); still not bound then, filter answers an Error "
    "(kube-scheduler retries the pod) rather than a verdict without it; 0 disables; off in "
    "file mode (default 1)",
    "explain_endpoint": "true: serve GET /explain/NAMESPACE/POD and POST /explain on --metrics-listen "
    "(live explanations for `kubectl extender why`) to users the API server vouches for, about pods "
    "they may read (TokenReview, SubjectAccessReview; file mode: loopback clients only) (default false)",
    "explain_rate": "explanations and drift reports per second each process answers one user at most "
    "(token bucket per user; more get 429 with Retry-After) (default 1)",
    "explain_burst": "explanations and drift reports a user may ask at once before --explain-rate "
    "applies (default 5)",
    "record_events": "true: record a Warning Event on a pod the filter leaves with no feasible node, "
    "with the extender's reasons; deduplicated and rate-limited like client-go's (live mode; "
    "default false)",
    "drift_report": "true: keep the drift report, the running pods whose node no longer satisfies "
    "their taints, node affinity or volumes' node affinity (kept event by event; memory: see "
    "docs/operate/drift.md), exported as extender_pods_violating (default false)",
    "drift_endpoint": "true: serve GET /drift on --metrics-listen (the drift report, for `kubectl "
    "extender drift`), admitted like /explain; implies --drift-report (default false)",
    "drift_events": "true: record a Warning Event on a running pod when its node stops satisfying "
    "its required constraints; deduplicated and rate-limited like client-go's (live mode); "
    "implies --drift-report (default false)",
    "drift_topology_spread": "true: add hard topology spread drift to the report (running pods "
    "/filter would not place where they are by their DoNotSchedule constraints), recomputed "
    "cluster-wide while the state changes, at most every 5 s and a tenth of the time; implies --drift-report (default false)",
    "whatif_endpoint": "true: serve POST /whatif on --metrics-listen (the engine on the live state plus "
    "a list of taint, label, cordon, node and volume changes, before they are made, for `kubectl extender "
    "what-if`), admitted like /drift to users who may list pods and nodes cluster-wide; implies "
    "--drift-report (default false)",
    "slim_answers": "true (default): a filter answer lists failing nodes only when no node fits, a "
    "prioritize answer only the hosts off the most common score (the lowest in --score-mode scaled), "
    "shifted by it (kube-scheduler "
    "reads neither otherwise; docs/reference/semantics.md, Slim answers); false: every failing "
    "node and every host, for a scheduler with another filtering extender after this one",
}

SERVE_ONLY = ("listen", "metrics_listen", "workers", "threads", "worker_class", "max_body_bytes",
              "max_inflight_bytes", "reload_interval",
              "webhook_listen", "tls_cert_file", "tls_private_key_file", "client_ca_file",
              "client_cert_allowed_names",
              "verbs_tls", "scheduler_profile", "kubeconfig", "in_cluster", "max_staleness",
              "bind_watch_timeout", "max_unready",
              "request_deadline", "slow_cel_expressions", "inflight_wait",
              "explain_endpoint", "explain_rate", "explain_burst", "record_events", "drift_report",
              "drift_endpoint", "drift_events", "drift_topology_spread", "whatif_endpoint", "slim_answers")
# flags that also work bare: `--in-cluster`, `--kubeconfig` (the client's default lookup)
BARE = {"in_cluster": "true", "kubeconfig": "default"}


def _add_settings(parser: argparse.ArgumentParser, serve: bool) -> None:
    parser.add_argument("--config", help="YAML config file (env EXTENDER_CONFIG)")
    for attr in SETTINGS:
        if attr in SERVE_ONLY and not serve:
            continue
        extra = {"nargs": "?", "const": BARE[attr]} if attr in BARE else {}
        parser.add_argument(flag_name(attr), dest=attr, default=None,
                            help=f"{HELP[attr]} [env {env_name(attr)}]", **extra)


def plugin_module(name: str) -> ModuleType:
    """A module of the kubectl plugin (`kubectl_extender`, the `kubectl-extender`
    distribution this one depends on): the what-if's change flags and the text views.
    Only the commands that use them import it, so that `extender serve` runs without it."""
    try:
        return importlib.import_module(f"kubectl_extender.{name}")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("kubectl_extender"):
            raise
        raise ConfigError("this command needs the kubectl plugin's distribution, kubectl-extender, which is "
                          f"not installed: install kubectl-extender {__version__} (the release's wheel, or "
                          "`pip install ./plugin` in a checkout)") from None


def build_parser(change_flags: bool = True) -> argparse.ArgumentParser:
    """The command line; `change_flags`: the what-if's change flags in `whatif --help`
    (the plugin's; `main` asks for them only for `whatif`)."""
    parser = argparse.ArgumentParser(
        prog="extender",
        description="kube-scheduler extender: Gt/Lt, Semver and CEL tolerations, semver node "
        "affinity, taint-aware topology spread. Flags beat EXTENDER_* env vars beat --config.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve /filter, /prioritize, /bind, /preempt, /healthz, /readyz, /metrics "
                           "(and /explain, /drift on --metrics-listen with --explain-endpoint, --drift-endpoint)")
    _add_settings(serve, serve=True)
    exp = sub.add_parser("explain", help="explain offline why pods fit or do not fit each node")
    _add_settings(exp, serve=False)
    exp.add_argument("--pod", action="append", required=True, help="pod YAML/JSON file (repeatable)")
    exp.add_argument("--candidates", help="comma-separated node names (default: every node)")
    exp.add_argument("--output", choices=("json", "table"), default="json")
    whatif = plugin_module("whatif") if change_flags else None
    wif = sub.add_parser("whatif", help="what a taint, label, cordon, node removal or volume annotation would "
                         "do, offline on a cluster file, before it is made",
                         epilog=whatif.USAGE if whatif else None, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_settings(wif, serve=False)
    wif.add_argument("--request", help="the what-if request, JSON or YAML ({changes: [...], pods: [...]}; "
                     "docs/operate/what-if.md); or give the changes as flags")
    wif.add_argument("-f", "--filename", action="append", help="pods or workloads to place after the change "
                     "(YAML or JSON, repeatable)")
    wif.add_argument("--output", "-o", choices=("json", "table"), default="json")
    if whatif:
        whatif.add_change_flags(wif)
    val = sub.add_parser("validate", help="check the annotation channel of manifests offline, as the "
                         "admission webhook does (exit 1 on errors)")
    val.add_argument("--config", help="YAML config file (env EXTENDER_CONFIG)")
    for attr in ("annotation_prefix", "feature_gates", "request_deadline", "slow_cel_expressions",
                 "scheduler_config"):
        val.add_argument(flag_name(attr), dest=attr, default=None, help=f"{HELP[attr]} [env {env_name(attr)}]")
    val.add_argument("paths", nargs="+", metavar="FILE|DIR|-",
                     help="manifests: multi-document YAML, JSON, Lists; directories are searched; - is stdin")
    val.add_argument("-R", "--recursive", action="store_true", help="also read the subdirectories of DIRs")
    val.add_argument("--output", choices=("text", "json"), default="text")
    sub.add_parser("version", help="print the version")
    return parser


def _settings(ns: argparse.Namespace) -> dict:
    return {attr: getattr(ns, attr, None) for attr in SETTINGS}


def _load_pods(paths: list[str]) -> list[dict]:
    pods: list[dict] = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"--pod: cannot read {path!r}: {exc.strerror}") from None
        for obj in parse_documents(data, path):
            if obj.get("kind", "Pod") == "Pod":
                pods.append(obj)
    if not pods:
        raise ConfigError("--pod: no Pod objects found")
    return pods


# Each command imports its own modules when it runs (the engine and CEL, gunicorn, the
# webhook): at the top of this module they would more than double the time `extender
# --help` and `extender version` take, for modules neither uses (perf/PERFORMANCE.md).


def cmd_explain(ns: argparse.Namespace) -> int:
    import orjson

    from extender.explain import explain, static_extender

    render_table = plugin_module("render").render_table if ns.output == "table" else None
    config = build_config(_settings(ns), config_file=ns.config)
    metrics.install()
    setup_logging("warning" if config.log_level == "info" else config.log_level)
    snapshot = ClusterSnapshot.from_objects(load_objects(config.cluster_file))
    candidates = [c.strip() for c in ns.candidates.split(",") if c.strip()] if ns.candidates else None
    report = explain(static_extender(config, snapshot), _load_pods(ns.pod), candidates)
    if render_table:
        sys.stdout.write(render_table(report))
    else:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_whatif(ns: argparse.Namespace) -> int:
    import orjson

    from extender.whatif import WhatIfError, offline

    config = build_config(_settings(ns), config_file=ns.config)
    metrics.install()
    setup_logging("warning" if config.log_level == "info" else config.log_level)
    body: dict = {}
    if ns.request:
        try:
            documents = parse_documents(Path(ns.request).read_bytes(), ns.request)
        except OSError as exc:
            raise ConfigError(f"--request: cannot read {ns.request!r}: {exc.strerror}") from None
        if len(documents) != 1:
            raise ConfigError(f"--request: expected one request object, found {len(documents)}")
        body = documents[0]
    if ns.changes:
        body = {**body, "changes": [*(body.get("changes") or []), *ns.changes]}
    if ns.filename:
        body = {**body, "pods": [*(body.get("pods") or []), *_load_objects(ns.filename)]}
    try:
        answer = offline(config, load_objects(config.cluster_file), body)
    except WhatIfError as exc:
        raise ConfigError(str(exc)) from None
    if ns.output == "table":
        sys.stdout.write(plugin_module("whatif").render_whatif(answer))
    else:
        sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _load_objects(paths: list[str]) -> list[dict]:
    out: list[dict] = []
    for path in paths:
        try:
            out += parse_documents(Path(path).read_bytes(), path)
        except OSError as exc:
            raise ConfigError(f"-f: cannot read {path!r}: {exc.strerror}") from None
    return out


def cmd_validate(ns: argparse.Namespace) -> int:
    from extender.validation.manifests import render_json, render_text, validate_paths
    from extender.validation.rules import admission, configure_slow_expressions

    config = build_config(_settings(ns), config_file=ns.config)
    metrics.install()
    configure_slow_expressions(config.request_deadline, config.slow_cel_expressions == "deny")
    profiles = config.profiles() if config.scheduler_config else None  # a bad file: exit 2, the field named
    with admission():
        report = validate_paths(ns.paths, config.annotation_prefix, config.feature_gates, ns.recursive, profiles)
    sys.stdout.write(render_json(report) if ns.output == "json" else render_text(report))
    return 1 if report.error_count else 0


def cmd_serve(ns: argparse.Namespace) -> int:
    from extender.server.launcher import ExtenderServer, check_metrics_listen
    from extender.server.opening import open_source
    from extender.server.tls import build_context
    from extender.server.webhook import check_webhook

    with warnings.catch_warnings(record=True) as deprecated:  # logged once logging is set up
        warnings.simplefilter("always", FutureWarning)
        config = build_config(_settings(ns), config_file=ns.config)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") or config.workers > 1:
        # several processes answer (or the deployment says they may): /metrics must add
        # them up. In a pod the directory is a fresh emptyDir that does not exist yet,
        # so it is created here. One worker keeps its metrics in memory (each multiprocess write
        # costs a pid check and an mmap write).
        prepare_multiprocess_metrics()
    metrics.install()  # after the multiprocess set-up, before any metric is written
    check_metrics_listen(config.metrics_listen)
    setup_logging(config.log_level)
    for note in deprecated:
        logging.getLogger("extender").warning(str(note.message))
    if warning := exposed_verbs_warning(config):
        logging.getLogger("extender").warning(warning)
    profiles = config.profiles()  # a bad --scheduler-config stops start-up, the field named
    watch = _kubeconfig_watch(config)  # its content before the API client reads it
    source = open_source(config, serving=True)  # a bad cluster file fails fast
    if config.scheduler_config:
        nodes = source.snapshot().counts()["nodes"] if not config.live else 0
        for warning in start_warnings(profiles, nodes, config.score_mode):
            logging.getLogger("extender").warning(warning)
    try:
        if config.verbs_tls:  # fail fast on unreadable files, before gunicorn starts
            build_context(config.tls_cert_file, config.tls_private_key_file, config.client_ca_file)
        if config.webhook_listen:  # started in each worker (launcher); fail fast here
            check_webhook(config)
    except OSError as exc:  # ssl.SSLError too: a missing, unreadable or mismatched file, or a busy port
        raise ConfigError(f"TLS / webhook listener: {exc}") from None
    if watch is not None:
        watch.start()
    ExtenderServer(config, source).run()
    return 0


def _kubeconfig_watch(config):
    """With `--kubeconfig FILE`: a renewed FILE (kubeadm renews the scheduler.conf the
    replace-default static pod reads) stops the server in a container, which then restarts
    with it, and is logged elsewhere (`extender.state.kubeconfig_watch`)."""
    if config.kubeconfig in ("", "default"):
        return None
    import signal

    from extender.server.opening import in_container
    from extender.state.kubeconfig_watch import KubeconfigWatch

    log = logging.getLogger("extender.state")
    restart = in_container()

    def changed(path: Path) -> None:
        if restart:
            log.warning("the kubeconfig changed (renewed credentials): stopping gracefully, so that the "
                        "container restarts with it", extra={"kubeconfig": str(path)})
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            log.warning("the kubeconfig changed: this process keeps the credentials it started with "
                        "until it is restarted", extra={"kubeconfig": str(path)})

    return KubeconfigWatch(config.kubeconfig, changed)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    whatif = argv[:1] == ["whatif"]
    changes: list[dict] = []
    try:
        parser = build_parser(change_flags=whatif)
        if whatif:  # the change flags leave the command line before argparse reads it
            changes, rest = plugin_module("whatif").split_changes(argv[1:])
            argv = ["whatif", *rest]
    except (ConfigError, ValueError) as exc:  # no plugin; the plugin's FlagError
        print(f"extender: error: {exc}", file=sys.stderr)
        return 2
    ns = parser.parse_args(argv)
    ns.changes = changes
    if ns.command == "version":
        print(__version__)
        return 0
    try:
        commands = {"serve": cmd_serve, "explain": cmd_explain, "validate": cmd_validate, "whatif": cmd_whatif}
        return commands[ns.command](ns)
    except ConfigError as exc:
        print(f"extender: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # cluster file and model errors carry precise messages
        print(f"extender: error: {exc}", file=sys.stderr)
        return 2
