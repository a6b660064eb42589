"""Hard limits for CEL toleration expressions (KEP-5500, spec cel.md §1.4/§1.6, semantics §0.7).

All numbers the validator, the cost model and the runtime share live here so that the
admission-style check and the runtime guard can never disagree.
"""

from __future__ import annotations

#: KEP-5500 ``CELTolerationExpressionMaxLength`` (10 KiB, measured in UTF-8 bytes).
MAX_EXPRESSION_BYTES = 10 * 1024

#: KEP-5500 ``CELTolerationExpressionMaxCost`` = apiserver ``PerCallLimit``; used both as the
#: static estimate limit and as the runtime budget.
MAX_COST = 1_000_000

#: Declared maximum sizes of the taint fields used by the cost estimator.  KEP-5500 gives no
#: numbers; these follow node-taint validation: key = qualified name (253-char DNS subdomain
#: prefix + "/" + 63-char name), value = label value, effect = longest enum value.
TAINT_KEY_MAX = 317
TAINT_VALUE_MAX = 63
TAINT_EFFECT_MAX = 16

#: Maximum nesting depth of the expression tree (calls, operators, literals, macros,
#: parentheses): cel-go's parser recursion limit.  Evaluation of a tree this deep needs
#: more Python frames than the default recursion limit; ``extender.cel.environment``
#: raises it (``RECURSION_LIMIT``).
MAX_NESTING_DEPTH = 250

#: Programs estimated at ``extender.request.lane.EXPENSIVE_COST`` units or more (long
#: enough, at the evaluator's slowest rate in perf/PERFORMANCE.md, to keep other threads
#: waiting for the GIL) are "expensive": at most ``EXPENSIVE_SLOTS`` of their
#: evaluations run at once per process, the others wait (within their request's deadline).
#: Cheap programs never wait.  With the GIL, eight concurrent expensive evaluations would
#: each get an eighth of a core and make every other thread (health probes, cheap pods)
#: queue behind them for the GIL; one at a time gives the same throughput and leaves the
#: rest of the server responsive.
EXPENSIVE_SLOTS = 1

#: Compiles that run at once per process (the compile lane); others wait for a slot
#: within their request's deadline.  A compile is bounded (length and nesting limits:
#: at most ~0.5 s for the deepest expression allowed), but a burst of distinct hostile
#: expressions must not take every thread: honest pods whose expression is compiled
#: already never wait for this.
COMPILE_SLOTS = 2

#: Error messages in CelOutcome / compile_error are truncated to this many characters.
MAX_MESSAGE_CHARS = 300
