"""extender: an out-of-tree kube-scheduler extender with upstream-exact semantics."""

__version__ = "0.1.0"
