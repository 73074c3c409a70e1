"""The files `gpuprov report` writes into its folder, a row each in `EXPORTS` (in the order
they are listed): the file's name, what it holds (the generated reference shows it), and its
writer, handed the report, the file's path and the files written before it ({key: path}).
`--prometheus` and `--json` copy to a path of the user's (`run_report`).

Adding an export: a module with its writer, and its row here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import health_csv
from .analyse import Report
from .drift import DRIFT_CSV
from .export import drift_csv, flags_json, indented_json, table_csv

Writer = Callable[[Report, Path, dict[str, Path]], None]


@dataclass(frozen=True)
class Export:
    key: str
    file: str
    what: str
    write: Writer


def _merged(report: Report, path: Path, written: dict[str, Path]) -> None:
    path.write_text(table_csv(report.table), encoding="utf-8")


def _flags(report: Report, path: Path, written: dict[str, Path]) -> None:
    # Strict JSON (RFC 8259 has no Infinity or NaN): collect keeps every figure finite, and a
    # figure that is not would stop here rather than be written for other tools to choke on.
    # indented_json: json.dumps(indent=2, allow_nan=False)'s text, written faster
    path.write_text(indented_json(flags_json(report)) + "\n", encoding="utf-8")


def _drift(report: Report, path: Path, written: dict[str, Path]) -> None:
    path.write_text(drift_csv(report.drift), encoding="utf-8")


def _latency(report: Report, path: Path, written: dict[str, Path]) -> None:
    from . import plot  # matplotlib only when files are written

    plot.latency_png(report, path)


def _regressions(report: Report, path: Path, written: dict[str, Path]) -> None:
    from . import plot

    plot.regressions_png(report, path)


def _html(report: Report, path: Path, written: dict[str, Path]) -> None:
    from . import html, plot  # jinja2 only when files are written

    html.write_html(report, path, {"latency": written["latency_png"],
                                   "regressions": written["regressions_png"]},
                    empty=plot.empty_charts(report))


EXPORTS: dict[str, Export] = {e.key: e for e in (
    Export("csv", "merged.csv", "row per model, column per host/run; `;`-separated, `-` missing",
           _merged),
    Export("json", "flags.json", "what was flagged and everything it was decided from "
           "(quarantine, outliers with their peers named, regressions, every host against its "
           "peers (counted: `peers_count`), drift, health, history, repairs, problems); "
           "`schema` 2", _flags),
    Export("drift_csv", DRIFT_CSV, "every stack item that differs from the host's GPU group, "
           "row per host and item", _drift),
    Export("latency_png", "latency.png", "per-model latency of each host's latest run",
           _latency),
    Export("regressions_png", "regressions.png", "change of each host's latest run vs its "
           "previous run (or the baseline)", _regressions),
    Export("html", "report.html", "the report as one self-contained page (needs the two "
           "charts above)", _html),
    Export("health_csv", health_csv.FILE, "each host's latest validation, row per host: "
           "verdict, GPU, failed and skipped checks, why there is no verdict", health_csv.write),
)}
