"""The short real-control-plane checks `make test` runs on both version pairs, beside
test_real_tolerations.py, test_real_webhook.py and the v1.36 differential's slice:

- what kube-scheduler's own TaintToleration says in FailedScheduling, per version, and
  what the extender says (v1.36's text on both: tests below pin the difference);
- kube-scheduler's secure port, as the Deployment runs it, authenticates and authorizes
  a scrape through the API server with the pod's identity: the shipped
  `system:auth-delegator` and `extension-apiserver-authentication-reader` bindings, used.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

from testing.harness import filter_part, node, pod, wait_for
from testing.realcluster import IDENTITY_KINDS, install, rendered

SLA = "example.com/sla"
NODES = [node("sla-800", taints=[{"key": SLA, "value": "800", "effect": "NoSchedule"}]),
         node("sla-500", taints=[{"key": SLA, "value": "500", "effect": "NoSchedule"}])]
# kube-scheduler's in-tree TaintToleration, as v1.30.6 and v1.36.2 word a pod no node tolerates
IN_TREE = {
    "v1.30": f"0/2 nodes are available: 1 node(s) had untolerated taint {{{SLA}: 500}}, "
             f"1 node(s) had untolerated taint {{{SLA}: 800}}.",
    "v1.36": "0/2 nodes are available: 2 node(s) had untolerated taint(s).",
}


def unschedulable_message(cluster) -> str:
    p = pod("untolerated")
    cluster.create(p)
    outcome = cluster.wait_settled([p])
    return filter_part(outcome.unschedulable[("default", "untolerated")])


def test_failed_scheduling_text_by_version_and_the_extenders(start_real_cluster, pair):
    in_tree = start_real_cluster(NODES, in_tree=True)
    assert unschedulable_message(in_tree) == IN_TREE[pair.name]
    in_tree.stop()
    extended = start_real_cluster(NODES)
    assert unschedulable_message(extended) == IN_TREE["v1.36"]  # the extender words it as v1.36 does


def scrape(port: int, token: str | None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # its self-signed certificate
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_the_scheduler_checks_scrapes_with_the_shipped_delegation(start_real_cluster, control_plane):
    identity = [f"{d['kind']}/{d['metadata']['name']}" for kind in IDENTITY_KINDS
                for d in rendered() if d["kind"] == kind]
    assert install(control_plane) == identity  # idempotent, as `kubectl apply` again
    cluster = start_real_cluster(NODES)
    status, text = wait_for(lambda: (r := scrape(cluster.scheduler_port, control_plane.admin_token))[0] == 200
                            and r, timeout=60) or scrape(cluster.scheduler_port, control_plane.admin_token)
    assert status == 200, text
    assert "leader_election_master_status" in text
    status, text = scrape(cluster.scheduler_port, None)
    assert status == 403 and 'system:anonymous' in text, (status, text)
