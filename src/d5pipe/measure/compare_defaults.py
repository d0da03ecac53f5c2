"""The defaults of the comparison model (d5pipe.results.timing_compare), in one place below the
config schema (``report.alpha``, ``report.margin``) and the command line that both use them.

Chosen by measurement on this project's 2-core VM (benchmarks/bench_compare_power.py; README,
"Comparing runs"): the level keeps A/A comparisons quiet, the margin is what two interleaved
measurements of the same code reliably fit inside.
"""

from __future__ import annotations

ALPHA = 0.05
"""Level of the test for a change, over the family of timings compared together (Holm)."""
MARGIN = 0.10
"""Equivalence margin: equivalent when the whole 95% CI of the ratio lies within x(1 + MARGIN)."""
CORRECTION = "holm"
"""Multiple-comparison correction over a family of timings: holm, bh or none."""
