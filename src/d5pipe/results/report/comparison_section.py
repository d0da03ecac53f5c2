"""A level's "side by side" subsection: each variant against the declared baseline (comparisons.py).

A table (one row per fair pair and metric, with the quality outcome of both sides: the level's
quality metric, else the points' verdicts) and a figure (speedup with its 95% CI, a dashed line at 1). A pair with a side that failed
a check is listed as ``not compared`` with that failure, and left out of the figure. When the
level's factor is not swept, or its baseline is not in the run, one note says so.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from d5pipe.levels.stage import Factor
from d5pipe.results.comparisons import FACTORS, NOT_COMPARED, policy_of
from d5pipe.results.report.blocks import Block, Figure, Section, Table, Text
from d5pipe.results.report.frames import MAX_TABLE_ROWS
from d5pipe.results.report.loader import RunData
from d5pipe.results.report.plots import speedups
from d5pipe.results.report.units import natural_key, number, quantity

MAX_FIGURE_PAIRS = 40
SECTION_PREFIX = re.compile(r"[\w-]+\.(?=[\w-]+=)")



def _short(context: str) -> str:
    """``operators.size=64, operators.dtype=float32`` -> ``size=64, dtype=float32``."""
    return SECTION_PREFIX.sub("", context)


def _p(p: float) -> str:
    if math.isnan(p):
        return "-"
    return "< 0.001" if p < 0.001 else number(p, 2)


def _speedup(r: pd.Series) -> str:
    if math.isnan(r["speedup"]):
        return ""
    ci = "" if math.isnan(r["ci_low"]) or math.isnan(r["ci_high"]) else \
        f" [{number(r['ci_low'], 3)}, {number(r['ci_high'], 3)}]"
    return f"{number(r['speedup'], 3)}x{ci}"


def _quality(r: pd.Series) -> str:
    """``0.953 / 0.033 (fail)``: both sides' quality outcome, a failing side's verdict after it;
    ``pass / fail``: both sides' verdicts where the level has no quality metric."""
    def side(value: float, verdict: str) -> str:
        if not r["quality_metric"]:
            return verdict or "-"
        text = "-" if math.isnan(value) else number(value, 3)
        return f"{text} (fail)" if verdict == "fail" else text

    return f"{side(r['baseline_quality'], r['baseline_verdict'])} / {side(r['variant_quality'], r['variant_verdict'])}"


def _verdict(r: pd.Series) -> str:
    if r["verdict"] == NOT_COMPARED:
        return f"{NOT_COMPARED}: {r['note']}"
    text = str(r["verdict"])
    if text == "equivalent":
        text += f" (within x{1 + float(r['margin']):g})"
    if text == "inconclusive" and not math.isnan(float(r["needed"])):
        text += f": ~{int(r['needed'])} repetitions per side would decide"
    if r["note"]:
        text += f"; {r['note']}"
    return text


def _why_none(data: RunData, stage: str, factor: Factor) -> str:
    rows = data.stage_rows(stage)
    rows = rows[rows["status"] == "ok"]
    values = sorted({str(v) for v in rows[factor.column].dropna()}, key=natural_key) \
        if factor.column in rows.columns else []
    if len(values) < 2:
        return f"{factor.column} is not swept in this run: nothing to compare side by side."
    base = factor.baseline or f"the first value of the sweep ({factor.fallback} if unknown)"
    present = ", ".join(values)
    return (f"No fair pair: the baseline {factor.column}={base} has no point that differs from a variant "
            f"in {factor.column} alone, or none of them has {', '.join(factor.metrics)} (present: {present}).")


