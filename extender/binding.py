"""The `bind` verb: create the `pods/binding` subresource for kube-scheduler.

With `bindVerb` configured, kube-scheduler's binding cycle calls us instead of its
DefaultBinder (`schedule_one.go` `extendersBinding`, `extender.go` `Bind`), with
`ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}`, and treats a non-empty
`ExtenderBindingResult.Error` (or a non-200 answer) as a failed binding: it forgets
the assumed pod and re-queues it. We assume the pod on the node in our own state
*before* the API call (so the next pod's answer already counts it), forget it if the
call fails, and let the watch confirm it (`extender.inflight`).

The call must end before kube-scheduler's `httpTimeout`: a binding that succeeds after
the scheduler gave up has it forget the pod and offer its capacity to the next one
(double-booked until the watch shows the pod). So the call gets only the time the
request has left under `--request-deadline` (counted from the request's arrival), with
no retries; out of time it answers an Error and forgets the assumption. (A call cut
off at the deadline may still have been applied by the API server: the watch then
shows the pod bound a moment later, and the state counts it from there.)

API access is the live source's (`--kubeconfig` or `--in-cluster`); in file mode the
verb answers an Error (there is no API to bind through).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender import metrics
from extender.api.wire import WireError, go_fields
from extender.inflight import InFlight

log = logging.getLogger("extender.bind")

ERR_NO_API = "the bind verb needs API access: run in live mode (--kubeconfig or --in-cluster)"
DEFAULT_BIND_SECONDS = 4.0  # with --request-deadline 0: its default, below httpTimeout 5 s
MIN_BIND_SECONDS = 0.05  # less time than this left: answer an Error without calling
# connections kept for bindings: kube-scheduler binds in parallel (one goroutine a pod)
BIND_CONNECTIONS = 64


class BindError(RuntimeError):
    """The API server refused or could not be reached; the message goes to the scheduler."""


# (namespace, name, uid, node, timeout seconds) -> None, or raises BindError
PostBinding = Callable[[str, str, str, str, float], None]


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def decode_binding_args(data: Any) -> BindingArgs:
    """`ExtenderBindingArgs` (Go field names, matched as encoding/json does)."""
    if not isinstance(data, dict):
        raise WireError("ExtenderBindingArgs must be a JSON object")
    fields = go_fields(data, ("PodName", "PodNamespace", "PodUID", "Node"))
    values = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = fields.get(name) or ""
        if not isinstance(value, str):
            raise WireError(f"ExtenderBindingArgs.{name} must be a string")
        values[name] = value
    if not values["PodName"] or not values["Node"]:
        raise WireError("ExtenderBindingArgs.PodName and .Node are required")
    return BindingArgs(values["PodName"], values["PodNamespace"] or "default", values["PodUID"], values["Node"])


def binding_body(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    """The `v1.Binding` kube-scheduler's DefaultBinder posts (UID set: a recreated pod
    of the same name is never bound by mistake)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


class ApiBinder:
    """Posts bindings with the live source's API access and identity (--kubeconfig or
    --in-cluster), on a client of its own: a pool sized for parallel binds (the
    watches' pool holds their streams) and no retries (the deadline is the caller's)."""

    def __init__(self, api_client) -> None:
        from kubernetes import client

        configuration = copy.copy(api_client.configuration)
        configuration.connection_pool_maxsize = BIND_CONNECTIONS
        configuration.retries = False
        self.api = client.CoreV1Api(client.ApiClient(configuration))

    def close(self) -> None:
        """Close the client's connections (tests; the server keeps them for its life)."""
        self.api.api_client.close()

    def __call__(self, namespace: str, name: str, uid: str, node: str,
                 timeout: float = DEFAULT_BIND_SECONDS) -> None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        try:
            # _preload_content=False: the client's model rejects the API's answer (a Status)
            response = self.api.create_namespaced_pod_binding(
                name, namespace, binding_body(namespace, name, uid, node),
                _preload_content=False, _request_timeout=timeout)
            response.read()  # drained, the connection goes back to the pool
            response.release_conn()
        except ApiException as exc:
            raise BindError(f"binding pod {namespace}/{name} to node {node}: {exc.status} {exc.reason}: "
                            f"{(exc.body or b'')[:300]!r}") from None
        except Urllib3Timeout:
            raise BindError(f"binding pod {namespace}/{name} to node {node}: no answer from the API server "
                            f"within {timeout:.2f} s, the time left before kube-scheduler's httpTimeout") from None
        except Exception as exc:  # unreachable server, ...
            raise BindError(f"binding pod {namespace}/{name} to node {node}: {exc}") from None


def binder_for(source) -> PostBinding | None:
    """The API binder for a live source; None in file mode (no API access)."""
    api_client = getattr(source, "api_client", None)
    return ApiBinder(api_client) if api_client is not None else None


def _failed(inflight: InFlight, ns: str, name: str, message: str) -> dict[str, str]:
    inflight.forget(ns, name)
    metrics.BINDINGS_TOTAL.labels("error").inc()
    metrics.count_error_answer("bind")
    return {"Error": message}


def refused(inflight: InFlight, args: BindingArgs, message: str) -> dict[str, str]:
    """An Error answer without a binding call (the state cannot vouch for anything)."""
    return _failed(inflight, args.pod_namespace, args.pod_name, message)


def bind(inflight: InFlight, post: PostBinding | None, args: BindingArgs, timeout: float) -> dict[str, str]:
    """`ExtenderBindingResult`: assume, call the API within `timeout` seconds (what is
    left of the request's deadline), forget on failure."""
    ns, name = args.pod_namespace, args.pod_name
    if post is None:
        return _failed(inflight, ns, name, ERR_NO_API)
    if timeout < MIN_BIND_SECONDS:
        log.warning("no time left to bind before kube-scheduler's httpTimeout",
                    extra={"pod": f"{ns}/{name}", "node": args.node})
        return _failed(inflight, ns, name, f"binding pod {ns}/{name}: the request waited past its deadline "
                       "(--request-deadline) before the binding call; not bound")
    assumed = inflight.assume(ns, name, args.pod_uid, args.node)
    try:
        post(ns, name, args.pod_uid, args.node, timeout)
    except BindError as exc:
        log.warning("binding failed", extra={"pod": f"{ns}/{name}", "node": args.node, "error": str(exc)})
        return _failed(inflight, ns, name, str(exc))
    inflight.bound(ns, name)
    metrics.BINDINGS_TOTAL.labels("success").inc()
    if not assumed:
        log.info("bound a pod without assuming it (no store, or a pod unknown here)",
                 extra={"pod": f"{ns}/{name}", "node": args.node})
    return {"Error": ""}
