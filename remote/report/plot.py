"""The charts of a report (headless: matplotlib's Agg canvas).

- ``latency_png(report, path)``: batch-1 latency per model, one series per host (its latest
  run; per head label when a run has several), log scale; slow hosts drawn in red; beyond
  ``MAX_LEGEND_HOSTS`` hosts the healthy ones are one grey, unlabelled crowd.
- ``regressions_png(report, path)``: latency change of each host's latest run vs its previous
  run (or the baseline), per model; beyond the threshold in red.

Names from the logs are drawn made printable, as text, never parsed as mathtext (a model called
``$\\undefinedcmd$`` would stop the drawing); with more than ``MAX_MODEL_LABELS`` models the
latency chart numbers its ticks instead of naming each. Figures are built with
``matplotlib.figure.Figure`` directly (no pyplot, no global backend state), which renders
through Agg.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from ..output.term import printable_line
from .analyse import Report, has_label

SLOW = "#d62728"
REGRESSED = "#d62728"
FASTER = "#2ca02c"
NEUTRAL = "#9e9e9e"
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94"]
_MARKERS = "osD^v<>ph*"
MAX_BARS = 40
MAX_MODEL_LABELS = 60  # more models than this: numbered ticks instead of a name each
# More hosts than this: the healthy ones are one grey crowd with one legend entry, the slow ones
# keep theirs. 100 named series drew a two-column legend nobody can match to 14 colours, and laying
# it out was most of the chart's time (bench.report_history, 100 hosts).
MAX_LEGEND_HOSTS = 20


Series = Tuple[str, str, Optional[str], Dict[str, float]]  # name, host, label, {model: ms}


def _latest_series(report: Report) -> list[Series]:
    """[(name, host, label, {model: ms})] for each host's latest run, in table order."""
    latest = {h.host: h.run_id for h in report.fleet}
    series = []
    for col in report.table.columns:
        if latest.get(col.host) != col.run_id:
            continue
        cells = {m: report.table.cell(m, col) for m in report.table.models}
        values = {m: v for m, v in cells.items() if v is not None}
        name = printable_line(col.host + (f" [{col.label}]" if has_label(col) else ""))
        series.append((name, col.host, col.label, values))
    return series


def _empty(fig: Figure, message: str) -> None:
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=13, color="#555555",
            transform=ax.transAxes)


def latency_png(report: Report, path: Path) -> Path:
    latency_figure(report).savefig(path, format="png")
    return path


class _SeriesPainter:
    """How each host's series is drawn: a slow host as red crosses (with its line when the
    models are labelled), the healthy hosts in a palette, or, past MAX_LEGEND_HOSTS, as one
    grey crowd with a single legend entry."""

    def __init__(self, ax: Any, series: list[Any], slow: dict[str, Any], labelled: bool):
        self.ax, self.slow, self.labelled = ax, slow, labelled
        # a host whose run printed several heads has a series per head: count hosts, not series
        self.crowd = len({host for _, host, *_ in series}) > MAX_LEGEND_HOSTS
        self.healthy = len({host for _, host, *_ in series if host not in slow})
        self.normal = 0
        self.crowd_x: list[float] = []  # the crowd's points, every series' in order (`crowded`)
        self.crowd_y: list[float] = []

    def gather(self, host: str, px: list[float], py: list[float]) -> None:
        """Before drawing: a series of the crowd adds its points to the crowd's."""
        if self.crowd and host not in self.slow:
            self.crowd_x += px
            self.crowd_y += py

    def slow_host(self, name: str, host: str, px: list[float], py: list[float]) -> None:
        label = f"{name}: SLOW {self.slow[host].typical_pct:+.0f}% vs peers"
        if self.labelled:  # a line across thousands of models is only ink
            self.ax.plot(px, py, color=SLOW, lw=1.2, alpha=0.5, zorder=3)
        self.ax.scatter(px, py, s=90, marker="X", color=SLOW, edgecolor="black",
                        linewidth=0.6, zorder=4, label=label)

    def crowded(self, px: list[float], py: list[float]) -> None:
        """The whole crowd as one scatter where its first series comes (its legend entry's
        place), the others nothing more: the same points drawn in the same order, but a
        collection per host cost 3 of a 1,000-host report's seconds (bench.report_repairs)."""
        if self.normal == 0:
            self.ax.scatter(self.crowd_x, self.crowd_y, s=16, marker="o", color=NEUTRAL,
                            alpha=0.6, zorder=2, label=f"{self.healthy} hosts within their peers")
        self.normal += 1

    def healthy_host(self, name: str, px: list[float], py: list[float]) -> None:
        color = _PALETTE[self.normal % len(_PALETTE)]
        marker = _MARKERS[self.normal % len(_MARKERS)]
        self.normal += 1
        if self.labelled:
            self.ax.plot(px, py, color=color, lw=0.8, alpha=0.35, zorder=2)
        self.ax.scatter(px, py, s=36, marker=marker, color=color, zorder=3, label=name)

    def draw(self, name: str, host: str, px: list[float], py: list[float]) -> None:
        if host in self.slow:
            self.slow_host(name, host, px, py)
        elif self.crowd:
            self.crowded(px, py)
        else:
            self.healthy_host(name, px, py)


