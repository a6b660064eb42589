"""TokenReview and SubjectAccessReview for the API-server double (`api.reviews`): what
the extender's delegated authentication (`extender.server.auth`) asks the real API server.

``POST /apis/authentication.k8s.io/v1/tokenreviews`` answers from the tokens a test
registers (`token`); ``POST /apis/authorization.k8s.io/v1/subjectaccessreviews`` from its
grants (`grant`: a user or group, a verb, a resource, optionally a namespace and a name,
each "" or "*" for any), in the shapes kube-apiserver answers (status.authenticated /
status.user / status.error; status.allowed / status.reason). Every review is recorded
(`asked`), so tests can see what was asked and how often::

    api.reviews.token("t-alice", "alice", groups=["dev"])
    api.reviews.grant("alice", "get", "pods", namespace="team-a")
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

PATHS = {"/apis/authentication.k8s.io/v1/tokenreviews": "tokenreviews",
         "/apis/authorization.k8s.io/v1/subjectaccessreviews": "subjectaccessreviews"}


@dataclass(frozen=True)
class Grant:
    subject: str  # a user name, or "group:NAME"
    verb: str
    resource: str = ""  # or path=..., for a non-resource URL
    namespace: str = ""
    name: str = ""
    path: str = ""

    def allows(self, user: str, groups: list[str], spec: dict) -> bool:
        if self.subject.startswith("group:"):
            if self.subject.removeprefix("group:") not in groups:
                return False
        elif self.subject != user:
            return False
        attributes = spec.get("resourceAttributes")
        if attributes is None:
            other = spec.get("nonResourceAttributes") or {}
            return bool(self.path) and _any(self.path, other.get("path")) and _any(self.verb, other.get("verb"))
        return (not self.path and _any(self.verb, attributes.get("verb")) and
                _any(self.resource, attributes.get("resource")) and
                _any(self.namespace, attributes.get("namespace")) and _any(self.name, attributes.get("name")))


def _any(granted: str, asked: str | None) -> bool:
    return granted in ("", "*") or granted == (asked or "")


class Reviews:
    def __init__(self) -> None:
        self.users: dict[str, dict] = {}
        self.grants: list[Grant] = []
        self.asked: list[tuple[str, dict]] = []  # (kind, spec)
        self.lock = threading.Lock()

    def token(self, token: str, username: str, groups: list[str] | None = None, uid: str = "") -> None:
        self.users[token] = {"username": username, "uid": uid or f"uid-{username}",
                             "groups": [*(groups or []), "system:authenticated"]}

    def grant(self, subject: str, verb: str, resource: str = "", namespace: str = "", name: str = "",
              path: str = "") -> None:
        self.grants.append(Grant(subject, verb, resource, namespace, name, path))

    def count(self, kind: str) -> int:
        with self.lock:
            return sum(1 for k, _ in self.asked if k == kind)

    def answer(self, kind: str, spec: dict) -> dict:
        with self.lock:
            self.asked.append((kind, spec))
        if kind == "tokenreviews":
            user = self.users.get(spec.get("token") or "")
            if user is None:
                return {"authenticated": False, "user": {}, "error": "invalid bearer token"}
            return {"authenticated": True, "user": user, "audiences": ["https://kubernetes.default.svc"]}
        user, groups = spec.get("user") or "", spec.get("groups") or []
        for grant in self.grants:
            if grant.allows(user, groups, spec):
                return {"allowed": True, "reason": f"granted to {grant.subject}"}
        return {"allowed": False}
