"""The scheduler-extender wire format (`k8s.io/kube-scheduler/extender/v1`)."""

from extender.api.wire import (
    ExtenderArgs,
    WireError,
    decode_args,
    encode,
    filter_result,
    host_priority_list,
)

__all__ = ["ExtenderArgs", "WireError", "decode_args", "encode", "filter_result", "host_priority_list"]
