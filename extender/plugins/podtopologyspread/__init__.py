"""PodTopologySpread (`pkg/scheduler/framework/plugins/podtopologyspread`), upstream-exact,
with KEP-3094's node inclusion policies answered by the extender's own matchers.

Split as upstream splits it: `common` (constraints, defaults, inclusion policies),
`filtering` (PreFilter counting + Filter), `scoring` (PreScore/Score/NormalizeScore),
plus `selector` (label selector semantics), `args` (PodTopologySpreadArgs) and `index`
(its view of a snapshot: the pod layer's counts per selector and domain).
"""

from extender.plugins.podtopologyspread.plugin import NAME, PodTopologySpread

__all__ = ["NAME", "PodTopologySpread"]
