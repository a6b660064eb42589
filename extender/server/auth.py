"""Who may use the side listener's protected routes (`/explain`, and what else reads the
cluster through it): delegated authentication and authorization, as kube-scheduler's
own secure port does it: the routes read the cluster, so they answer only whom
the cluster's own authorization allows.

* **Authentication**: a bearer token, checked with a TokenReview. It comes in
  `Authorization: Bearer TOKEN`, or, through the API server's service proxy (which
  removes `Authorization` once it has authenticated the caller itself), in
  `X-Extender-Authorization: Bearer TOKEN` (`kubectl extender` sends both).
* **Authorization**: a SubjectAccessReview of the user the TokenReview names, for what
  the route reveals (`Access`): `/explain/NAMESPACE/POD` asks `get` on that pod,
  `POST /explain` `list` on pods in the posted pod's namespace. A user sees
  explanations of the pods they may read, nothing more.

Both reviews go to the API server with the extender's service account, through the
`system:auth-delegator` ClusterRole the manifests bind. Answers are cached for
`CACHE_SECONDS` (as kube-apiserver's webhook authenticator and authorizer cache theirs),
by a hash of the token, at most `CACHE_ENTRIES`. A request without a token is refused
(401) before anything is asked.

**Review budgets per caller** (`ReviewBudgets`; past one: 429 with Retry-After). One
budget for everybody let a flood of unknown tokens refuse an honest user's `/explain`
(7 of 9 tries). Now each caller has its own, `REVIEWS_PER_SECOND` (burst
`REVIEW_BURST`): a token never seen is reviewed on its client address's budget (an
IPv6 address's /64), a token once accepted (when its cached user expires) on its
user's budget, as is every SubjectAccessReview. So unknown tokens cannot take a known
user's reviews, nor those of a new user at another address; the API server is asked
at most `REVIEWS_PER_SECOND` reviews a second per address for unknown tokens. (No
budget shared by every address: it would let a flood from a few addresses refuse
every new token again.)

**No review for nobody.** Before every review the request's client must still be there
and its deadline (`--request-deadline`, from its arrival) not passed (503 otherwise);
the review gets at most what is left of it as its timeout.

Without an API server (file mode: demos and tests) there is nobody to ask: the
protected routes answer loopback clients only (`LoopbackOnly`).

Use: `guard.check(header, client, access)` for any route (`header(name)` reads a request
header, `client` is the peer's address), or, on a Flask route of the side listener,
the `protected(access)` decorator; both raise `AuthError` (401, 403, 429, 503).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from extender.caching import ByteLRU
from extender.ratelimit import Buckets
from extender.request import deadline
from extender.state import ClusterSource

log = logging.getLogger("extender.auth")

TOKEN_HEADERS = ("Authorization", "X-Extender-Authorization")
CACHE_SECONDS = 10.0
CACHE_ENTRIES = 4096
REVIEWS_PER_SECOND, REVIEW_BURST = 10.0, 20  # per caller: client address, or user
CALLERS = 4096  # budgets kept (least recently used dropped: a new budget is full)
API_TIMEOUT = (3.0, 5.0)  # (connect, read) seconds of one review
FLASK_KEY = "extender.auth"  # where a Flask app of the side listener keeps its guard


class AuthError(Exception):
    """The request may not be served: its HTTP status, a message, extra headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


@dataclass(frozen=True)
class Access:
    """What a request would be told about, as a SubjectAccessReview names it: a verb on
    a resource (in a namespace, by name), or on a non-resource `path`."""

    verb: str
    resource: str = ""
    namespace: str = ""
    name: str = ""
    group: str = ""
    path: str = ""

    def review_spec(self) -> dict[str, Any]:
        if self.path:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        attributes = {"verb": self.verb, "group": self.group, "resource": self.resource,
                      "namespace": self.namespace, "name": self.name}
        return {"resourceAttributes": {k: v for k, v in attributes.items() if v}}

    def __str__(self) -> str:
        if self.path:
            return f"{self.verb} {self.path}"
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.resource}{'/' + self.name if self.name else ''}{where}"


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())


def bearer_token(header: Callable[[str], str]) -> str:
    """The bearer token of a request ("" without one)."""
    for name in TOKEN_HEADERS:
        scheme, _, token = header(name).strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return ""


