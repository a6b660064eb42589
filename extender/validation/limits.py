"""Per-pod limits: the KEPs' own limits plus the extender's, in one place.

The KEP limits bound one expression; these bound a whole pod, so that no pod can make a
scheduling request cost more than a few milliseconds per distinct taint. They are
applied identically by `/filter` (every node UnschedulableAndUnresolvable), `extender
explain`, the admission webhook and `extender validate`.
"""

from __future__ import annotations

from extender.cel.limits import MAX_COST, MAX_EXPRESSION_BYTES

#: Tolerations per pod, `spec.tolerations` and the tolerations annotation together.
#: Kubernetes itself has no limit; DaemonSet pods carry about 7.
MAX_TOLERATIONS_PER_POD = 256

#: CEL toleration expressions per pod (spec and annotation together).
MAX_EXPRESSIONS_PER_POD = 16

#: Bytes (UTF-8) of one `tolerations` or `node-affinity` annotation. Checked before the
#: JSON is parsed. Kubernetes allows 256 KiB for all of a pod's annotations together.
MAX_ANNOTATION_BYTES = 64 * 1024

#: An expression whose estimated cost is at least this share of MAX_COST gets a warning.
COST_WARNING_RATIO = 0.8

#: The admission rule for CEL expressions that cannot be answered in time.
#: A first /filter of a pod evaluates each CEL toleration once per distinct taint of the
#: cluster (the memo answers the rest).  We claim clusters of 5,000 nodes; the generated
#: 5,000-node fleet of `perf/generate.py` has 78 distinct taints, so admission assumes 100.
#: Units are cel-go's.  The rule assumes 400,000 units a second, just under the
#: evaluator's slowest class (`perf/cel_bench.py`'s at-limit set: url() parsing of
#: distinct strings; its rate and the others' are in perf/PERFORMANCE.md), so
#: cost / 400,000 s bounds one evaluation's CPU time (docs/reference/cel.md, "Admission").
ASSUMED_DISTINCT_TAINTS = 100
ASSUMED_UNITS_PER_SECOND = 400_000

__all__ = [
    "ASSUMED_DISTINCT_TAINTS",
    "ASSUMED_UNITS_PER_SECOND",
    "COST_WARNING_RATIO",
    "MAX_ANNOTATION_BYTES",
    "MAX_COST",
    "MAX_EXPRESSIONS_PER_POD",
    "MAX_EXPRESSION_BYTES",
    "MAX_TOLERATIONS_PER_POD",
]
