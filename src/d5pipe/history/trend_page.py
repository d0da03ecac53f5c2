"""The trend page: one self-contained HTML file, findings first, then one plot per series (its
runs' values in time order, one line per machine type, each confirmed step marked)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5pipe.core.atomic import write_bytes
from d5pipe.results.timing_compare import lower_is_better

if TYPE_CHECKING:
    import pandas as pd

    from d5pipe.history.check import HistoryCheck, SeriesResult

MAX_PLOTS = 60


def _svg(g: pd.DataFrame, title: str, steps: dict[str, list[int]], unit: str, lower: bool) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 2.6))
    for machine, m in g.groupby("machine", sort=False):
        x = list(range(len(m)))
        best = m["low"] if lower else m["high"]  # the value the check reads (d5pipe.history.check.run_logs)
        ax.plot(x, best.to_list(), marker="o", ms=3, label=f"machine {machine}: best repetition")
        ax.plot(x, m["value"].to_list(), ls=":", lw=1, alpha=0.6, label=f"machine {machine}: median")
        for i in steps.get(str(machine), []):
            ax.axvline(i - 0.5, color="crimson", ls="--", lw=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("run (time order)")
    ax.set_ylabel(unit or "value")
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def write_trend_page(path: Path, result: HistoryCheck, values_of: Callable[[SeriesResult], pd.DataFrame],
                     store: str, runs: int, max_plots: int = MAX_PLOTS) -> Path:
    """``values_of``: a drawn series' runs (d5pipe.history.queries.run_values of its series and
    metric, every machine type), fetched for the drawn series only."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("d5pipe.history", "templates"), autoescape=True)
    order = sorted(result.series, key=lambda s: {"steps": 0, "inconclusive": 1, "steady": 2}[s.check.status])
    plots: list[dict[str, Any]] = []
    drawn: set[tuple[str, str]] = set()
    for s in order:
        key = (s.series, s.metric)
        if key in drawn or len(plots) >= max_plots:
            continue
        drawn.add(key)
        g = values_of(s)
        steps = {x.machine: [st.index for st in x.check.steps] for x in result.series
                 if (x.series, x.metric) == key}
        title = f"{s.experiment} {s.stage} {s.params} {s.metric}"
        unit = str(g["unit"].iloc[0]) if len(g) else ""
        plots.append({"svg": _svg(g, title, steps, unit, lower_is_better(unit, s.metric)),
                      "caption": f"{title}: {s.check.status}"})
    left_out = len({(s.series, s.metric) for s in order}) - len(plots)
    html = env.get_template("trend.html.j2").render(
        store=store, runs=runs, counts=result.counts(), findings=result.findings,
        inconclusive=[s for s in order if s.check.status == "inconclusive"], plots=plots, left_out=left_out)
    write_bytes(path, html.encode())
    return path