def _unauthenticated(message: str) -> AuthError:
    return AuthError(401, message, {"WWW-Authenticate": 'Bearer realm="scheduling-extender"'})


def caller_address(client: str) -> str:
    """The budget key of a client address: IPv4 as it is, IPv6 by its /64 (one host
    holds a whole /64)."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client
    mapped = getattr(address, "ipv4_mapped", None)
    if address.version == 6 and mapped is None:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(mapped or address)


class ReviewBudgets:
    """The review budgets by caller: ("address", a) for tokens never seen, ("user",
    name) for the others and for access reviews (see the module docstring)."""

    def __init__(self, rate: float = REVIEWS_PER_SECOND, burst: int = REVIEW_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.callers = Buckets(rate, burst, CALLERS, clock)

    def take(self, caller: tuple[str, str]) -> float:
        """A review for `caller`: 0.0 if its budget has one, else the seconds until it will."""
        return self.callers.try_take(caller)

    def take_unknown(self, client: str) -> float:
        """A review of a token never seen, from `client`."""
        return self.take(("address", caller_address(client)))


class Delegated:
    """TokenReview + SubjectAccessReview against the API server of `api_client` (see the
    module docstring). `reviewer`: (kind, body) -> the review's answer, for tests."""

    def __init__(self, api_client: Any, reviewer: Callable[[str, dict], dict] | None = None) -> None:
        self.api_client = api_client
        self.review = reviewer or self._post_review
        self.budgets = ReviewBudgets()
        # token -> user, (user, access) -> allowed: each kept CACHE_SECONDS from its review
        self._users = ByteLRU.counted("auth-users", CACHE_ENTRIES)
        self._decisions = ByteLRU.counted("auth-decisions", CACHE_ENTRIES)
        # token -> the name of the user it was once accepted as (never expires: whose
        # budget its next review is charged to)
        self._known = ByteLRU.counted("auth-known", CACHE_ENTRIES)

    def check(self, header: Callable[[str], str], client: str, access: Access) -> User:
        """The request's user, allowed `access`; AuthError otherwise."""
        user = self.authenticate(header, client)
        self.authorize(user, access)
        return user

    def authenticate(self, header: Callable[[str], str], client: str) -> User:
        token = bearer_token(header)
        if not token:
            raise _unauthenticated("a bearer token is required (Authorization, or X-Extender-Authorization "
                                   "through the API server's proxy)")
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        cached = self._cached(self._users, key)
        if cached is None:
            known = self._known.get(key)
            wait = self.budgets.take(("user", known)) if known is not None else self.budgets.take_unknown(client)
            if wait:
                raise AuthError(429, "too many reviews for this caller: retry",
                                {"Retry-After": str(max(1, math.ceil(wait)))})
            cached = self._token_review(token)
            self._store(self._users, key, cached)
            if isinstance(cached, User):
                self._known.put(key, cached.name)
        if isinstance(cached, str):
            raise _unauthenticated(f"the token was not accepted: {cached}")
        return cached

    def authorize(self, user: User, access: Access) -> None:
        key = (user, access)
        allowed = self._cached(self._decisions, key)
        if allowed is None:
            wait = self.budgets.take(("user", user.name))
            if wait:
                raise AuthError(429, f'too many reviews for user "{user.name}": retry',
                                {"Retry-After": str(max(1, math.ceil(wait)))})
            allowed = self._access_review(user, access)
            self._store(self._decisions, key, allowed)
        if allowed is not True:
            log.warning("request refused", extra={"user": user.name, "access": str(access), "reason": allowed})
            raise AuthError(403, f'user "{user.name}" may not {access}' + (f": {allowed}" if allowed else ""))

    # --- the reviews ------------------------------------------------------------------

    @staticmethod
    def _cached(cache: ByteLRU, key: Any) -> Any:
        held = cache.get(key)  # (expires at, value)
        return None if held is None or held[0] <= time.monotonic() else held[1]

    @staticmethod
    def _store(cache: ByteLRU, key: Any, value: Any) -> None:
        cache.put(key, (time.monotonic() + CACHE_SECONDS, value))

    def _ask(self, kind: str, spec: dict) -> dict:
        """The review's status, asked only for a client still there within its deadline."""
        if deadline.client_gone():
            raise AuthError(503, "the client has gone", {"Retry-After": "1"})
        left = deadline.remaining()
        if left is not None and left <= 0:
            raise AuthError(503, "the request deadline passed before the API server could be asked: retry",
                            {"Retry-After": "1"})
        try:
            return self.review(kind, spec)
        except AuthError:
            raise
        except Exception as exc:  # unreachable API server, timeout, an unreadable answer
            log.warning("review failed", extra={"kind": kind, "error": str(exc)})
            raise AuthError(503, f"cannot check the request with the API server: {exc}",
                            {"Retry-After": "1"}) from None

    def _token_review(self, token: str) -> User | str:
        """The token's user, or why it is not accepted."""
        status = self._ask("tokenreviews", {"token": token})
        if not status.get("authenticated"):
            return str(status.get("error") or "not authenticated")
        user = status.get("user") or {}
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.get("extra") or {}).items()))
        return User(str(user.get("username") or ""), str(user.get("uid") or ""),
                    tuple(user.get("groups") or ()), extra)

    def _access_review(self, user: User, access: Access) -> bool | str:
        """True, or why not ("" when the authorizer gave no reason)."""
        spec = {"user": user.name, "groups": list(user.groups), **access.review_spec()}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        status = self._ask("subjectaccessreviews", spec)
        return True if status.get("allowed") and not status.get("denied") else str(status.get("reason") or "")

    def _post_review(self, kind: str, spec: dict) -> dict:
        """POST a review to the API server; its `status`."""
        group = "authentication.k8s.io" if kind == "tokenreviews" else "authorization.k8s.io"
        body = {"apiVersion": f"{group}/v1", "kind": "TokenReview" if kind == "tokenreviews"
                else "SubjectAccessReview", "spec": spec}
        request = self.api_client.param_serialize("POST", f"/apis/{group}/v1/{kind}", body=body,
                                                  header_params={"Content-Type": "application/json",
                                                                 "Accept": "application/json"},
                                                  auth_settings=["BearerToken"])
        left = deadline.remaining()  # the request's deadline bounds the review's
        timeout = API_TIMEOUT if left is None else (min(API_TIMEOUT[0], left), min(API_TIMEOUT[1], left))
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        import orjson

        data = orjson.loads(response.read())
        if response.status >= 300:
            raise RuntimeError(f"{response.status} {data.get('message', '') if isinstance(data, dict) else ''}")
        return data.get("status") or {}