def _model_axis(ax: Any, models: list[str], labelled: bool) -> None:
    """A label per model, or (too many to read) the models' numbers."""
    if labelled:
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels([printable_line(m) for m in models], rotation=35 if len(models) > 6 else 0,
                           ha="right" if len(models) > 6 else "center", parse_math=False)
    else:  # a label per model would be unreadable, and laying out each costs seconds
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"model number, 0 to {len(models) - 1} in name order "
                      "(names in merged.csv and report.html)")
    ax.set_xlim(-0.6, len(models) - 0.4)


def _latency_axis_and_legend(ax: Any) -> None:
    """The log-scale latency axis, the title, the grid and the legend beside the chart."""
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("batch-1 latency, ms (log scale)")
    ax.set_title("Latency per model, latest run per host (lower is better)")
    ax.grid(True, which="both", axis="y", alpha=0.3)
    legend = ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False,
                       ncols=1 if len(ax.get_legend_handles_labels()[1]) <= 18 else 2)
    for text in legend.get_texts():
        text.set_parse_math(False)


NO_LATENCY = "No benchmark values found"
NO_REGRESSION = "No earlier run to compare with: no regression chart"


def _regression_rows(report: Report) -> list[tuple[str, float]]:
    return [(printable_line(f"{c.host}: {r.name}"), r.pct)
            for c in report.comparisons for r in c.changes]


def empty_charts(report: Report) -> dict[str, str]:
    """{chart: why it has nothing to draw} of the charts with nothing to draw ("latency",
    "regressions"): the HTML page says so in one line instead of showing an empty box."""
    series = _latest_series(report)
    out = {}
    if not any(values for *_, values in series):
        out["latency"] = "no benchmark values found"
    if not _regression_rows(report):
        out["regressions"] = "no earlier run to compare with"
    return out


def latency_figure(report: Report) -> Figure:
    series = _latest_series(report)
    models = sorted({m for *_, values in series for m in values})
    width = max(8.0, min(24.0, 3.0 + 0.55 * len(models)))
    fig = Figure(figsize=(width, 5.2), dpi=100, layout="constrained")
    if not series or not models:
        _empty(fig, NO_LATENCY)
        return fig
    labelled = len(models) <= MAX_MODEL_LABELS
    ax = fig.add_subplot()
    ax.set_yscale("log")
    xs = {m: i for i, m in enumerate(models)}
    n = len(series)
    spread = min(0.6, 0.12 * n)
    painter = _SeriesPainter(ax, series, {h.host: h for h in report.outliers}, labelled)
    drawn = []
    for i, (name, host, _label, values) in enumerate(series):
        offset = (i - (n - 1) / 2) * (spread / max(1, n - 1)) if n > 1 else 0.0
        pts = sorted((xs[m] + offset, v) for m, v in values.items())
        drawn.append((name, host, [p[0] for p in pts], [p[1] for p in pts]))
        painter.gather(host, drawn[-1][2], drawn[-1][3])
    for name, host, px, py in drawn:
        painter.draw(name, host, px, py)
    _model_axis(ax, models, labelled)
    _latency_axis_and_legend(ax)
    return fig


def regressions_png(report: Report, path: Path) -> Path:
    rows = _regression_rows(report)
    rows.sort(key=lambda row: -row[1])
    shown = rows[:MAX_BARS]
    height = max(3.0, min(14.0, 1.4 + 0.3 * len(shown)))
    fig = Figure(figsize=(10, height), dpi=100, layout="constrained")
    if not shown:
        _empty(fig, NO_REGRESSION)
        fig.savefig(path, format="png")
        return path
    ax = fig.add_subplot()
    threshold = report.regression_pct
    names = [r[0] for r in shown][::-1]
    pcts = [r[1] for r in shown][::-1]
    colors = [REGRESSED if p > threshold else FASTER if p < -threshold else NEUTRAL
              for p in pcts]
    ax.barh(range(len(pcts)), pcts, color=colors, height=0.7)
    ax.set_yticks(range(len(pcts)))
    ax.set_yticklabels(names, fontsize=8, parse_math=False)
    ax.axvline(0, color="black", lw=0.8)
    ax.axvline(threshold, color=REGRESSED, lw=1, ls="--",
               label=f"regression threshold +{threshold:g}%")
    lo, hi = min(pcts + [0.0]), max(pcts + [threshold])
    pad = (hi - lo) * 0.15 or 5
    ax.set_xlim(lo - pad if lo < 0 else -pad / 3, hi + pad)
    for y, p in enumerate(pcts):
        ax.text(p + (pad / 12 if p >= 0 else -pad / 12), y, f"{p:+.1f}%", va="center",
                ha="left" if p >= 0 else "right", fontsize=8)
    what = f"baseline {report.baseline}" if report.baseline else "previous run"
    title = f"Latency change, latest run vs {what} (right = slower)"
    if len(rows) > len(shown):
        title += f"; {len(shown)} largest of {len(rows)}"
    ax.set_title(title, parse_math=False)
    ax.set_xlabel("change in batch-1 latency, %")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.savefig(path, format="png")
    return path

