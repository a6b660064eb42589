"""The real kube-scheduler, `extender serve` as shipped and the API-server double, together.

`E2ECluster` starts, in this order:

1. the API-server double (`testing.apiserver`, with its journal on, so the truth
   checker can replay every change in resourceVersion order);
2. `extender serve --config manifests/base/extender.yaml --kubeconfig ...`: the console
   script (or `python -m extender`) with the shipped configuration file; only the
   listen addresses differ (free loopback ports instead of 8888/8889);
3. the real kube-scheduler (`$KUBE_SCHEDULER_BINARY`, v1.30.6 code; `.ci/kube-scheduler`
   unpacks it) with a configuration
   generated from `manifests/base/kube-scheduler-config.yaml` (`scheduler_config`): only
   `clientConnection` (kubeconfig, JSON instead of protobuf, qps/burst), the extender's
   URL (its port) and leader election (off) change; profiles, plugins, extender verbs,
   weight, timeouts, `pluginConfig` are the shipped ones.

Tests create nodes and pods (`node`, `pod`, `spread` build them), wait for the scheduler
(`wait_settled`: every pod bound or reported unschedulable) and check the outcome
against the truth (`testing.truth`), computed from the double's objects, never from
the extender's view. See tests/e2e/README.md.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from testing import truth
from testing.apiserver import FakeApiServer, plural_of
from testing.live import free_port, request
from testing.wiretap import STATE_VERSION_HEADER, WireTap, parse_state_version

ROOT = Path(__file__).resolve().parents[1]
SCHEDULER_CONFIG = ROOT / "manifests" / "base" / "kube-scheduler-config.yaml"
EXTENDER_CONFIG = ROOT / "manifests" / "base" / "extender.yaml"
BINARY_ENV = "KUBE_SCHEDULER_BINARY"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
PREFIX = "scheduling-extender.io"
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}  # the annotation channel (extender.yaml keeps the default)
Key = tuple[str, str]


def scheduler_name() -> str:
    """The profile pods must name in `spec.schedulerName` (the shipped one)."""
    (profile,) = yaml.safe_load(SCHEDULER_CONFIG.read_text())["profiles"]
    return profile["schedulerName"]


SCHEDULER_NAME = scheduler_name()


def scheduler_binary() -> str | None:
    """`$KUBE_SCHEDULER_BINARY` (`.ci/run` unpacks it); None when unset."""
    return os.environ.get(BINARY_ENV) or None


def scheduler_config(kubeconfig: Path, extender_port: int | None, qps: int = 5000) -> dict:
    """The shipped KubeSchedulerConfiguration with only what a test run must change.
    `extender_port` None: the in-tree baseline, the same configuration without the
    extender and with the four plugins it replaces enabled again."""
    config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    config["clientConnection"] = {**config.get("clientConnection", {}), "kubeconfig": str(kubeconfig),
                                  "contentType": "application/json", "qps": qps, "burst": qps}
    config["leaderElection"] = {"leaderElect": False}
    if extender_port is None:
        del config["extenders"]
        for profile in config["profiles"]:
            profile["plugins"]["multiPoint"].pop("disabled")
        return config
    (extender,) = config["extenders"]
    url = urlsplit(extender["urlPrefix"])
    extender["urlPrefix"] = urlunsplit(url._replace(netloc=f"127.0.0.1:{extender_port}"))
    return config


def extender_command() -> list[str]:
    """The shipped entry point: the `extender` console script beside this Python, or
    `python -m extender` when it is not installed as a script."""
    script = Path(sys.executable).with_name("extender")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "extender"]


# ---- objects --------------------------------------------------------------------------


def node(name: str, zone: str = "a", cpu: str = "8", memory: str = "32Gi", pods: str = "110",
         taints: Iterable[dict] = (), labels: dict | None = None, unschedulable: bool = False) -> dict:
    """A ready node with `kubernetes.io/hostname` and `topology.kubernetes.io/zone` labels."""
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {HOST: name, ZONE: zone, "kubernetes.io/os": "linux",
                                                  **(labels or {})}},
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                       "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, labels: dict | None = None, *, namespace: str = "default", cpu: str = "100m",
        memory: str = "64Mi", priority: int = 0, spread: Iterable[dict] = (), tolerations: Iterable[dict] = (),
        node_selector: dict | None = None, affinity: dict | None = None, annotations: dict | None = None,
        node_name: str = "", scheduler: str = SCHEDULER_NAME, **spec_extra: Any) -> dict:
    """A pod for the extended scheduler (or already on `node_name`, Running)."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "priority": priority,
        "containers": [{"name": "c", "image": "registry.example.com/app:1",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        **spec_extra,
    }
    if spread:
        spec["topologySpreadConstraints"] = [dict(c) for c in spread]
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = copy.deepcopy(affinity)
    if node_name:
        spec["nodeName"] = node_name
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        metadata["annotations"] = {k: v if isinstance(v, str) else json.dumps(v) for k, v in annotations.items()}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def spread(key: str, labels: dict, max_skew: int = 1, when: str = "DoNotSchedule", **fields: Any) -> dict:
    """A topology spread constraint selecting `labels` (fields: nodeTaintsPolicy, ...)."""
    return {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": dict(labels)}, **fields}


def key_of(obj: dict) -> Key:
    md = obj["metadata"]
    return md.get("namespace") or "default", md["name"]


def filter_part(message: str) -> str:
    """The filter half of kube-scheduler's FailedScheduling message (`0/N nodes are
    available: ...`) without what its PostFilter plugins append: ` preemption: ...`, and
    from v1.34 on DynamicResources' ` no new claims to deallocate,` before it."""
    return message.split(" preemption:")[0].removesuffix(" no new claims to deallocate,")


# ---- processes ------------------------------------------------------------------------


class Process:
    """A child process with its output in a log file; `stop` ends it (SIGTERM, then kill)."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.cmd, self.log = name, cmd, log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy (returned) or `timeout` passes (None)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value or None
        time.sleep(interval)


def launch_extender(kubeconfig: Path, workdir: Path, flags: Iterable[str] = ()) -> tuple[Process, int, int]:
    """`extender serve` as shipped against `kubeconfig`, started (not yet ready):
    (process, verbs port, metrics port)."""
    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBECONFIG")}
    cmd = [*extender_command(), "serve", "--config", str(EXTENDER_CONFIG), "--kubeconfig", str(kubeconfig),
           "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics_port}", *flags]
    return Process("extender", cmd, workdir / "extender.log", env), port, metrics_port


def wait_extender_ready(proc: Process, metrics_port: int, timeout: float = 120.0) -> None:
    """Until its /readyz answers 200 (state listed); RuntimeError with its log otherwise."""
    def ready() -> bool:
        try:
            return request(metrics_port, "GET", "/readyz")[0] == 200
        except OSError:
            return False

    if not wait_for(lambda: ready() or not proc.alive(), timeout) or not ready():
        proc.stop()
        raise RuntimeError(f"extender serve did not become ready:\n{proc.tail()}")


def start_extender(kubeconfig: Path, workdir: Path, flags: Iterable[str] = (),
                   timeout: float = 120.0) -> tuple[Process, int, int]:
    """`launch_extender`, then `wait_extender_ready`."""
    proc, port, metrics_port = launch_extender(kubeconfig, workdir, flags)
    wait_extender_ready(proc, metrics_port, timeout)
    return proc, port, metrics_port


def start_scheduler(binary: str, kubeconfig: Path, workdir: Path, extender_port: int | None,
                    edit: Callable[[dict], None] | None = None, verbosity: int = 2,
                    secure_port: int = 0) -> Process:
    """kube-scheduler with the generated configuration (`scheduler_config`; `edit` may
    change it further); `extender_port` None runs the in-tree baseline. `secure_port`:
    serve /metrics, /healthz and /readyz there (self-signed, anonymous) instead of nothing."""
    config = scheduler_config(kubeconfig, extender_port)
    if edit is not None:
        edit(config)
    path = workdir / "kube-scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [binary, "--config", str(path), f"-v={verbosity}", f"--secure-port={secure_port}"]
    if secure_port:
        cmd += ["--bind-address=127.0.0.1", f"--cert-dir={workdir / 'certs'}",
                "--authorization-always-allow-paths=/metrics,/healthz,/readyz,/livez"]
    return Process("kube-scheduler", cmd, workdir / "kube-scheduler.log")


# ---- the cluster ----------------------------------------------------------------------


@dataclass
class Outcome:
    """Where `wait_settled` left the pods it waited for."""

    bound: dict[Key, str] = field(default_factory=dict)  # pod -> node
    unschedulable: dict[Key, str] = field(default_factory=dict)  # pod -> PodScheduled message
    pending: list[Key] = field(default_factory=list)  # neither (only after a timeout)
    seconds: float = 0.0

    def nodes_of(self, keys: Iterable[Key]) -> dict[Key, str]:
        return {k: self.bound[k] for k in keys if k in self.bound}


class E2ECluster:
    """See the module docstring. `start()` returns once the extender is ready and the
    scheduler has listed and is watching pods; `stop()` ends everything it started."""

    def __init__(self, workdir: Path, binary: str, extender_flags: Iterable[str] = (),
                 scheduler_config_edit: Callable[[dict], None] | None = None, verbosity: int = 2,
                 history: int = 20_000, in_tree: bool = False, api: Any = None) -> None:
        """`in_tree`: no extender; kube-scheduler runs its own TaintToleration,
        NodeAffinity, NodeUnschedulable and PodTopologySpread (the baseline). `api`:
        another API with the double's interface (`testing.realapi.RealApi`)."""
        self.workdir = workdir
        self.in_tree = in_tree
        self.binary = binary
        self.extender_flags = list(extender_flags)
        self.scheduler_config_edit = scheduler_config_edit
        self.verbosity = verbosity
        self.api = api if api is not None else FakeApiServer(history=history, journal=True)
        self.tap: WireTap | None = None
        self.extender: Process | None = None
        self.scheduler: Process | None = None
        self.extender_port = self.metrics_port = 0
        self.scheduler_port = 0  # its secure port: /metrics (the queues `wait_settled` reads)

    # -- lifecycle

    def start(self, objects: Iterable[dict] = ()) -> E2ECluster:
        """The extender and kube-scheduler start side by side (the wiretap holds the
        scheduler's first calls until the extender listens); returns once both are up."""
        self.api.start()
        self.api.load(objects)
        kubeconfig = self.api.write_kubeconfig(self.workdir / "kubeconfig")
        if not self.in_tree:
            self.extender, self.extender_port, self.metrics_port = launch_extender(
                kubeconfig, self.workdir, self.extender_flags)
            self.tap = WireTap(self.extender_port).start()
        self.start_scheduler(kubeconfig)
        if self.extender is not None:
            wait_extender_ready(self.extender, self.metrics_port)
        return self

    def start_extender(self, kubeconfig: Path) -> None:
        """The extender alone, ready (`start` launches it beside kube-scheduler)."""
        self.extender, self.extender_port, self.metrics_port = start_extender(
            kubeconfig, self.workdir, self.extender_flags)

    def start_scheduler(self, kubeconfig: Path) -> None:
        self.scheduler_port = free_port()
        self.scheduler = start_scheduler(self.binary, kubeconfig, self.workdir,
                                         None if self.in_tree else self.tap.port,
                                         edit=self.scheduler_config_edit, verbosity=self.verbosity,
                                         secure_port=self.scheduler_port)
        # watching pods (after listing every informer's kind) = its caches are syncing
        if not wait_for(lambda: self._scheduler_watching() or not self.scheduler.alive(), timeout=60) \
                or not self.scheduler.alive():
            raise RuntimeError(f"kube-scheduler did not start:\n{self.scheduler.tail()}")

    def _scheduler_watching(self) -> bool:
        return any(r.startswith("GET /api/v1/pods?") and "watch=true" in r and "fieldSelector" in r
                   for r in list(self.api.requests))

    def stop(self) -> None:
        if self.extender is not None and self.extender.alive():
            self.extender.proc.terminate()  # its graceful exit overlaps the rest
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.tap is not None:
            self.tap.stop()
        self.api.stop()
        if self.extender is not None:
            self.extender.stop()

    def __enter__(self) -> E2ECluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self, chars: int = 4000) -> str:
        """The tails of both processes' logs (for failure messages)."""
        return "\n".join(f"--- {p.name} ({p.log}) ---\n{p.tail(chars)}" for p in (self.scheduler, self.extender) if p)

    # -- the truth, from the tests

    def create(self, *objects: dict) -> list[dict]:
        """Create nodes, pods or anything else the double serves (kind-tagged dicts)."""
        return [self.api.create(plural_of(o), o) for o in objects]

    def patch_node(self, name: str, patch: dict) -> dict:
        """A strategic-merge patch of a node (taint, cordon, relabel)."""
        return self.api.patch("nodes", name, "", patch, "application/strategic-merge-patch+json")

    def set_taints(self, name: str, taints: list[dict]) -> dict:
        node = self.api.get("nodes", name)
        node.setdefault("spec", {})["taints"] = [dict(t) for t in taints]
        return self.api.update("nodes", node)

    def cordon(self, name: str) -> dict:
        """`kubectl cordon` plus what the node lifecycle controller then adds: the
        `node.kubernetes.io/unschedulable:NoSchedule` taint (TaintNodesByCondition)."""
        node = self.api.get("nodes", name)
        node["spec"]["unschedulable"] = True
        node["spec"]["taints"] = [*(node["spec"].get("taints") or []), CORDON_TAINT]
        return self.api.update("nodes", node)

    def relabel(self, name: str, labels: dict[str, str | None]) -> dict:
        return self.patch_node(name, {"metadata": {"labels": labels}})

    def pod_state(self, keys: Iterable[Key]) -> dict[Key, tuple[str, str, str, str]]:
        """pod -> (nodeName, PodScheduled reason, its message, nominatedNodeName) in the
        truth (missing pods absent)."""
        return self.api.scheduling_states(keys)

    def wait_until_bound(self, keys: list[Key], count: int, timeout: float = 60.0) -> bool:
        """True once at least `count` of `keys` are bound (False at `timeout`)."""
        return bool(wait_for(lambda: sum(1 for s in self.pod_state(keys).values() if s[0]) >= count,
                             timeout, interval=0.01))

    def scheduler_metrics(self) -> str:
        """kube-scheduler's /metrics text, from its secure port (self-signed; `RealCluster`
        authenticates the scrape)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", self.scheduler_port, timeout=10, context=ctx)
        try:
            conn.request("GET", "/metrics", headers=self.scrape_headers())
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        if response.status != 200:
            raise AssertionError(f"kube-scheduler's /metrics answered {response.status}: {text[:300]}")
        return text

    def scrape_headers(self) -> dict[str, str]:
        return {}

    def scheduler_queues(self) -> dict[str, float]:
        """kube-scheduler's own account of what it still has to do: `scheduler_pending_pods`
        per queue (active, backoff, unschedulable, gated) and `attempts`, the sum of
        `scheduler_schedule_attempts_total` (an attempt counts when it ends)."""
        out = {"active": 0.0, "backoff": 0.0, "unschedulable": 0.0, "gated": 0.0, "attempts": 0.0}
        for line in self.scheduler_metrics().splitlines():
            if line.startswith("scheduler_pending_pods{"):
                queue = re.search(r'queue="([^"]*)"', line)
                if queue:
                    out[queue.group(1)] = out.get(queue.group(1), 0.0) + float(line.rsplit(" ", 1)[1])
            elif line.startswith("scheduler_schedule_attempts_total{"):
                out["attempts"] += float(line.rsplit(" ", 1)[1])
        return out

    def wait_settled(self, pods: Iterable[dict | Key], timeout: float = 60.0) -> Outcome:
        """Wait until kube-scheduler says it is done, by its own metrics: every pod bound
        or reported Unschedulable (PodScheduled=False) without a nominated node (a
        preemptor waits for its victims to go), nothing in its active or backoff queue
        (a pod that failed is retried from there: a verdict not yet final), no call to the
        extender open (a pod popped for a cycle is in no queue), and the same outcome,
        the same queues and the same count of ended attempts on two looks in a row (an
        attempt that ended between them shows). Pods parked in the unschedulable queue
        stay there until a cluster event moves them, which would be seen. Raises with
        both logs when it is not so at `timeout` (a hang guard), or a process died."""
        keys = [p if isinstance(p, tuple) else key_of(p) for p in pods]
        started = time.monotonic()
        deadline = started + timeout
        last = None
        while True:
            states = self.pod_state(keys)
            open_ = [k for k, (where, reason, _, nominated) in states.items()
                     if not where and (reason != "Unschedulable" or nominated)]
            queues = self.scheduler_queues()
            calls = self.tap.open_calls if self.tap is not None else 0
            look = (tuple(sorted((k, s[0], s[1], s[3]) for k, s in states.items())), tuple(sorted(queues.items())))
            done = not open_ and queues["active"] == 0 and queues["backoff"] == 0 and calls == 0
            if done and look == last:
                break
            last = look if done else None
            for proc in (self.scheduler, self.extender):
                if proc is not None and not proc.alive():
                    raise AssertionError(f"{proc.name} exited with {proc.proc.returncode}\n{self.logs()}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"not settled after {timeout:.0f} s: {len(open_)} of {len(keys)} pods neither "
                                     f"bound nor unschedulable (e.g. {open_[:3]}), kube-scheduler's queues {queues}, "
                                     f"{calls} extender calls open\n{self.logs()}")
            time.sleep(0.05)
        out = Outcome(seconds=time.monotonic() - started)
        for k in keys:
            node_name, reason, message, _ = states.get(k, ("", "", "", ""))
            if node_name:
                out.bound[k] = node_name
            elif reason == "Unschedulable":
                out.unschedulable[k] = message
            else:
                out.pending.append(k)
        return out

    def state_version(self, kind: str, node_name: str) -> int | None:
        """The resourceVersion of `kind` the extender's verdicts are computed on now
        (its `X-Extender-State-Version` header; None while that kind relists): a filter
        asked directly, not through the wiretap (no decision is recorded), for a pod
        that selects nothing and waits for nothing, over one existing node."""
        probe = pod("state-version-probe", {"state-version-probe": "true"})
        body = json.dumps({"Pod": probe, "NodeNames": [node_name]}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.extender_port, timeout=10)
        try:
            conn.request("POST", "/scheduler/filter", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            header = response.getheader(STATE_VERSION_HEADER)
        finally:
            conn.close()
        return (parse_state_version(header) or {}).get(kind)

    def wait_state_version(self, kind: str, version: int, node_name: str, timeout: float = 60.0) -> None:
        """Return once the extender decides on `kind` at `version` or later (every write
        up to it seen by its watch); fail with both logs at `timeout`. A test that must
        know which decisions saw a change asks this instead of sleeping."""
        if not wait_for(lambda: (self.state_version(kind, node_name) or 0) >= version, timeout, interval=0.02):
            raise AssertionError(f"the extender did not reach {kind} resourceVersion {version} in {timeout:.0f} s "
                                 f"(it is at {self.state_version(kind, node_name)})\n{self.logs()}")

    def wait_for_verb(self, verb: str, timeout: float = 30.0) -> bool:
        """True once the scheduler has called `verb` through the wiretap."""
        return bool(wait_for(lambda: verb in self.tap.verbs(), timeout))

    def deleted_pods(self) -> list[Key]:
        """Pods deleted so far (preemption victims), in order, from the double's journal."""
        return [key_of(c.obj) for c in list(self.api.journal or ()) if c.resource == "pods" and c.type == "DELETED"]

    def replay(self, oracles: dict | None = None, **kwargs: Any) -> truth.Report:
        """Every bind checked against the truth when it was decided (`testing.truth`):
        the extender's at the state version its verdict used (the wiretap's record)."""
        if self.tap is not None:
            kwargs.setdefault("decisions", self.tap.decisions())
            kwargs.setdefault("binds", self.tap.bind_calls())
            kwargs.setdefault("refusals", self.tap.refusals())
        return truth.replay(self.api, oracles, PREFIX, **kwargs)

    def explain(self, report: truth.Report, limit: int = 5) -> str:
        """Why the first `limit` violations of `report` were judged so (a failed test's
        message): each violation, the judge's view at the verdict's state version
        (`truth.Judged`), the pod's calls through the wiretap (state version, feasible
        set, scores, bind) and the pods in flight when it was decided; the evidence of
        every violation is written to a directory the message names first (`dump`).
        Built only when asked: a passing test pays nothing."""
        head = [f"evidence: {self.dump(report)}"] if report.violations else []
        return "\n".join([*head, self._explained(report, limit)])

    def _explained(self, report: truth.Report, limit: int) -> str:
        lines = []
        origin = self.tap.calls[0].at if self.tap is not None and self.tap.calls else 0.0
        for v in report.violations[:limit]:
            lines.append(str(v))
            namespace, _, name = v.pod.partition("/")
            judged = report.judged.get((namespace, name))
            if judged is not None:
                lines.append(f"  judged at state {dict(judged.versions)} (journal positions "
                             f"{dict(judged.positions)}), decided at {judged.at - origin:+.3f}s")
                lines += [f"  domains {d}" for d in judged.domains]
                lines += [f"  node {n}" for n in judged.nodes]
                lines += [f"  node write {w}" for w in judged.node_writes]
                lines.append(f"  counted as decided, unbound in the journal at that state: {judged.assumed}")
            if self.tap is not None:
                lines += [f"  wiretap {call}" for call in self.tap.story((namespace, name), origin)]
                if judged is not None:
                    flying = self.tap.in_flight(judged.at)
                    lines.append("  in flight at the decision (answered before, bound after): " + ", ".join(
                        f"{k[1]} -> {node or '?'} (filter {f - origin:+.3f}s, bind {b - origin:+.3f}s)"
                        for k, f, b, node in flying[:20]))
        return "\n".join(lines)

    def dump(self, report: truth.Report, where: Path | None = None) -> Path:
        """Write what a failure's cause can be read from into a directory (default
        `build/e2e-evidence/<run>`, outside pytest's temporary directories, which are
        pruned) and return it: `violations.txt` (`explain` of every violation: the judge's
        domain counts and nodes at the verdict's state version), `calls.jsonl` (every
        wiretap call for a violating pod: verb, arrival, round trip, the
        `X-Extender-State-Version` behind it, error, feasible names or scores, bind
        node), `all-calls.jsonl` (every call of the run, the same fields),
        `journal.jsonl` (every node and pod write, in resourceVersion order: what the
        watches delivered around each decision), and both processes' logs."""
        where = where or ROOT / "build" / "e2e-evidence" / f"{self.workdir.name}-{os.getpid()}-{time.time_ns()}"
        where.mkdir(parents=True, exist_ok=True)
        (where / "violations.txt").write_text(
            "\n".join(str(v) for v in report.violations) + "\n\n" + self._explained(report, len(report.violations)))
        bad = {tuple(v.pod.partition("/")[::2]) for v in report.violations}
        calls = list(self.tap.calls) if self.tap is not None else []
        origin = calls[0].at if calls else 0.0

        def row(call: Any) -> str:
            return json.dumps({"verb": call.verb, "pod": "/".join(call.pod), "at": round(call.at - origin, 4),
                               "seconds": round(call.seconds, 4), "versions": call.versions, "nodes": call.nodes,
                               "node": call.node, "error": call.error,
                               "answer": list(call.answer) if call.answer is not None else None}, default=str)

        (where / "calls.jsonl").write_text("".join(row(c) + "\n" for c in calls if c.pod in bad))
        (where / "all-calls.jsonl").write_text("".join(row(c) + "\n" for c in calls))
        journal = truth.in_version_order(list(self.api.journal or ()))
        with (where / "journal.jsonl").open("w") as out:
            for c in journal:
                if c.resource not in ("nodes", "pods"):
                    continue
                md, spec = c.obj.get("metadata") or {}, c.obj.get("spec") or {}
                out.write(json.dumps({"rv": c.rv, "epoch": getattr(c, "epoch", 0), "at": round(c.at - origin, 4),
                                      "type": c.type, "resource": c.resource,
                                      "name": f"{md.get('namespace', '')}/{md.get('name')}".lstrip("/"),
                                      "nodeName": spec.get("nodeName"), "taints": spec.get("taints"),
                                      "unschedulable": spec.get("unschedulable"), "labels": md.get("labels")}) + "\n")
        for proc in (self.scheduler, self.extender):
            if proc is not None:
                (where / proc.log.name).write_text(proc.tail(10**9))
        return where

    def pending_but_feasible(self, keys: Iterable[Key], oracles: dict | None = None) -> dict[Key, str]:
        """Unbound pods among `keys` that some node admits in the final truth."""
        return truth.pending_but_feasible(self.api, keys, oracles, PREFIX)

    def events(self, involved: Key | None = None) -> list[dict]:
        """Events the scheduler wrote (core and events.k8s.io), optionally for one pod."""
        out = []
        for resource in ("events", "events.events.k8s.io"):
            for e in self.api.objects(resource):
                obj = e.get("involvedObject") or e.get("regarding") or {}
                if involved is None or (obj.get("namespace"), obj.get("name")) == involved:
                    out.append(e)
        return out

    def extender_metric(self, name: str, labels: str = "") -> float:
        """The sum of a metric's samples on the extender's /metrics (`labels`: a
        substring every counted sample's label set contains)."""
        text = request(self.metrics_port, "GET", "/metrics")[1].decode()
        total, seen = 0.0, False
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{") and labels in line:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
        if not seen:
            raise AssertionError(f"metric {name}{{{labels}}} not exported")
        return total


def require_binary() -> str:
    """The kube-scheduler binary, or a test failure that names it and says how to get it
    (the end-to-end tests never skip: a missing binary is a suite that did not run)."""
    import pytest

    binary = scheduler_binary()
    if binary is None:
        pytest.fail(f"{BINARY_ENV} is not set: the end-to-end tests need the real kube-scheduler v1.30.6. "
                    "`make test` and .ci/run set it with `.ci/kube-scheduler --env`, which unpacks "
                    "kube-scheduler-v1.30.6-linux-amd64.xz from the archives CI provides (where: that "
                    "script) or from $CONTROL_PLANE_ARCHIVES; or export the path of a v1.30 binary",
                    pytrace=False)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.fail(f"{BINARY_ENV}={binary} is not an executable file", pytrace=False)
    return binary
