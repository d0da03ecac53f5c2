"""Schema of the ``timer`` section, shared by every level (d5pipe.measure.timer reads it)."""

from __future__ import annotations

from dataclasses import dataclass

from d5pipe.core.fields import at_least, positive


@dataclass
class TimerConf:
    warmup_s: float = at_least(0.05, 0.0)
    """Upper bound on warm-up time per point (seconds)."""
    warmup_max_iters: int = at_least(50, 1)
    """Upper bound on warm-up calls per point (warm-up ends at whichever of the two comes first)."""
    min_block_s: float = positive(0.01)
    """Minimum duration of one timed block (keeps timer overhead far below 0.1%)."""
    target_ci_pct: float = positive(5.0)
    """Stop once the 95% CI of the median is within +-P% of the median."""
    budget_s: float = positive(2.0)
    """Time budget per point; when spent before the target, the record says so."""
    min_samples: int = at_least(10, 1)
    """Timed blocks taken at least, whatever the CI."""
    max_samples: int = at_least(1000, 1)
    """At least ``min_samples`` (checked per point by ``d5pipe plan``)."""


def check_timer(timer: dict[str, object], where: str = "timer") -> None:
    """Cross-field check of a resolved ``timer`` section (ranges are declared above)."""
    from d5pipe.core.errors import D5PipeError

    lo, hi = timer.get("min_samples"), timer.get("max_samples")
    if isinstance(lo, int) and isinstance(hi, int) and hi < lo:
        raise D5PipeError(f"{where}.max_samples: {hi} is below {where}.min_samples={lo}")
