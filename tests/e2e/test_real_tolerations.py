"""Every toleration kind on the real control plane (tests/e2e/test_tolerations.py's
scenario), on both version pairs: the API server stores what it admits, the extender
reads it from there.

- v1.30.3 refuses `Gt`/`Lt` in `spec.tolerations` (`Unsupported value: "Gt"`), so there
  the numeric tolerations go in the annotation, as operators on v1.30 write them; the
  NoExecute one then no longer counts (only spec tolerations the kubelet understands do).
- v1.36.2 with `TaintTolerationComparisonOperators=true` stores them in spec (canonical
  int64 values only); the extender reads them from there.
- A toleration `expression` is not an API field of either version: the server drops it,
  leaving `{}`, which it refuses (`operator must be Exists when key is empty`), so that
  case exists on the double only (tests/e2e/test_pending_fields.py).
"""

from __future__ import annotations

import pytest

from testing.apiserver import ApiError
from testing.harness import PREFIX, pod
from tests.e2e import test_tolerations as scenario

NUMERIC = ("Gt", "Lt")


def cases_for(pair) -> dict[str, tuple[list, dict, str]]:
    """The double's cases as the pair's API server admits them."""
    out = {}
    for name, (tols, ann, want) in scenario.CASES.items():
        if any("expression" in t for t in tols):
            continue
        if not pair.spec_gt_lt and any(t.get("operator") in NUMERIC for t in tols):
            moved = [t for t in tols if t.get("operator") in NUMERIC]
            tols = [t for t in tols if t.get("operator") not in NUMERIC]
            ann = {**ann, f"{PREFIX}/tolerations": [*ann.get(f"{PREFIX}/tolerations", []), *moved]}
            if any(t.get("effect") == "NoExecute" for t in moved):
                want = ""  # an annotation toleration never counts for NoExecute
        out[name] = (tols, ann, want)
    return out


def test_every_toleration_kind_on_the_real_api_server(start_real_cluster, pair):
    cluster = scenario.every_kind_lands_where_tolerated(start_real_cluster, cases_for(pair))
    if pair.spec_gt_lt:  # where the extender read them: the API server's spec
        stored = cluster.api.get("pods", "gt-900", "default")
        assert stored["spec"]["tolerations"][0] == {"key": scenario.SLA, "operator": "Gt", "value": "900",
                                                    "effect": "NoSchedule"}
        assert not stored["metadata"].get("annotations")


def test_the_api_server_admits_gt_in_spec_only_with_the_gate(start_real_cluster, pair):
    gt = {"key": scenario.SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}
    api = start_real_cluster([]).api
    if pair.spec_gt_lt:
        stored = api.create("pods", pod("gt-in-spec", tolerations=[gt]))
        assert stored["spec"]["tolerations"][0] == gt
        with pytest.raises(ApiError) as refused:
            api.create("pods", pod("gt-leading-zero", tolerations=[{**gt, "value": "0750"}]))
        assert 'Invalid value: "0750": must be a valid decimal integer in canonical form' in str(refused.value)
    else:
        with pytest.raises(ApiError) as refused:
            api.create("pods", pod("gt-in-spec", tolerations=[gt]))
        assert refused.value.code == 422
        assert 'spec.tolerations[0].operator: Unsupported value: "Gt": supported values: "Equal", "Exists"' \
            in str(refused.value)
