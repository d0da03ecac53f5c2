"""Readable quantities: SI-prefixed times, binary-prefixed bytes, prefixed rates; natural order.

A time of ``4.983e-05 s`` reads ``49.83 µs``; ``1.966e+05 B`` reads ``192 KiB``; ``1.238e+05
samples/s`` reads ``123.8 k samples/s``; ``4.194e+06 FLOP`` reads ``4.194 MFLOP``. Every number
keeps four significant digits and none of them is rounded into a different value: only the unit
changes. A CI ``[low, high]`` is written in the unit chosen for its median, so the three numbers
of a cell compare at a glance. Units this module does not know are left as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from natsort import natsort_keygen, ns

TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
"""Time units the records use, in seconds."""
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
    if u in TIME_UNITS:  # s, ms, µs or ns
        factor, prefix = _eng(mag * TIME_UNITS[u], -9, 0)
        return TIME_UNITS[u] * factor, f"{prefix}s"
    if u in _BYTE_UNITS:
        for size, name in _BINARY_STEPS:
            if mag >= size or size == 1.0:
                return 1.0 / size, name
    m = _RATE.match(u)
    if m:
        base = _SI_PREFIX[m.group("prefix")]
        factor, prefix = _eng(mag * base, 0, 12)
        return base * factor, f"{prefix}{m.group('base')}/s"
    if u in _FLOP_UNITS:
        factor, prefix = _eng(mag, 0, 12)
        return factor, f"{prefix}FLOP"
    if u in _PLAIN_RATES:
        factor, prefix = _eng(mag, 0, 12)
        return factor, f"{prefix} {u}" if prefix else u
    return 1.0, u


def _eng(value: float, lowest: int, highest: int) -> tuple[float, str]:
    """(10^-k, prefix): ``k`` the engineering exponent of ``value`` (a multiple of 3) kept within
    [lowest, highest], its prefix matplotlib's ``EngFormatter`` one (``µ``, ``k``, ``G``)."""
    from matplotlib.ticker import EngFormatter

    k = min(highest, max(lowest, 3 * math.floor(math.log10(value) / 3)))
    return 10.0 ** -k, EngFormatter.ENG_PREFIXES[k]


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


_NATURAL = natsort_keygen(alg=ns.FLOAT | ns.IGNORECASE)


def natural_key(value: Any) -> tuple[Any, ...]:
    """Sort key: numbers by value (64 < 128 < 256), text with embedded numbers naturally
    (``size64`` < ``size128``, ``node2`` < ``node10``), missing values (None, NaN, pd.NA) last."""
    try:
        missing = value is None or bool(value != value)
    except TypeError:  # pd.NA
        missing = True
    return (1, ()) if missing else (0, _NATURAL(value))
