"""The JSON ctxlm writes and prints: strict, so that any reader takes it."""
from __future__ import annotations

import json
import math
from typing import Any


def json_text(data: Any, **options) -> str:
    """json.dumps(data, **options), strict: NaN and ±∞ (an empty category, a probability 0) become null,
    so that every JSON reader (a browser's included) takes what ctxlm writes or prints."""
    def finite(value):
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(data), allow_nan=False, **options)
