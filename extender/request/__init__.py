"""One request's context, at the bottom floor: when it arrived, its deadline, whether
its client is still there (deadline.py), and the lane its CEL work may run in with that
lane's per-request cost allowance (lane.py).

The server sets them around one answer; the engine, the CEL runtime, the webhook and
validation read them. Each lives in a ``ContextVar``, so every request (one thread, or
one task of an event loop) sees its own. Nothing here imports the CEL language, the
server, the engine or the cluster state.
"""
