"""Energy of timed work, where the machine lets a process read it; otherwise why not.

Sources, probed once per process (:func:`meter`):

* **RAPL through powercap** (CPU): each zone ``/sys/class/powercap/intel-rapl:N`` (a package) and
  its subzones (``core``, ``uncore``, ``dram``) count micro-joules in ``energy_uj``, wrapping at
  ``max_energy_range_uj``. A package's count includes its ``core`` and ``uncore`` subzones but
  not ``dram``, so the total is the packages plus the DRAM zones. The counters cover the whole
  socket: other processes' work on it is in them too (recorded as the method's caveat). Since
  Linux 5.10 ``energy_uj`` is readable by root only; a counter that cannot be read is a reason.
* **NVML** (NVIDIA GPUs, Volta and later): ``nvmlDeviceGetTotalEnergyConsumption`` (milli-joules
  since the driver loaded) of the device in use, through ``pynvml`` where it is installed.

A :class:`Meter` is read before and after each timed block (:meth:`Meter.read`; the timer in
d5pipe.measure.timer does this), so the energy of waits between blocks (another process's turn
in ``d5pipe ab``) is not counted. Where nothing is readable, :class:`Unavailable` says why, and
the report says "energy: unavailable (<why>)" rather than nothing.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d5pipe.core.outcome import Declared, Metric

POWERCAP = Path("/sys/class/powercap")
POWERCAP_ENV = "D5PIPE_POWERCAP"
"""Where the powercap tree is when not at :data:`POWERCAP` (a container that mounts the host's
elsewhere; the tests' fake tree, which level 3's rank processes inherit through the environment)."""
RAPL_METHOD = "RAPL (Linux powercap energy_uj)"
RAPL_CAVEAT = "whole-socket counters: other processes' work on the socket is included"
NVML_METHOD = "NVML nvmlDeviceGetTotalEnergyConsumption"


@dataclass(frozen=True)
class Counter:
    """One energy counter: a name (``package-0``, ``package-0/dram``), where to read it, how it counts."""

    name: str
    path: Path
    wrap: int
    """The value after which the counter starts again from 0 (in its own unit)."""
    scale: float
    """Joules per unit (1e-6 for powercap's micro-joules)."""
    total: bool
    """Whether it adds to the total (packages and DRAM; not a package's core/uncore subzones)."""


@dataclass
class Unavailable:
    """No energy counter this process can read, and why."""

    reason: str

    def describe(self) -> dict[str, Any]:
        return {"available": False, "reason": self.reason}


@dataclass
class Meter:
    """Counters read together (:meth:`read`); energy between two readings by :meth:`joules`."""

    method: str
    counters: list[Counter]
    caveat: str = ""
    reader: Any = None
    """For NVML: a callable returning the device's milli-joules (powercap counters are files)."""

    def read(self) -> list[int]:
        if self.reader is not None:
            return [int(self.reader())]
        return [_read_int(c.path) for c in self.counters]

    def joules(self, before: list[int], after: list[int]) -> dict[str, float]:
        """Joules per counter between two readings, one wrap of a counter allowed for."""
        out: dict[str, float] = {}
        for c, a, b in zip(self.counters, before, after, strict=True):
            delta = b - a if b >= a else b + c.wrap - a
            out[c.name] = delta * c.scale
        return out

    def total(self, joules: dict[str, float]) -> float:
        """Packages plus DRAM (a package's count already holds its core and uncore)."""
        return sum(joules[c.name] for c in self.counters if c.total and c.name in joules)

    def describe(self) -> dict[str, Any]:
        return {"available": True, "method": self.method, "counters": [c.name for c in self.counters],
                **({"caveat": self.caveat} if self.caveat else {})}


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def _zone_name(zone: Path) -> str:
    """A powercap zone's ``name`` file (its directory name where it has none)."""
    return (zone / "name").read_text().strip() if (zone / "name").exists() else zone.name


def rapl(root: Path | None = None) -> Meter | Unavailable:
    """The RAPL zones under ``root`` (a powercap tree; default ``$D5PIPE_POWERCAP`` or
    :data:`POWERCAP`), or why there are none to read."""
    if root is None:
        root = Path(os.environ.get(POWERCAP_ENV) or POWERCAP)
    if not root.is_dir():
        return Unavailable(f"no RAPL: {root} does not exist (no powercap driver, or not Linux)")
    zones = sorted(p for p in root.glob("intel-rapl:*") if (p / "energy_uj").exists())
    if not zones:
        return Unavailable(f"no RAPL: {root} has no intel-rapl zone with an energy_uj counter")
    counters: list[Counter] = []
    for zone in zones:
        parts = zone.name.split(":")
        name = _zone_name(zone)
        if len(parts) > 2:  # a subzone: intel-rapl:N:M, named after its package
            name, total = f"{_zone_name(root / ':'.join(parts[:2]))}/{name}", name == "dram"
        else:
            total = True
        counters.append(Counter(name, zone / "energy_uj", _read_int(zone / "max_energy_range_uj"), 1e-6, total))
    unreadable = [c.name for c in counters if not os.access(c.path, os.R_OK)]
    if unreadable:
        return Unavailable(f"RAPL counters not readable by this user ({', '.join(unreadable)}): energy_uj "
                           "is root-only since Linux 5.10; run as root or grant read access")
    try:
        meter = Meter(RAPL_METHOD, counters, RAPL_CAVEAT)
        meter.read()
    except (OSError, ValueError) as exc:
        return Unavailable(f"RAPL counters could not be read: {exc}")
    return meter


def nvml(index: int = 0) -> Meter | Unavailable:
    """The NVIDIA GPU ``index``'s energy counter, or why not."""
    try:
        import pynvml
    except ImportError:
        return Unavailable("no NVML: the pynvml package is not installed")
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        reader = functools.partial(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        reader()
    except Exception as exc:  # noqa: BLE001 - NVMLError and its kin: no counter on this device
        return Unavailable(f"NVML has no energy counter for GPU {index}: {exc}")
    return Meter(NVML_METHOD, [Counter(f"gpu{index}", Path(), 2**64, 1e-3, True)], reader=reader)


@functools.cache
def meter(device: str = "cpu") -> Meter | Unavailable:
    """This process's energy meter for work on ``device`` (``cpu``, ``cuda``, ``cuda:N``)."""
    if device.startswith("cuda"):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        return nvml(index)
    return rapl()


class Span:
    """Energy summed over the blocks between :meth:`begin` and :meth:`end` calls (the timer's)."""

    def __init__(self, source: Meter | Unavailable) -> None:
        self.source = source
        self.joules: dict[str, float] = {}
        self.seconds = 0.0
        self._before: list[int] | None = None
        self._at = 0.0

    def begin(self) -> None:
        if isinstance(self.source, Meter):
            self._before, self._at = self.source.read(), time.perf_counter()

    def end(self) -> None:
        if isinstance(self.source, Meter) and self._before is not None:
            after, now = self.source.read(), time.perf_counter()
            for k, v in self.source.joules(self._before, after).items():
                self.joules[k] = self.joules.get(k, 0.0) + v
            self.seconds += now - self._at
            self._before = None

    def record(self, calls: int) -> dict[str, Any]:
        """What the span measured over ``calls`` calls of the timed function: the joules (total and
        per counter), per call and the average power; or the reason there is nothing."""
        out = self.source.describe()
        if isinstance(self.source, Meter):
            total = self.source.total(self.joules)
            out.update(joules=total, per_counter=dict(self.joules), seconds=self.seconds, calls=calls,
                       joules_per_call=total / calls if calls else None,
                       watts=total / self.seconds if self.seconds > 0 else None)
        return out


JOULES, WATTS = "J", "W"
"""The units of :func:`energy_metrics`' names (declared by :func:`energy_declared`)."""


def energy_metrics(record: dict[str, Any], per: str = "call", units: float = 1.0,
                   suffix: str = "") -> list[Metric]:
    """``energy_per_<per><suffix>`` (J, over ``units`` of ``per`` in one call of the timed
    function) and ``power<suffix>`` (W, the average over the timed blocks) from a :meth:`Span.record`;
    none where energy is unavailable (the report says why, from the run's environment record).
    The method and counters are in the timer's record beside them."""
    per_call, watts = record.get("joules_per_call"), record.get("watts")
    out: list[Metric] = []
    if record.get("available") and per_call is not None:
        out.append(Metric(f"energy_per_{per}{suffix}", float(per_call) / units, JOULES, "info"))
    if record.get("available") and watts is not None:
        out.append(Metric(f"power{suffix}", float(watts), WATTS, "info"))
    return out


def energy_declared(per: str, suffix: str, what: str) -> dict[str, Declared]:
    """The declarations of :func:`energy_metrics`' two names for ``per`` and ``suffix``; ``what``
    says what was timed."""
    source = ("RAPL: the host's packages and DRAM, other processes included; NVML: the GPU; absent where "
              "unreadable, the report says why")
    return {f"energy_per_{per}{suffix}": Declared(JOULES, "info", None, f"energy per {per} of {what} ({source})"),
            f"power{suffix}": Declared(WATTS, "info", None, f"average power over {what}")}
