"""`perf.tiebreak` through the real kube-scheduler (skipped, with the reason, without
`$KUBE_SCHEDULER_BINARY`): every pod binds in every mode, slim answers included, whose
prioritize answers list no host at all when every host ties."""

from __future__ import annotations

import pytest

from perf.tiebreak import MODES, placements
from testing.harness import require_binary


@pytest.mark.parametrize("mode", MODES)
def test_every_pod_binds_when_every_total_ties(mode):
    got = placements(require_binary(), mode, 6)
    assert sum(got.values()) == 6 and set(got) <= {"n0", "n1", "n2", "n3"}
