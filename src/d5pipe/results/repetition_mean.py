"""A non-timing metric of one configuration over its repetitions (level-2 accuracy, loss, time to
target): the mean with its t-interval, and how many repetitions did not reach a value.

Timings are compared by :mod:`d5pipe.results.timing_compare`; this is what the report shows for the
quality a configuration reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RepetitionMean:
    """One metric of one configuration over its repetitions (level-2 outcomes: accuracy, loss, time
    to target): the mean with its t-interval over the repetitions that reached a value, and how many
    did not (NaN: ``time_to_target_s`` of a training that never reached its target)."""

    n: int
    reached: int
    mean: float | None
    ci: tuple[float, float] | None

    def text(self, fmt: Callable[[float], str] = lambda v: f"{v:.4g}") -> str:
        if self.reached == 0:
            return f"not reached (0 of {self.n})"
        assert self.mean is not None
        value = fmt(self.mean) + (f" [{fmt(self.ci[0])}, {fmt(self.ci[1])}]" if self.ci else "")
        return value + (f", not reached in {self.n - self.reached} of {self.n}" if self.reached < self.n else "")


def repetition_mean(values: Sequence[float], confidence: float = 0.95) -> RepetitionMean:
    """Mean and t-interval of the finite ``values`` (one per repetition); see :class:`RepetitionMean`."""
    got = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not got:
        return RepetitionMean(len(values), 0, None, None)
    mean = sum(got) / len(got)
    if len(got) < 2:
        return RepetitionMean(len(values), len(got), mean, None)
    from scipy import stats

    sd = math.sqrt(sum((v - mean) ** 2 for v in got) / (len(got) - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, len(got) - 1)) * sd / math.sqrt(len(got))
    return RepetitionMean(len(values), len(got), mean, (mean - half, mean + half))
