"""`kubectl extender`: ask the scheduling extender why a pod is Pending (kubectl_extender.cli).

A distribution of its own (`kubectl-extender`, plugin/pyproject.toml) with the standard
library only, so that it installs without the server's dependencies; the server's
distribution ships it too, and its text views (`render`) serve `extender explain`.
"""

__version__ = "0.1.0"
