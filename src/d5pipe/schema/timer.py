"""Schema of the ``timer`` section, shared by every level."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TimerConf:
    warmup_s: float = 0.05
    """Upper bound on warm-up time per point (seconds)."""
    warmup_max_iters: int = 50
    min_block_s: float = 0.01
    """Minimum duration of one timed block (keeps timer overhead far below 0.1%)."""
    target_ci_pct: float = 5.0
    """Stop once the 95% CI of the median is within +-P% of the median."""
    budget_s: float = 2.0
    """Time budget per point; when spent before the target, the record says so."""
    min_samples: int = 10
    max_samples: int = 1000
