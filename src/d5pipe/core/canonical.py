"""Canonical JSON and hashing: the same data gives the same bytes in any key order, on any machine."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


def normalise(obj: Any) -> Any:
    """The canonical form of ``obj`` (idempotent): normalise shared parts once, then hash many."""
    if isinstance(obj, dict):
        return {str(k): normalise(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [normalise(v) for v in obj]
    if isinstance(obj, float):
        if math.isfinite(obj) and obj.is_integer() and abs(obj) < 2**53:
            # 1.0 and 1 denote the same config value
            return int(obj)
        return obj
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    raise TypeError(f"value {obj!r} of type {type(obj).__name__} cannot be canonicalised")


def canonical_json(obj: Any, normalised: bool = False) -> str:
    """Sorted keys, no whitespace, integral floats as ints (``normalised``: ``obj`` already is)."""
    data = obj if normalised else normalise(obj)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def digest(obj: Any, length: int = 64, normalised: bool = False) -> str:
    """sha256 hex digest of the canonical JSON of ``obj`` (truncated to ``length`` hex chars)."""
    return hashlib.sha256(canonical_json(obj, normalised).encode("ascii")).hexdigest()[:length]
