"""The differential against upstream's own Gt/Lt (tests/e2e/test_real_differential.py).

`generate(seed, nodes, pods)` makes a cluster of tainted nodes and pods with spec
tolerations: taint values at the int64 edges, non-canonical ones (leading zeros,
overflow, decimals, words: whatever a label value may be), every effect, several taints
per node; toleration values canonical mostly, and some that the v1.36 API server refuses
(leading zeros, `+`, `-0`, spaces, overflow), so that admission is compared too.

`Recorder` is a scheduler extender that records what kube-scheduler shows it:
- alone (`upstream=None`), registered with a filter verb only beside kube-scheduler's
  in-tree plugins, it answers every filter with the nodes it was given, which are the
  nodes that passed the in-tree filters: the in-tree feasible set;
- as a proxy in front of the extender (`upstream` = its URL), it records the extender's
  filter answer (the feasible set) and its prioritize scores.

`scores_only(*plugins)` reduces a profile's Score plugins to the given ones, so that the
node a pod lands on depends on taints alone (no usage-dependent score), in both runs.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from testing.apiserver import QuietServer
from testing.harness import node
from testing.scores import best_hosts

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
KEYS = ("example.com/sla", "example.com/budget", "example.com/tier")
GROUP = "example.com/group"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# taint values: label values (no sign), canonical or not, within int64 or not
EDGE_TAINT_VALUES = ("0", "1", "9", "750", "800", "950", str(INT64_MAX), str(INT64_MAX - 1),
                     str(2**62), str(2**31), str(2**31 - 1))
ODD_TAINT_VALUES = ("007", "0800", "00", str(INT64_MAX + 1), "99999999999999999999", "1.5", "1e3",
                    "0x10", "gold", "", "1_000", "9223372036854775807a")
# toleration values the API server stores for Gt/Lt (canonical int64) ...
EDGE_TOLERATION_VALUES = ("0", "-1", "1", "8", "749", "750", "800", "949", str(INT64_MAX), str(INT64_MAX - 1),
                          str(INT64_MIN), str(INT64_MIN + 1), str(2**62), str(-(2**62)), str(2**31))
# ... and values it refuses in spec (so does the extender's validator in the annotation)
REFUSED_TOLERATION_VALUES = ("0750", "+5", "-0", " 5", "5 ", str(INT64_MAX + 1), str(INT64_MIN - 1),
                             "1.5", "", "abc", "-01", "1e3")


def _taint_value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(EDGE_TAINT_VALUES)
    if roll < 0.7:
        return str(rng.randint(0, 1000))
    if roll < 0.8:
        return str(rng.randint(0, INT64_MAX))
    return rng.choice(ODD_TAINT_VALUES)


def _numeric_value(rng: random.Random, refused_share: float) -> str:
    roll = rng.random()
    if roll < refused_share:
        return rng.choice(REFUSED_TOLERATION_VALUES)
    if roll < 0.5:
        return rng.choice(EDGE_TOLERATION_VALUES)
    if roll < 0.85:
        return str(rng.randint(-5, 1000))
    return str(rng.randint(INT64_MIN, INT64_MAX))


def _toleration(rng: random.Random, refused_share: float) -> dict:
    operator = rng.choices(("Gt", "Lt", "Equal", "Exists"), (40, 40, 10, 10))[0]
    tol: dict[str, Any] = {"key": rng.choice(KEYS), "operator": operator}
    if operator in ("Gt", "Lt"):
        tol["value"] = _numeric_value(rng, refused_share)
    elif operator == "Equal":
        tol["value"] = _taint_value(rng)
    effect = rng.choices(("", *EFFECTS), (30, 25, 25, 20))[0]
    if effect:
        tol["effect"] = effect
    if effect == "NoExecute" and rng.random() < 0.3:
        tol["tolerationSeconds"] = rng.choice((0, 30, 3600))
    return tol


def tainted_node(name: str, group: str, rng: random.Random) -> dict:
    """0-4 taints, unique by (key, effect) as the API requires, in a node group."""
    taints: dict[tuple[str, str], dict] = {}
    for _ in range(rng.choices((0, 1, 2, 3, 4), (5, 25, 35, 25, 10))[0]):
        key, effect = rng.choice(KEYS), rng.choices(EFFECTS, (40, 35, 25))[0]
        taints[(key, effect)] = {"key": key, "value": _taint_value(rng), "effect": effect}
    return node(name, "a", cpu="1000", memory="4Ti", pods="10000", taints=list(taints.values()),
                labels={GROUP: group})


def differential_pod(name: str, rng: random.Random, scheduler: str, refused_share: float, groups: int) -> dict:
    """0-3 spec tolerations; most pods are held to one node group (a few nodes: a unique
    best-scored node happens, and so does no feasible node)."""
    tolerations = [_toleration(rng, refused_share) for _ in range(rng.choices((0, 1, 2, 3), (5, 40, 35, 20))[0])]
    spec: dict[str, Any] = {"schedulerName": scheduler,
                            "containers": [{"name": "c", "image": "registry.example.com/app:1",
                                            "resources": {"requests": {"cpu": "10m", "memory": "1Mi"}}}]}
    if tolerations:
        spec["tolerations"] = tolerations
    if rng.random() < 0.75:
        spec["nodeSelector"] = {GROUP: f"g{rng.randrange(groups)}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def generate(seed: int, nodes: int, pods: int, scheduler: str, groups: int = 8,
             refused_share: float = 0.03) -> tuple[list[dict], list[dict]]:
    """(nodes, pods) for one differential run; the same seed gives the same cluster."""
    rng = random.Random(seed)
    return ([tainted_node(f"n{i:03d}", f"g{i % groups}", rng) for i in range(nodes)],
            [differential_pod(f"p{i:05d}", rng, scheduler, refused_share, groups) for i in range(pods)])


def scores_only(*plugins: tuple[str, int]) -> Callable[[dict], None]:
    """A scheduler_config_edit: every Score plugin off but `plugins` ((name, weight))."""
    def edit(config: dict) -> None:
        for profile in config["profiles"]:
            profile["plugins"]["score"] = {"disabled": [{"name": "*"}],
                                           "enabled": [{"name": n, "weight": w} for n, w in plugins]}
    return edit


# ---- the recording extender --------------------------------------------------------------


@dataclass
class Seen:
    """What the scheduler showed the recorder about one pod (its last filter and prioritize)."""

    given: list[str] = field(default_factory=list)  # NodeNames of the filter call
    passed: list[str] = field(default_factory=list)  # NodeNames of the filter answer
    scores: dict[str, int] = field(default_factory=dict)  # the prioritize answer
    scored: list[str] | None = None  # NodeNames of the prioritize call (None: not asked)

    def best(self) -> set[str]:
        """The nodes with the highest score as kube-scheduler reads the answer (a host the
        answer does not list scores 0; the feasible ones when none was asked)."""
        if self.scored is None:
            return set(self.passed)
        return set(best_hosts(self.scored, [{"Host": h, "Score": s} for h, s in self.scores.items()]))


class Recorder:
    """See the module docstring; `edit(config)` registers it in a scheduler configuration."""

    def __init__(self, upstream: str | None = None) -> None:
        self.upstream = urlsplit(upstream) if upstream else None
        self.seen: dict[str, Seen] = {}
        self.lock = threading.Lock()
        self.httpd = QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True, name="recorder").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/scheduler"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def add_to(self, config: dict) -> None:
        """Alone: a filter-only extender beside the in-tree plugins. As a proxy: the
        configuration's extender now goes through it."""
        if self.upstream is None:
            config["extenders"] = [{"urlPrefix": self.url, "filterVerb": "filter", "weight": 1,
                                    "nodeCacheCapable": True, "httpTimeout": "5s", "ignorable": False}]
        else:
            (extender,) = config["extenders"]
            extender["urlPrefix"] = self.url

    def answer(self, verb: str, body: bytes) -> tuple[int, bytes]:
        args = json.loads(body)
        if self.upstream is None:
            if verb != "filter":
                return 404, b"only filter"
            status, out = 200, {"NodeNames": args.get("NodeNames") or [], "FailedNodes": {}, "Error": ""}
            raw = json.dumps(out).encode()
        else:
            conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
            try:
                conn.request("POST", f"{self.upstream.path}/{verb}", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                status, raw = resp.status, resp.read()
            finally:
                conn.close()
            out = json.loads(raw) if status == 200 else {}
        self.record(verb, args, out)
        return status, raw

    def record(self, verb: str, args: dict, out: Any) -> None:
        if verb not in ("filter", "prioritize"):
            return
        name = ((args.get("Pod") or {}).get("metadata") or {}).get("name", "")
        with self.lock:
            seen = self.seen.setdefault(name, Seen())
            if verb == "filter":
                seen.given, seen.passed = list(args.get("NodeNames") or []), list(out.get("NodeNames") or [])
                seen.scores, seen.scored = {}, None
            else:
                seen.scores = {h["Host"]: h["Score"] for h in out or []}
                seen.scored = list(args.get("NodeNames") or [])


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, raw = recorder.answer(self.path.rstrip("/").rsplit("/", 1)[-1], body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler
