"""Every Prometheus metric the extender exports, defined in one place.

Names, types, labels and buckets follow kube-scheduler (`pkg/scheduler/metrics`), so
the PromQL in the KEPs works unchanged. One deliberate superset: the
`scheduler_plugin_evaluation_total` counter carries the `status` label KEP-5471 and
KEP-5721 propose (upstream has none).

Importing this module creates no metric: `install()` does, once per process, at
start-up (`extender serve` after its multiprocess set-up, the app factory, `extender
explain | validate`; the tests' conftest). The collectors are then this module's
upper-case names (`metrics.BINDINGS_TOTAL`), read when used, never bound at import.

With several gunicorn workers, `PROMETHEUS_MULTIPROC_DIR` is set before `install()` (see
`extender.server.launcher`) and prometheus-client writes every sample to a per-process
file; `/metrics` then aggregates them with `MultiProcessCollector`. Gauges that mean one
thing for the whole server use a `live*` mode that yields one series (no `pid` label):
the same state in every worker (`livemostrecent`) or a per-worker amount added up
(`livesum`).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from prometheus_client import Counter, Gauge, Histogram, values

# The `profile` label of the scheduler_* metrics is the pod's own kube-scheduler profile
# (schedulerName): each profile's Framework carries it (`extender.framework.runner`).
# schedule_one.go `pluginMetricsSamplePercent`: plugin execution durations are recorded
# in this share of scheduling cycles; the others skip ~20 histogram writes per pod.
PLUGIN_METRICS_SAMPLE_PERCENT = 10
# Verbs whose answers can carry `Error` (kube-scheduler fails the pod's cycle on it).
ERROR_ANSWER_VERBS = ("filter", "prioritize", "preempt", "bind")


def exponential_buckets(start: float, factor: float, count: int) -> list[float]:
    """Go's `metrics.ExponentialBuckets`: start * factor**i for i in 0..count-1."""
    return [start * factor**i for i in range(count)]


def sample_plugin_metrics() -> bool:
    """Whether this request's cycle records plugin execution durations."""
    return random.random() * 100 < PLUGIN_METRICS_SAMPLE_PERCENT


_QUIET: ContextVar[bool] = ContextVar("extender_metrics_quiet", default=False)


