"""Readable quantities: SI-prefixed times, binary-prefixed bytes, prefixed rates; natural order.

A time of ``4.983e-05 s`` reads ``49.83 µs``; ``1.966e+05 B`` reads ``192 KiB``; ``1.238e+05
samples/s`` reads ``123.8 k samples/s``; ``4.194e+06 FLOP`` reads ``4.194 MFLOP``. Every number
keeps four significant digits and none of them is rounded into a different value: only the unit
changes. A CI ``[low, high]`` is written in the unit chosen for its median, so the three numbers
of a cell compare at a glance. Units this module does not know are left as they are.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from typing import Any

TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
"""Time units the records use, in seconds."""
_TIME_STEPS: tuple[tuple[float, str], ...] = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_SI_STEPS: tuple[tuple[float, str], ...] = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
_BINARY_STEPS: tuple[tuple[float, str], ...] = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"),
                                                (2.0**10, "KiB"), (1.0, "B"))
_SI_PREFIX: dict[str, float] = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_RATE = re.compile(r"^(?P<prefix>[kMGT]?)(?P<base>B|FLOP)/s$")
_PLAIN_RATES = frozenset({"samples/s", "tokens/s", "steps/s", "images/s"})
_BYTE_UNITS = frozenset({"B", "bytes", "byte"})
_FLOP_UNITS = frozenset({"FLOP", "flop", "FLOPs"})


def number(v: float, digits: int = 4) -> str:
    """``v`` with ``digits`` significant digits, in positional notation between 1e-3 and 1e6."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    mag = abs(v)
    if 1e-3 <= mag < 1e6:
        decimals = max(0, digits - 1 - math.floor(math.log10(mag)))
        text = f"{v:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{v:.{digits}g}"


def scale(value: float, unit: str) -> tuple[float, str]:
    """(factor, unit) that makes ``value`` readable: ``value * factor`` is shown in ``unit``.

    Times go to s/ms/µs/ns, bytes to B/KiB/MiB/GiB/TiB, ``GB/s``-style rates and ``GFLOP/s`` to
    the SI prefix that puts the value in [1, 1000), ``FLOP`` and ``samples/s`` likewise.
    """
    u = (unit or "").strip()
    mag = abs(value) if value is not None and math.isfinite(value) else 0.0
    if mag == 0:
        return 1.0, u  # 0 GB/s, not 0 B/s
    if u in TIME_UNITS:
        seconds = TIME_UNITS[u]
        sec = mag * seconds
        for size, name in _TIME_STEPS:
            if sec >= size or size == 1e-9:
                return seconds / size, name
    if u in _BYTE_UNITS:
        for size, name in _BINARY_STEPS:
            if mag >= size or size == 1.0:
                return 1.0 / size, name
    m = _RATE.match(u)
    if m:
        base = _SI_PREFIX[m.group("prefix")]
        return _si(mag * base, base, f"{m.group('base')}/s", sep="")
    if u in _FLOP_UNITS:
        return _si(mag, 1.0, "FLOP", sep="")
    if u in _PLAIN_RATES:
        return _si(mag, 1.0, u, sep=" ")
    return 1.0, u


def _si(base_value: float, base: float, unit: str, sep: str) -> tuple[float, str]:
    for size, prefix in _SI_STEPS:
        if base_value >= size or size == 1.0:
            return base / size, (f"{prefix}{sep}{unit}" if prefix else unit)
    return base, unit  # pragma: no cover - the loop always returns


def quantity(value: Any, unit: str = "") -> str:
    """One value with its unit, e.g. ``49.83 µs``; text values pass through."""
    if value is None or isinstance(value, str):
        return "" if value is None else value
    v = float(value)
    if math.isnan(v):
        return ""
    factor, shown = scale(v, unit)
    return f"{number(v * factor)} {shown}".strip()


def quantity_ci(value: float, low: float | None, high: float | None, unit: str = "") -> str:
    """``49.83 [49.1, 50.2] µs``: the CI in the unit chosen for the median."""
    factor, shown = scale(value, unit)
    out = number(value * factor)
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        out += f" [{number(low * factor)}, {number(high * factor)}]"
    return f"{out} {shown}".strip()


def axis_scale(values: Sequence[float], unit: str) -> tuple[float, str]:
    """One (factor, unit) for a plot axis: the prefix of the median magnitude of ``values``."""
    finite = sorted(abs(float(v)) for v in values if v is not None and math.isfinite(float(v)) and v != 0)
    if not finite:
        return 1.0, unit
    return scale(finite[len(finite) // 2], unit)


def axis_label(name: str, unit: str) -> str:
    return f"{name} ({unit})" if unit else name


def bytes_tick(v: float) -> str:
    """A byte count as a short tick label: ``1 KiB``, ``256 MiB``."""
    factor, shown = scale(v, "B")
    return f"{number(v * factor, 3)} {shown}"


_DIGITS = re.compile(r"(\d+(?:\.\d+)?)")


def natural_key(value: Any) -> tuple[Any, ...]:
    """Sort key: numbers by value (64 < 128 < 256), text with embedded numbers naturally
    (``size64`` < ``size128``), missing values last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, ())
    try:
        if value != value:  # pd.NA raises TypeError on bool(); NaN-like objects compare unequal
            return (2, ())
    except TypeError:
        return (2, ())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return (0, (float(value),))
    parts = _DIGITS.split(str(value))
    return (1, tuple((0, float(p), "") if i % 2 else (1, 0.0, p.lower()) for i, p in enumerate(parts) if p))
