"""Matplotlib figures (Agg canvas, no pyplot) as PNG bytes, to be embedded in the report.

Rules (DESIGN.md section 3): error bars / bands from the recorded CI of the median; lines connect
points only along a numeric sweep axis; a categorical x axis gets markers only.
"""

from __future__ import annotations

import io
import math
from typing import Literal

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import XAxis, YAxis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogFormatter, NullLocator

from d5pipe.results.report.units import axis_label, axis_scale, bytes_tick, natural_key, number

MAX_PANELS = 6
MAX_SERIES = 10
Ideal = Literal["linear", "one"] | None


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)  # constrained layout fits labels and the legend: one draw
    return buf.getvalue()


def _grid(n_panels: int, width: float = 4.3, height: float = 3.2) -> tuple[Figure, list[Axes]]:
    ncols = min(3, max(1, n_panels))
    nrows = math.ceil(n_panels / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")  # no pyplot: no global state
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def _log_minor(axis: XAxis | YAxis, lo: float, hi: float) -> None:
    """Minor ticks of a log axis labelled (2, 3, 4, 6 x 10^k) when less than ~2 decades show;
    over more decades none (the major ticks suffice, and hundreds of minor ticks cost a
    noticeable part of a second to lay out)."""
    if lo > 0 and hi / lo > 100:
        axis.set_minor_locator(NullLocator())
    else:
        axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def _plain_y(ax: Axes) -> None:
    """Tick labels as plain numbers (``0.5``, ``200``), never ``10^2`` or ``1e-05``."""
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: number(float(v), 3)))
    if ax.get_yscale() == "log":
        _log_minor(ax.yaxis, *ax.get_ylim())


def _legend(fig: Figure, axes: list[Axes]) -> None:
    """One legend for the figure, right of the panels, so it never hides data."""
    seen: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label[:48], handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), fontsize=8, loc="outside right upper", frameon=False)


def _yerr(df: pd.DataFrame) -> np.ndarray | None:
    if df["ci_low"].isna().all() or df["ci_high"].isna().all():
        return None
    low = (df["value"] - df["ci_low"]).clip(lower=0).fillna(0).to_numpy()
    high = (df["ci_high"] - df["value"]).clip(lower=0).fillna(0).to_numpy()
    return np.vstack([low, high])


def _draw_series(ax: Axes, df: pd.DataFrame, label: str, numeric_x: bool, band: bool,
                 positions: dict[str, int] | None) -> None:
    df = df.sort_values("x")
    xs = df["x"].to_numpy(dtype=float) if positions is None else df["x"].astype(str).map(positions).to_numpy()
    err = _yerr(df)
    style = "-o" if numeric_x else "o"
    if numeric_x:  # line through the per-x median, markers + CI on every point
        med = df.assign(_x=xs).groupby("_x", sort=True)["value"].median()
        (line,) = ax.plot(med.index, med.to_numpy(), style, label=label, markersize=4)
        color = line.get_color()
    else:
        (line,) = ax.plot(xs, df["value"].to_numpy(), style, label=label, markersize=6)
        color = line.get_color()
    if err is not None:
        ax.errorbar(xs, df["value"].to_numpy(), yerr=err, fmt="none", ecolor=color, capsize=3, alpha=0.8)
        if band and numeric_x:
            g = df.assign(_x=xs).groupby("_x", sort=True)
            ax.fill_between(g["ci_low"].median().index, g["ci_low"].median().to_numpy(),
                            g["ci_high"].median().to_numpy(), color=color, alpha=0.18, linewidth=0)


