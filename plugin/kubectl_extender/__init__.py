"""`kubectl extender`: ask the scheduling extender why a pod is Pending (kubectl_extender.cli).

The only distribution of this package (`kubectl-extender`, plugin/pyproject.toml), with
the standard library only, so that it installs without the server's dependencies. The
server's distribution (`scheduling-extender`) depends on it: `extender explain --output
table` and `extender whatif` use its text views and change flags; `extender serve` never
imports it.
"""

__version__ = "0.1.0"