def comparison_blocks(data: RunData, stage: str) -> tuple[list[Block], Section | None]:
    """(notes for the level section, the side-by-side subsection or None) of ``stage``."""
    factors = [f for s, f in FACTORS if s == stage]
    if not factors:
        return [], None
    swept = [f for f in factors if f.column in data.results.columns
             and data.results.loc[data.results["stage"] == stage, f.column].nunique() > 1]
    factor = (swept or factors)[0]  # the level's compared factor that this run sweeps
    pairs = data.res.comparisons
    pairs = pairs[pairs["stage"] == stage] if not pairs.empty else pairs
    pairs = pairs[pairs["factor"] == factor.column] if not pairs.empty else pairs
    if pairs.empty:
        return [Text(f"Side by side ({factor.title}): {_why_none(data, stage, factor)}", "note")], None
    pairs = pairs.assign(_k=[(natural_key(m), natural_key(c), natural_key(v))
                             for m, c, v in zip(pairs["metric"], pairs["context"], pairs["variant"])])
    pairs = pairs.sort_values("_k", kind="stable").drop(columns="_k").reset_index(drop=True)
    base = str(pairs["baseline"].iloc[0])
    policy = policy_of(data.config)
    quality = f"{factor.quality or 'checks'} (baseline / variant)"
    cols = ["metric", "other axes", "variant", "baseline value", "variant value",
            "speedup [95% CI]", "p", "n", quality, "verdict"]
    rows = [[str(r["metric"]), str(r["context"]) or "-", f"{r['variant']} vs {base}",
             quantity(r["baseline_median"], r["unit"]), quantity(r["variant_median"], r["unit"]),
             _speedup(r), _p(r["p_value"]), f"{r['n_baseline']}/{r['n_variant']}" if r["n_baseline"] else "-",
             _quality(r), _verdict(r)]
            for _, r in pairs.head(MAX_TABLE_ROWS).iterrows()]
    not_compared = pairs["verdict"] == NOT_COMPARED
    blocks: list[Block] = [
        Text(f"Each variant of {factor.column} against the baseline {factor.column}={base}, only between points "
             f"that differ in {factor.column} alone (every other sweep axis equal; Deep500's fairness rule). "
             "Each side is the repetitions of its configuration (config repetitions: separate processes), each "
             "process by its fastest sample (a shared machine's noise only adds time; a value that is no "
             "timer's median, such as a whole run's time, by that value); speedup = geometric mean of the "
             "baseline's processes / the variant's: above 1 the variant is faster. CI of the speedup and p from one Welch t-test on their logarithms; faster or "
             f"slower only when the 95% CI excludes 1 and Holm's correction over the run's pairs at alpha = "
             f"{number(policy.alpha)} (report.alpha) agrees; equivalent when the whole CI lies within "
             f"x{1 + policy.margin:g} either way (report.margin); otherwise inconclusive, with the "
             "repetitions per side that would decide. With one repetition per side nothing is ranked: one "
             "process cannot show the variation between processes.", "note"),
        Table(cols, rows, f"{factor.title.capitalize()} side by side (baseline {factor.column}={base})",
              {i for i, nc in enumerate(not_compared.head(MAX_TABLE_ROWS)) if nc}, wrap={1, len(cols) - 1}),
    ]
    failed = not_compared & (pairs["baseline_verdict"].eq("fail") | pairs["variant_verdict"].eq("fail"))
    if failed.any():
        blocks.append(Text(f"{int(failed.sum())} pair(s) not compared: a side failed a check (its verdict "
                           "is fail; see Failures), so its speed is no result and is not ranked.", "bad"))
    if (not_compared & ~failed).any():
        blocks.append(Text(f"{int((not_compared & ~failed).sum())} pair(s) not compared: one process per side; "
                           "run with repetitions >= 2 (3 or more for a useful test).", "note"))
    if len(pairs) > MAX_TABLE_ROWS:
        blocks.append(Text(f"Showing {MAX_TABLE_ROWS} of {len(pairs)} pairs.", "note"))
    shown = pairs[~not_compared].head(MAX_FIGURE_PAIRS)
    frame = pd.DataFrame({
        "label": [f"{v} {_short(c)}".strip() for v, c in zip(shown["variant"], shown["context"])],
        "speedup": shown["speedup"], "ci_low": shown["ci_low"], "ci_high": shown["ci_high"],
        "series": shown["metric"],
    })
    caption = (f"Speedup of each {factor.column} over {base} with its 95% CI; dashed: 1 (as fast as the "
               "baseline). Markers only: the pairs are not a sequence.")
    if int((~not_compared).sum()) > MAX_FIGURE_PAIRS:
        caption += f" First {MAX_FIGURE_PAIRS} of {int((~not_compared).sum())} compared pairs drawn."
    if not shown.empty:
        blocks.append(Figure(speedups(frame), f"speedup vs {base}", caption))
    return [], Section(f"compare-{stage}", f"{stage}: {factor.title} side by side", blocks)
