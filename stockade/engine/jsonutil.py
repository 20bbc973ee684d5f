"""JSON helpers that reproduce Go's encoding, since rendered values end up in messages users compare."""

from __future__ import annotations

import json
from typing import Any


def _normalise(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def go_json(value: Any) -> str:
    """Compact JSON the way Go's ``json.Marshal`` prints it (sorted keys, integral floats as ints, HTML escaped)."""
    text = json.dumps(_normalise(value), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_string(value: Any) -> str:
    """A value as Go code would interpolate it into a message: strings raw, everything else as JSON."""
    if isinstance(value, str):
        return value
    return go_json(value)