def metric_vs_axis(
    frame: pd.DataFrame,
    *,
    xlabel: str,
    ylabel: str,
    numeric_x: bool,
    logx: bool = False,
    logy: bool = False,
    band: bool = False,
    ideal: Ideal = None,
    unit: str = "",
) -> tuple[bytes, int]:
    """Plot ``frame`` (x, value, ci_low, ci_high, series, facet): one panel per facet.

    ``unit`` is the values' unit: the y axis shows them with one readable prefix (µs, MiB, GB/s...)
    named in its label. Facets, series and categorical x values are in natural order (64 < 128).
    Returns the PNG and the number of facets that were left out (at most MAX_PANELS drawn).
    """
    factor, shown_unit = axis_scale(frame["value"].astype(float).tolist(), unit)
    if factor != 1.0:
        frame = frame.assign(value=frame["value"] * factor, ci_low=frame["ci_low"] * factor,
                             ci_high=frame["ci_high"] * factor)
    ylabel = axis_label(ylabel, shown_unit)
    facets = sorted(dict.fromkeys(frame["facet"]), key=natural_key)
    shown = facets[:MAX_PANELS]
    fig, axes = _grid(len(shown))
    positions = None
    if not numeric_x:
        cats = sorted(dict.fromkeys(frame["x"].tolist()), key=natural_key)
        positions = {str(c): i for i, c in enumerate(cats)}
    bytes_x = numeric_x and "bytes" in xlabel.lower()
    for ax, facet in zip(axes, shown):
        sub = frame[frame["facet"] == facet]
        for series in sorted(dict.fromkeys(sub["series"]), key=natural_key)[:MAX_SERIES]:
            _draw_series(ax, sub[sub["series"] == series], str(series), numeric_x, band, positions)
        if ideal is not None and numeric_x and len(sub):
            xs = np.sort(sub["x"].astype(float).unique())
            if ideal == "linear":
                ax.plot(xs, xs / xs[0], "k--", linewidth=1, label="ideal")
            else:
                ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="ideal")
        if positions is not None:
            ax.set_xticks(list(positions.values()))
            ax.set_xticklabels([s[:18] for s in positions], rotation=30, ha="right", fontsize=8)
        if logx and numeric_x:
            ax.set_xscale("log", base=2)
        if numeric_x:
            ticks = np.sort(sub["x"].astype(float).unique())
            if 0 < len(ticks) <= 12:
                ax.set_xticks(ticks, [bytes_tick(t) if bytes_x else number(t) for t in ticks], fontsize=8)
                ax.xaxis.set_minor_locator(NullLocator())
        if logy:
            ax.set_yscale("log")
        _plain_y(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if facet:
            ax.set_title(str(facet)[:70], fontsize=9)
        ax.grid(True, alpha=0.3)
    _legend(fig, axes)
    return to_png(fig), len(facets) - len(shown)


def speedups(frame: pd.DataFrame, ylabel: str = "speedup over the baseline") -> bytes:
    """Speedups (frame: label, speedup, ci_low, ci_high, series) with CI error bars and a line at 1.

    One marker per pair on a categorical x axis (no lines: the pairs are not a sequence).
    """
    fig, (ax,) = _grid(1, width=max(5.0, min(14.0, 0.45 * len(frame) + 3.0)), height=3.6)
    labels = list(dict.fromkeys(frame["label"]))
    pos = {lab: i for i, lab in enumerate(labels)}
    for series in list(dict.fromkeys(frame["series"]))[:MAX_SERIES]:
        sub = frame[frame["series"] == series]
        xs = sub["label"].map(pos).to_numpy(dtype=float)
        err = _yerr(sub.rename(columns={"speedup": "value"}))
        (line,) = ax.plot(xs, sub["speedup"].to_numpy(dtype=float), "o", label=str(series), markersize=6)
        if err is not None:
            ax.errorbar(xs, sub["speedup"].to_numpy(dtype=float), yerr=err, fmt="none",
                        ecolor=line.get_color(), capsize=3)
    ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="1 = as fast as the baseline")
    vals = pd.concat([frame["ci_low"], frame["ci_high"], frame["speedup"]]).astype(float)
    vals = vals[np.isfinite(vals) & (vals > 0)]
    if len(vals) and float(vals.max()) / float(vals.min()) > 20:
        ax.set_yscale("log")
    _plain_y(ax)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([lab if len(lab) <= 40 else lab[:39] + "…" for lab in labels], rotation=30,
                       ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    _legend(fig, [ax])
    return to_png(fig)


def roofline(frame: pd.DataFrame, flop_roofs: dict[str, float], bw_roofs: dict[str, float]) -> bytes:
    """GFLOP/s vs arithmetic intensity (frame: ai, gflops, series) under every measured ceiling:
    one compute roof per dtype (``flop_roofs``: label -> GFLOP/s, dashed) and one bandwidth roof
    per memory level (``bw_roofs``: label -> GB/s, dotted, capped by the highest compute roof)."""
    fig, (ax,) = _grid(1, width=6.5, height=4.2)
    for series in list(dict.fromkeys(frame["series"]))[:MAX_SERIES]:
        sub = frame[frame["series"] == series]
        ax.plot(sub["ai"], sub["gflops"], "o", label=str(series), markersize=5)
    lo, hi = float(frame["ai"].min()) / 2, float(frame["ai"].max()) * 2
    ai = np.geomspace(lo, hi, 200)
    top = max(flop_roofs.values(), default=0.0)
    for i, (label, gflops) in enumerate(sorted(flop_roofs.items(), key=lambda kv: -kv[1])):
        ax.axhline(gflops, color="k", linestyle="--", linewidth=1, alpha=1.0 - 0.15 * min(i, 4),
                   label=f"{label} {gflops:.3g} GFLOP/s")
    for i, (label, gbps) in enumerate(sorted(bw_roofs.items(), key=lambda kv: -kv[1])):
        roof = ai * gbps if not top else np.minimum(ai * gbps, top)
        ax.plot(ai, roof, color="0.25", linestyle=(0, (1, 1 + i)), linewidth=1.2, label=f"{label} {gbps:.3g} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_y(ax)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: number(float(v), 3)))
    _log_minor(ax.xaxis, lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    _legend(fig, [ax])
    return to_png(fig)


LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = "osD^v<>ph*"
DIRECT_LABELS = 6
"""At most this many lines per panel get a label at their end (more: the legend alone)."""


def _direct_labels(ax: Axes, ends: list[tuple[float, float, str]]) -> None:
    """Each line's label at its last point; labels whose lines end close together (identical
    learning-rate schedules of several optimizers) are spread apart vertically."""
    if not ends or len(ends) > DIRECT_LABELS:
        return
    low, high = ax.get_ylim()
    gap = 0.07 * (high - low) if high > low else 1.0
    placed: list[float] = []
    for x, y, label in sorted(ends, key=lambda e: e[1]):
        y_text = max(y, placed[-1] + gap) if placed else y
        placed.append(y_text)
        ax.annotate(label, (x, y), xytext=(x, y_text), textcoords="data", fontsize=7, va="center",
                    xycoords="data", annotation_clip=False, arrowprops=None)
    ax.set_xlim(right=ax.get_xlim()[1] + 0.35 * (ax.get_xlim()[1] - ax.get_xlim()[0]))  # room for labels


def curves_figure(frame: pd.DataFrame, series_names: list[str]) -> Figure:
    """Training curves (frame: label, series, step, value), one panel per series name. Lines that
    coincide stay readable: each point has its own line style and marker, and (up to
    :data:`DIRECT_LABELS` lines) its label at the line's end."""
    fig, axes = _grid(len(series_names))
    for ax, name in zip(axes, series_names):
        sub = frame[frame["series"] == name]
        ends: list[tuple[float, float, str]] = []
        for i, label in enumerate(sorted(dict.fromkeys(sub["label"]), key=natural_key)[:MAX_SERIES]):
            s = sub[sub["label"] == label].sort_values("step")
            ax.plot(s["step"], s["value"], linestyle=LINE_STYLES[i % len(LINE_STYLES)],
                    marker=MARKERS[i % len(MARKERS)], markersize=3, alpha=0.85, label=str(label)[:40])
            if not s.empty:
                ends.append((float(s["step"].iloc[-1]), float(s["value"].iloc[-1]), str(label)[:24]))
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
        _direct_labels(ax, ends)
    _legend(fig, axes)
    return fig


def curves(frame: pd.DataFrame, series_names: list[str]) -> bytes:
    """:func:`curves_figure` as PNG."""
    return to_png(curves_figure(frame, series_names))
