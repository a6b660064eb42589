"""Text decoded as Go decodes it (a leaf module: the wire format and the file loaders
both use it)."""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def no_lone_surrogates(value: Any) -> Any:
    """Go's decoder turns an escaped lone surrogate (`"\\ud800"`, which orjson refuses
    and Python's json keeps) into U+FFFD; so do we, or the answer could not be encoded."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [no_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {no_lone_surrogates(k): no_lone_surrogates(v) for k, v in value.items()}
    return value
