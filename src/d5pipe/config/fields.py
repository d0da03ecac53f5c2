"""Declared constraints on schema fields, read by d5pipe.config.validate.

A schema dataclass declares what a value may be next to its default::

    dtype: str = choice("float32", DTYPES)          # one of DTYPES
    ranks: int = at_least(1, 1)                      # >= 1
    budget_s: float = positive(2.0)                  # > 0
    test_fraction: float = between(0.25, 0.0, 1.0)   # 0 < x < 1
    hidden: list[int] = items_at_least([64], 1)      # every element >= 1

OmegaConf checks types at compose time; :func:`d5pipe.config.validate.check_config` checks these
constraints for the composed config and for every distinct sweep value, before any job starts.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import field
from typing import Any


def _field(default: Any, **meta: Any) -> Any:
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: copy.deepcopy(value), metadata=meta)
    return field(default=default, metadata=meta)


def choice(default: Any, choices: Sequence[str]) -> Any:
    """A value from ``choices`` (null allowed only when the field is Optional and default None)."""
    return _field(default, choices=tuple(choices))


def at_least(default: Any, minimum: float) -> Any:
    """A number >= ``minimum``."""
    return _field(default, min=minimum)


def positive(default: Any) -> Any:
    """A number > 0."""
    return _field(default, gt=0)


def between(default: Any, low: float, high: float, *, closed_high: bool = False) -> Any:
    """``low < x < high`` (``x <= high`` with ``closed_high``)."""
    return _field(default, gt=low, **({"max": high} if closed_high else {"lt": high}))


def items_at_least(default: list[Any], minimum: float) -> Any:
    """A list whose every element is >= ``minimum``."""
    return _field(default, item_min=minimum)
