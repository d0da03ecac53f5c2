"""The defaults of the comparison model (d5pipe.results.timing_compare), in one place below the
config schema (``report.alpha``, ``report.margin``) and the command line that both use them.

Chosen by measurement on this project's 2-core VM (benchmarks/bench_compare_power.py; README,
"Comparing runs"): the level keeps A/A comparisons quiet, the margin is what two interleaved
measurements of the same code reliably fit inside.
"""

from __future__ import annotations

from typing import Literal

ALPHA = 0.05
"""Level of the test for a change, over the family of timings compared together (Holm)."""
MARGIN = 0.10
"""Equivalence margin: equivalent when the whole 95% CI of the ratio lies within x(1 + MARGIN)."""
CORRECTION: Literal["holm", "bh", "none"] = "holm"
"""Multiple-comparison correction over a family of timings: holm, bh or none."""
RUN_NOISE = 0.01
"""Standard deviation of a whole run's shift in log time on this machine: the variance two runs
measured apart add to a comparison of their repetitions (``d5pipe compare``/``reproduce``
``--run-noise``; never to interleaved rounds, which share their run). Measured by
benchmarks/bench_process_statistic.py (README, "Reproducing and comparing runs"): a run as a whole
moved a level-0 timing's fastest sample by 0-0.6% in a quiet hour and 0-4.4% in a busy one; 1%
kept every resampled A/A pair of ten processes a side quiet in both and found as many 25%
slowdowns as none."""