class LoopbackOnly:
    """No API server to ask (file mode): loopback clients only."""

    def check(self, header: Callable[[str], str], client: str, access: Access) -> User:  # noqa: ARG002
        return self.authenticate(header, client)

    def authenticate(self, header: Callable[[str], str], client: str) -> User:  # noqa: ARG002
        if not is_loopback(client):
            raise AuthError(403, "no API server to authenticate against (file mode): "
                            "this endpoint answers loopback clients only")
        return User("system:loopback")

    def authorize(self, user: User, access: Access) -> None:
        pass


def is_loopback(client: str) -> bool:
    if client == "local":  # a socketpair (tests)
        return True
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


Guard = Delegated | LoopbackOnly


def guard_for(source: ClusterSource) -> Guard:
    """The guard of an engine's cluster source: delegated to its API server, if any."""
    api_client = source.api_client
    return Delegated(api_client) if api_client is not None else LoopbackOnly()


# --- Flask routes of the side listener ----------------------------------------------

def _flask_request() -> tuple[Guard, Callable[[str], str], str]:
    import flask

    guard = flask.current_app.extensions[FLASK_KEY]
    return guard, lambda name: flask.request.headers.get(name, ""), flask.request.remote_addr or ""


def authenticated() -> User:
    """The current Flask request's user (AuthError: none)."""
    guard, header, client = _flask_request()
    return guard.authenticate(header, client)


def authorized(user: User, access: Access) -> None:
    """AuthError unless `user` may have `access` (the current Flask app's guard)."""
    _flask_request()[0].authorize(user, access)


def protected(access: Callable[..., Access]):
    """Decorate a Flask view: its request must come from a user allowed `access(**view
    arguments)`. The app keeps its guard in `app.extensions[FLASK_KEY]`."""
    def decorate(view):
        @functools.wraps(view)
        def guarded(**kwargs):
            authorized(authenticated(), access(**kwargs))
            return view(**kwargs)

        return guarded

    return decorate
