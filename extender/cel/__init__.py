"""CEL toleration expressions (KEP-5500) on cel-python.

Public API::

    from extender.cel import CelCache, CelOutcome, MAX_EXPRESSION_BYTES, MAX_COST

    cache = CelCache()                          # one per process, shared by all plugins
    cache.compile_error("taint.key > 5")        # admission-style validation -> str | None
    cache.evaluate(expr, taint)                 # CelOutcome(matched, kind, message)

See ``extender/cel/README`` in the module docstrings: ``environment`` (parsing, recursion
limit), ``check`` (static validation), ``cost`` (estimate + runtime charges), ``runtime``
(evaluator), ``cache`` (shared cache and memo), ``lib`` (the libraries).
"""

from extender.cel.cache import CelCache, CelOutcome
from extender.cel.limits import MAX_COST, MAX_EXPRESSION_BYTES

__all__ = ["MAX_COST", "MAX_EXPRESSION_BYTES", "CelCache", "CelOutcome"]
