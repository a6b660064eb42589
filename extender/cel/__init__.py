"""CEL toleration expressions (KEP-5500): cel-go v0.26 with Kubernetes' environment, in Python.

cel-python's lark grammar parses; everything after (checker, cost estimator, planner,
evaluator, libraries) is this package's own port of cel-go's rules.

Public API::

    from extender.cel import CelCache, CelOutcome, MAX_EXPRESSION_BYTES, MAX_COST

    cache = CelCache()                          # one per process, shared by all plugins
    cache.compile_error("taint.key > 5")        # admission-style validation -> str | None
    cache.evaluate(expr, taint)                 # CelOutcome(matched, kind, message)

See ``extender/cel/README`` in the module docstrings: ``environment`` (parsing, recursion
limit), ``ast`` (the IR, macro expansion), ``check`` (static validation), ``cost``
(estimate + runtime charges), ``plan`` / ``runtime`` / ``folds`` (evaluator), ``program``
(compile + evaluate), ``cache`` (shared cache and memo), ``lib`` (the libraries).
"""

from extender.cel.cache import CelCache, CelOutcome
from extender.cel.limits import MAX_COST, MAX_EXPRESSION_BYTES

__all__ = ["MAX_COST", "MAX_EXPRESSION_BYTES", "CelCache", "CelOutcome"]