@contextmanager
def quiet() -> Iterator[None]:
    """Run framework work that no scheduler asked for (explain: the endpoint, the CLI,
    events) without counting it: the scheduler_* metrics and the unknown-node counter
    then say what the verbs answered kube-scheduler, as upstream's do."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def counting() -> bool:
    """False inside `quiet()`."""
    return not _QUIET.get()


def count_error_answer(verb: str) -> None:
    """Count one HTTP 200 answer whose `Error` is set."""
    child(ERROR_ANSWERS_TOTAL, verb).inc()


def read(metric, sample: str, **labels: str) -> float:
    """The current value of one of `metric`'s samples in this process (0 if absent),
    e.g. `read(CEL_CACHE_REQUESTS_TOTAL, "extender_cel_program_cache_requests_total",
    result="hit")`: what a component reports about itself is read back from here, not
    counted twice."""
    for family in metric.collect():
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return s.value
    return 0.0


_CHILDREN: dict[tuple, object] = {}


def child(metric, *labels: str):
    """`metric.labels(*labels)`, remembered: prometheus-client validates and locks on
    every `labels` call, and the hot path makes a few dozen such calls a request.
    Label sets are few (plugins x extension points x codes); nothing here removes them."""
    key = (metric, labels)
    hit = _CHILDREN.get(key)
    if hit is None:
        hit = _CHILDREN[key] = metric.labels(*labels)
    return hit


_install_lock = threading.Lock()
_installed = False


def installed() -> bool:
    """Whether `install()` has run in this process."""
    return _installed


def install() -> None:
    """Create every collector (later calls do nothing). `extender serve` calls it after
    `extender.server.multiproc` has settled `PROMETHEUS_MULTIPROC_DIR`: prometheus-client
    chooses between in-memory and per-process-file values when it is imported, which may
    have been earlier, so the choice is made again here, before the first collector."""
    global _installed
    with _install_lock:
        if _installed:
            return
        values.ValueClass = values.get_value_class()
        for define in (_scheduler, _http, _cluster_state, _watch, _cel, _memory, _engine, _drift,
                       _webhook, _serving):
            define()
        _installed = True


def __getattr__(name: str):
    """A collector asked for before `install()`: say so, rather than a bare AttributeError."""
    if name.isupper():
        raise AttributeError(f"extender.metrics.{name}: the collectors do not exist before "
                             "extender.metrics.install() (called once at start-up)")
    raise AttributeError(f"module 'extender.metrics' has no attribute {name!r}")


# --- kube-scheduler metrics -------------------------------------------------------
def _scheduler() -> None:
    global PLUGIN_EVALUATION_TOTAL, PLUGIN_EXECUTION_DURATION, EXTENSION_POINT_DURATION

    PLUGIN_EVALUATION_TOTAL = Counter(
        "scheduler_plugin_evaluation_total",
        "Number of attempts to schedule pods by each plugin and the extension point "
        "(available only in PreFilter, Filter, PreScore, and Score).",
        ["plugin", "extension_point", "profile", "status"],
    )

    PLUGIN_EXECUTION_DURATION = Histogram(
        "scheduler_plugin_execution_duration_seconds",
        "Duration for running a plugin at a specific extension point.",
        ["plugin", "extension_point", "status"],
        buckets=exponential_buckets(0.00001, 1.5, 20),
    )

    EXTENSION_POINT_DURATION = Histogram(
        "scheduler_framework_extension_point_duration_seconds",
        "Latency for running all plugins of a specific extension point.",
        ["extension_point", "status", "profile"],
        buckets=exponential_buckets(0.0001, 2, 12),
    )


# --- extender HTTP metrics ----------------------------------------------------------
def _http() -> None:
    global HTTP_REQUESTS_TOTAL, HTTP_BODY_BYTES_TOTAL, HTTP_REQUEST_DURATION, ERROR_ANSWERS_TOTAL

    HTTP_REQUESTS_TOTAL = Counter(
        "extender_http_requests_total",
        "HTTP requests served by the extender, by verb and status code.",
        ["verb", "code"],
    )

    HTTP_BODY_BYTES_TOTAL = Counter(
        "extender_http_body_bytes_total",
        "Bytes of the verbs' request and answer bodies, by verb and direction (request: "
        "what kube-scheduler sent, answer: what the extender wrote back).",
        ["verb", "direction"],
    )

    HTTP_REQUEST_DURATION = Histogram(
        "extender_http_request_duration_seconds",
        "Latency of extender HTTP requests, decode to encode, by verb.",
        ["verb"],
        buckets=exponential_buckets(0.0001, 2, 16),
    )

    ERROR_ANSWERS_TOTAL = Counter(
        "extender_error_answers_total",
        "Answers with HTTP 200 whose Error field is set (kube-scheduler treats them as "
        "failures, like 4xx/5xx replies, which extender_http_requests_total counts by code).",
        ["verb"],
    )
    for _verb in ERROR_ANSWER_VERBS:
        ERROR_ANSWERS_TOTAL.labels(_verb)  # series exist at 0 before the first error


def _cluster_state() -> None:
    global CLUSTER_STATE_OBJECTS, CLUSTER_STATE_READY, CLUSTER_STATE_RELOADS_TOTAL, CLUSTER_STATE_AGE, UNKNOWN_NODES_TOTAL

    CLUSTER_STATE_OBJECTS = Gauge(
        "extender_cluster_state_objects",
        "Objects in the current cluster state, by kind.",
        ["kind"],
        multiprocess_mode="livemostrecent",  # every worker holds the same snapshot
    )

    CLUSTER_STATE_READY = Gauge(
        "extender_cluster_state_ready",
        "1 when the cluster state is loaded and fresh enough to answer (what /readyz "
        "says), 0 otherwise; set at each scrape.",
        multiprocess_mode="livemostrecent",
    )

    CLUSTER_STATE_RELOADS_TOTAL = Counter(
        "extender_cluster_state_reloads_total",
        "Cluster state reloads, by result (success or error).",
        ["result"],
    )
    for _result in ("success", "error"):
        CLUSTER_STATE_RELOADS_TOTAL.labels(_result)  # the first error is an increase from 0

    CLUSTER_STATE_AGE = Gauge(
        "extender_cluster_state_age_seconds",
        "How stale the cluster state may be, in seconds, as of the last /readyz: file mode, "
        "since the file stopped matching what is served (0: it matches); live mode, how long "
        "the longest-failing watch has been failing (0: all healthy).",
        multiprocess_mode="liveall",
    )

    UNKNOWN_NODES_TOTAL = Counter(
        "extender_unknown_nodes_total",
        "Candidate nodes answered Unschedulable because the extender has not seen them yet "
        "(NodeNames mode) or could not parse them (Nodes mode).",
    )


# --- live state: the API-server watch ------------------------------------------------
def _watch() -> None:
    global WATCH_EVENTS_TOTAL, WATCH_EVENTS_DROPPED_TOTAL, WATCH_RELISTS_TOTAL, WATCH_ERRORS_TOTAL, WATCH_EVENT_LAG, WATCH_SUSPICIONS_TOTAL, WATCH_SECONDS_SINCE_SYNC

    WATCH_EVENTS_TOTAL = Counter(
        "extender_watch_events_total",
        "Watch events received, by kind and type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR).",
        ["kind", "type"],
    )

    WATCH_EVENTS_DROPPED_TOTAL = Counter(
        "extender_watch_events_ignored_total",
        "Watch events that changed nothing the plugins read (heartbeats, status, "
        "resourceVersion churn), dropped before touching any index, by kind.",
        ["kind"],
    )

    WATCH_RELISTS_TOTAL = Counter(
        "extender_watch_relists_total",
        "Full lists of a kind (the initial one, and after 410 Gone/Expired or an error), by kind.",
        ["kind"],
    )

    WATCH_ERRORS_TOTAL = Counter(
        "extender_watch_errors_total",
        "Failed lists/watches and dropped streams, by kind and reason.",
        ["kind", "reason"],
    )

    WATCH_EVENT_LAG = Histogram(
        "extender_watch_event_lag_seconds",
        "Now minus the event's object timestamp (creation for ADDED, deletion for "
        "DELETED), where the object has one; seconds resolution upstream.",
        ["kind"],
        buckets=(0.5, 1, 2, 5, 10, 30, 60, 300),
    )

    WATCH_SUSPICIONS_TOTAL = Counter(
        "extender_watch_suspicions_total",
        "Times every watched kind was probed at once (and verdicts reading one were refused "
        "until it was confirmed current) because the watch had not shown, within "
        "--bind-watch-timeout, a pod this extender bound.",
    )

    WATCH_SECONDS_SINCE_SYNC = Gauge(
        "extender_watch_seconds_since_sync",
        "Seconds since the kind's list or watch last succeeded (an event, a bookmark, a "
        "healthy stream).",
        ["kind"],
        multiprocess_mode="liveall",
    )


# --- CEL (KEP-5500) -----------------------------------------------------------------
def _cel() -> None:
    global CEL_CACHE_REQUESTS_TOTAL, CEL_CACHE_EVICTIONS_TOTAL, CEL_CACHE_ENTRIES, CEL_COMPILE_DURATION, CEL_EVALUATION_ERRORS_TOTAL, CEL_LANE_MOVES_TOTAL, CEL_RESULT_MEMO_TOTAL

    CEL_CACHE_REQUESTS_TOTAL = Counter(
        "extender_cel_program_cache_requests_total",
        "Lookups in the shared compiled-program cache, by result (hit or miss).",
        ["result"],
    )

    CEL_CACHE_EVICTIONS_TOTAL = Counter(
        "extender_cel_program_cache_evictions_total",
        "Compiled programs evicted from the shared cache.",
    )

    CEL_CACHE_ENTRIES = Gauge(
        "extender_cel_program_cache_entries",
        "Entries (programs and cached compile errors) in the shared cache, all workers.",
        multiprocess_mode="livesum",  # one cache per worker: the total is what memory holds
    )

    CEL_COMPILE_DURATION = Histogram(
        "extender_cel_compile_duration_seconds",
        "Time to compile and validate one CEL toleration expression.",
        buckets=exponential_buckets(0.00001, 2, 18),
    )

    CEL_EVALUATION_ERRORS_TOTAL = Counter(
        "extender_cel_evaluation_errors_total",
        "CEL toleration expressions that did not yield a boolean, by reason "
        "(compile, runtime, cost, non-bool).",
        ["reason"],
    )
    for _reason in ("compile", "runtime", "cost", "non-bool"):
        CEL_EVALUATION_ERRORS_TOTAL.labels(_reason)  # rates and alerts see 0, not no data

    CEL_LANE_MOVES_TOTAL = Counter(
        "extender_cel_lane_moves_total",
        "Requests moved to a costlier lane before their CEL work started (extender.request.lane): "
        "from the event loop to a pool thread, or on to the expensive lane.",
        ["from_lane", "to_lane"],
    )

    CEL_RESULT_MEMO_TOTAL = Counter(
        "extender_cel_result_memo_requests_total",
        "Lookups in the (expression, taint) result memo, by result (hit or miss).",
        ["result"],
    )


# --- memory ---------------------------------------------------------------------------
def _memory() -> None:
    global CACHE_BYTES

    CACHE_BYTES = Gauge(
        "extender_cache_bytes",
        "Estimated bytes held by each cache (see extender.caching), summed over its instances.",
        ["cache"],
        multiprocess_mode="livesum",
    )


# --- inside kube-scheduler: bind, preempt, pods in flight ---------------------------
def _engine() -> None:
    global INFLIGHT_PODS, INFLIGHT_WAIT_SECONDS, INFLIGHT_EXPIRED_TOTAL, ASSUMED_PODS, BINDINGS_TOTAL, BINDINGS_UNSETTLED, PREEMPTION_NODES_TOTAL, UNRESOLVABLE_FOR_PREEMPTION_TOTAL, UNREADY_ANSWERS_TOTAL, EVENTS_TOTAL

    INFLIGHT_PODS = Gauge(
        "extender_inflight_pending_pods",
        "Pods answered by filter (with a feasible node) whose bind has not arrived yet.",
        multiprocess_mode="liveall",
    )

    INFLIGHT_WAIT_SECONDS = Histogram(
        "extender_inflight_wait_seconds",
        "Time a verb waited for pods of its namespace that were answered but not yet bound.",
        buckets=exponential_buckets(0.0001, 2, 16),
    )

    INFLIGHT_EXPIRED_TOTAL = Counter(
        "extender_inflight_expired_total",
        "Pods answered by filter whose bind had not arrived 60 s later (and that were not "
        "filtered again): no longer waited for.",
    )

    ASSUMED_PODS = Gauge(
        "extender_assumed_pods",
        "Pods the bind verb counts on their node (kube-scheduler's assumed pods) that the "
        "cluster state does not show bound yet; each ends when the watch shows the pod bound, "
        "deleted or gone after a relist, or when its binding call fails, never by a timer.",
        multiprocess_mode="liveall",
    )

    BINDINGS_TOTAL = Counter(
        "extender_bindings_total",
        "Bindings through the bind verb, by the answer kube-scheduler got: success (the API "
        "bound the pod), error (it refused, or the request came too late), pending (the API "
        "had not answered by the request's deadline: answered success, settled in the background).",
        ["result"],
    )

    BINDINGS_UNSETTLED = Gauge(
        "extender_bindings_unsettled",
        "Bindings answered as in progress whose outcome the API server has not settled yet "
        "(the pod stays counted on its node meanwhile).",
        multiprocess_mode="liveall",
    )

    PREEMPTION_NODES_TOTAL = Counter(
        "extender_preemption_nodes_total",
        "Preemption candidate nodes the preempt verb kept or dropped.",
        ["result"],
    )

    UNRESOLVABLE_FOR_PREEMPTION_TOTAL = Counter(
        "extender_filter_unresolvable_for_preemption_total",
        "Nodes a filter answer with no feasible node put in FailedAndUnresolvableNodes rather "
        "than FailedNodes (rejected for skew or not seen yet, hosting lower-priority pods): "
        "kube-scheduler's preemption dry run would find no victim there and fail the attempt.",
    )

    UNREADY_ANSWERS_TOTAL = Counter(
        "extender_unready_answers_total",
        "Verb calls answered with an Error (filter, bind) or HTTP 503 (prioritize, preempt) "
        "because the cluster state cannot give a verdict: not synced yet (every watched kind "
        "lists once first), stale (not confirmed by the API server within --max-staleness), "
        "unconfirmed (a kind the verdict reads is being re-checked: a bind the watch did not "
        "show in time, or a relist), inflight (pods answered before it are still being bound), "
        "or unconfigured.",
        ["verb", "reason"],
    )
    for _verb in ERROR_ANSWER_VERBS:
        for _reason in ("not_synced", "stale", "unconfirmed", "inflight", "unconfigured"):
            UNREADY_ANSWERS_TOTAL.labels(_verb, _reason)
    EVENTS_TOTAL = Counter(
        "extender_events_total",
        "Events about pods the filter left with no feasible node (--record-events), by "
        "result: created, patched (the same event again: count + 1), skipped (client-go's "
        "spam filter, or the explanation budget), dropped (the queue was full), error.",
        ["result"],
    )
    for _result in ("created", "patched", "skipped", "dropped", "error"):
        EVENTS_TOTAL.labels(_result)


# --- the drift report (`--drift-report`, extender.drift) ----------------------------------
def _drift() -> None:
    global PODS_VIOLATING, DRIFT_EVENTS_TOTAL

    PODS_VIOLATING = Gauge(
        "extender_pods_violating",
        "Running pods whose node no longer satisfies their scheduling constraints, by the "
        "plugin that would reject the node now, its reason and the severity: required "
        "(/filter rejects the node; Kubernetes does nothing about it), evicting (an untolerated "
        "NoExecute taint: the taint-eviction controller acts), preferred (untolerated "
        "PreferNoSchedule taints). A pod counts once per label set. Exported with "
        "--drift-report (or --drift-endpoint, --drift-events).",
        ["plugin", "reason", "severity"],
        multiprocess_mode="livemostrecent",  # every worker holds the same state and report
    )

    DRIFT_EVENTS_TOTAL = Counter(
        "extender_drift_events_total",
        "Events about pods whose node no longer satisfies them (--drift-events), by result: "
        "created, patched (the same event again: count + 1), skipped (client-go's spam "
        "filter), dropped (the queue was full), error.",
        ["result"],
    )


# --- admission webhook (`--webhook-listen`) -------------------------------------------
# The names controller-runtime's webhook server exports, so webhook dashboards and
# alerts written for Kubernetes operators work unchanged; `webhook` is the path.
def _webhook() -> None:
    global WEBHOOK_REQUESTS_TOTAL, WEBHOOK_LATENCY, WEBHOOK_IN_FLIGHT, ADMISSION_REVIEWS_TOTAL

    WEBHOOK_REQUESTS_TOTAL = Counter(
        "controller_runtime_webhook_requests_total",
        "Total number of admission requests by HTTP status code.",
        ["webhook", "code"],
    )

    WEBHOOK_LATENCY = Histogram(
        "controller_runtime_webhook_latency_seconds",
        "Histogram of the latency of processing admission requests.",
        ["webhook"],
        buckets=exponential_buckets(0.0001, 2, 16),
    )

    WEBHOOK_IN_FLIGHT = Gauge(
        "controller_runtime_webhook_requests_in_flight",
        "Current number of admission requests being served.",
        ["webhook"],
        multiprocess_mode="livesum",
    )

    ADMISSION_REVIEWS_TOTAL = Counter(
        "extender_admission_reviews_total",
        "Admission reviews the validator checked, by object kind, operation and verdict "
        "(requests it lets through unchecked, e.g. other kinds or DELETE, are not counted).",
        ["kind", "operation", "allowed"],
    )


# --- serving certificates (webhook, --verbs-tls) and request limits ---------------------
def _serving() -> None:
    global TLS_CERTIFICATE_LOADS_TOTAL, TLS_CERTIFICATE_EXPIRY, INFLIGHT_REQUEST_BYTES, REQUESTS_SHED_TOTAL

    TLS_CERTIFICATE_LOADS_TOTAL = Counter(
        "extender_tls_certificate_loads_total",
        "Serving certificate (re)loads by result: loaded; refused_expired, refused_not_yet_valid "
        "(outside its validity period: the previous certificate stays in use); refused_unreadable.",
        ["result"],
    )

    TLS_CERTIFICATE_EXPIRY = Gauge(
        "extender_tls_certificate_expiry_timestamp_seconds",
        "notAfter of the serving certificate in use (Unix time), for expiry alerts.",
        multiprocess_mode="livemax",
    )

    INFLIGHT_REQUEST_BYTES = Gauge(
        "extender_inflight_request_bytes",
        "Bytes of requests being received or answered, every listener of the worker together "
        "(bounded by --max-inflight-bytes).",
        multiprocess_mode="livesum",
    )

    REQUESTS_SHED_TOTAL = Counter(
        "extender_requests_shed_total",
        "Requests answered 503 (Retry-After) because --max-inflight-bytes was reached, by listener "
        "(verbs, metrics-listener, webhook-listener).",
        ["listener"],
    )
