"""Compare benchmark logs across hosts and runs; flag slow hosts and regressions.

Entry point (what ``invoke report`` calls)::

    run_report(logs_dir: Path = Path("logs"), out_dir: Path | None = None,
               baseline: str | None = None, outlier_pct: float = 15.0,
               regression_pct: float = 10.0, fail_on_outlier: bool = False,
               terminal: remote.output.term.Terminal | None = None,
               prometheus_path: Path | None = None, quarantine: tuple[int, int] = (2, 3),
               json_path: str | None = None, repair_window: int = 3) -> int

``invoke report [--logs DIR] [--out DIR] [--baseline RUN-OR-HOST] [--threshold PCT]
[--fail-on-outlier] [--prometheus FILE] [--quarantine K/N] [--json PATH]
[--repair-window N]`` maps to it;
``--threshold PCT`` sets both ``outlier_pct`` and ``regression_pct`` (their defaults differ:
15 and 10); ``--json PATH`` writes flags.json's document there too ('-': on stdout, and the
printed report on stderr).

Returns the exit status: 0 normally; 1 when ``fail_on_outlier`` is set and something was
flagged (a slow host, a regression, drift or a host to quarantine); 2 on bad input (logs folder missing, ``baseline``
names no host or run), with a one-line message on stderr. Bad or unreadable log files are
never an error: each is reported by file (and line) and skipped.

Logs are untrusted (a compromised host writes them): a file that is not regular or is over
``collect.MAX_FILE_BYTES`` (16 MiB) is not read; a latency outside ``collect.MIN_MS`` ..
``collect.MAX_MS`` (1 ns .. 1 day) is a bad line; results.json must be an object whose
``checks`` is a list of objects, and no checks is not a pass; printed text shows control
characters as ``?``; names are never mathtext in the charts nor formulas in merged.csv.

Inputs: every ``LOGS/<host>/<run-id>/`` folder (run ids sort by time, e.g.
``20261122T040512Z``) holding ``results.json`` (validation package, schema 1) and/or
``bench_torch.log`` (the seed's format: ``#head;LABEL`` names a column, ``#<model>;<ms>``
gives a batch-1 latency in ms, every other line is ignored).

Which latency numbers a run contributes: ``bench_torch.log`` when it yields at least one
value (it is the seed-compatible view of the same batch-1 medians that results.json holds,
and it carries the head labels); otherwise the ``bench`` check's
``figures.models.<model>.latency_ms.median`` from results.json. Never both, so nothing is
counted twice. results.json always supplies the GPU model (for grouping) and the health
summary.

Output folder (default ``reports/<UTC time, e.g. 20261122T101500Z>/`` under the current
directory), files:

- ``merged.csv``     row per model, column per ``host/run`` (``host/run/label`` when a run
                     has several head labels); ``;``-separated, header row, ``-`` = missing.
- ``flags.json``     machine-readable: quarantine (kind ``quarantine``), outliers,
                     regressions, drift (up to 100 items per host), health, history (per
                     host: counts, streak, flapping, timeline), repairs (per remediated
                     node: by action and outcome, time to repair, did not hold), problems,
                     thresholds.
- ``drift.csv``      every stack item that differs from the host's GPU group, row per host and
                     item (``;``-separated, header row); the printed report and report.html
                     give a host with more than 5 one line.
- ``latency.png``    per-model latency of each host's latest run (log scale, slow hosts red).
- ``regressions.png`` change of each host's latest run vs its previous run (or baseline).
- ``report.html``    self-contained (images as data: URIs, inline CSS, no network).
- ``health.csv``     each host's latest validation, row per host (``;``-separated, header
                     row): verdict, GPU, failed and skipped checks, why there is no verdict.
- ``report.txt``     the printed report as plain text.

The files but report.txt are the rows of ``exports.EXPORTS`` (a new one: a module and its
row).

Definitions:

- Fleet outliers: hosts are grouped by ``host.gpu_name`` from results.json (a CPU run,
  ``host.device == "cpu"``, groups as "CPU only (<host.cpu>)"; no results.json saying either
  -> one "unknown GPU" group). Each host's latest run with latency values is compared, model
  by model, with the median of its *peers* (the other hosts in the group, their latest runs);
  the host's typical ratio is the median over its models. Slow when that is more than
  ``outlier_pct`` percent above 1. The peers' median (the host itself left out) keeps one slow
  host from dragging the reference in small groups.
- Regressions: each host's latest run vs its previous run with values (or the baseline);
  models slower by more than ``regression_pct`` percent are listed. ``baseline`` may be a
  run id (each host's run of that id), a host name (that host's latest run, for every other
  host) or ``HOST/RUN`` (that one run, for every host); a host name wins over a run id
  spelt the same.
- History: every run folder of a host, oldest first; verdicts, streak, flapping, quarantine
  and stack changes are defined in ``history``.
- Repairs: each node's remediation records (``<run>/remediation.json``), time to repair and
  the repairs that did not hold within ``repair_window`` runs, defined in ``repairs``.
- Columns are matched between runs by head label; two runs with one column each are compared
  whatever their labels are (a label may carry a version string).

Modules, imports pointing down only (``collect`` <- ``analyse`` <- the outputs):

- ``collect``  reads the log folders into runs and problems.
- ``drift``    each host's stack manifest against its GPU group's.
- ``history``  each host's runs over time: verdicts, streak, flapping, quarantine, stack changes.
- ``repairs``  each node's remediations: counts, time to repair, repairs that did not hold.
- ``analyse``  merges and compares them into one ``Report`` (``build_report``).
- ``text``     the printed report (terminal and report.txt), through ``remote.output.term``.
- ``export``   merged.csv and flags.json.
- ``exports``  the table of the files written (``EXPORTS``); ``health_csv`` one of its rows.
- ``plot``     the two charts (matplotlib, imported only when files are written).
- ``html``     the self-contained page.

They return data and never print; ``run_report`` (here) prints and writes the files.
"""
from __future__ import annotations

import datetime as _dt
import functools
import gc
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from ..ground.exitcodes import EXIT_INPUT, EXIT_OK, EXIT_STEP_FAILED
from ..ground.runfolder import LOGS_DIR
from ..output.term import Terminal
from .analyse import BadInput, Report, build_report
from .collect import parse_bench_log
from .exports import EXPORTS
from .history import QUARANTINE
from .repairs import REPAIR_WINDOW
from .text import TERMINAL_TABLE_PARTS, paint, render, report_sections

TEXT_WIDTH = 120  # report.txt's width: a wide terminal's, so its tables need few parts

__all__ = ["BadInput", "Report", "build_report", "parse_bench_log", "run_report"]


def _without_cycle_collection(func: Callable[..., int]) -> Callable[..., int]:
    """`func` run with Python's cyclic garbage collector off, as it was after. A report holds
    hundreds of thousands of long-lived containers (every results.json parsed, every host's
    peers), and each full collection walks them all: a fifth of a 1,000-node report's CPU time
    (bench.report_repairs: 4.15 -> 3.1-3.5 s in process) for nothing, since they live to the end.
    Reference counting still frees what is not a cycle ("you can disable the collector if you
    are sure your program does not create reference cycles", https://docs.python.org/3/library/gc.html);
    the few cycles made meanwhile (matplotlib's figures) wait for the next collection
    (+8 MiB)."""
    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> int:
        was_on = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if was_on:
                gc.enable()
    return run


@_without_cycle_collection
def run_report(
    logs_dir: Path = Path(LOGS_DIR),
    out_dir: Path | None = None,
    baseline: str | None = None,
    outlier_pct: float = 15.0,
    regression_pct: float = 10.0,
    fail_on_outlier: bool = False,
    terminal: Terminal | None = None,
    prometheus_path: Path | None = None,
    quarantine: tuple[int, int] = QUARANTINE,
    json_path: str | None = None,
    repair_window: int = REPAIR_WINDOW,
) -> int:
    """Build, print and write the report; return the exit status (see module docstring)."""
    terminal = terminal or Terminal(sys.stderr if json_path == "-" else None)
    try:
        if outlier_pct < 0 or regression_pct < 0:
            raise BadInput("--threshold must be a percentage >= 0")
        report = build_report(Path(logs_dir), baseline, outlier_pct, regression_pct, quarantine,
                              repair_window)
    except BadInput as exc:
        print(f"report: {exc}", file=sys.stderr)
        return EXIT_INPUT
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir()
    paths = write_outputs(report, out_dir)
    paths["txt"] = out_dir / "report.txt"
    sections = report_sections(report)  # made once, printed twice
    paths["txt"].write_text(paint(render(report, TEXT_WIDTH, sections=sections), color=False),
                            encoding="utf-8")
    if prometheus_path is not None:
        from .prometheus import write_prometheus  # prometheus_client only when asked

        try:
            write_prometheus(prometheus_path, report.runs, report.history, report.repairs)
        except OSError as exc:
            print(f"report: cannot write {prometheus_path}: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_INPUT
        paths["prometheus"] = prometheus_path
    if json_path == "-":
        sys.stdout.write(paths["json"].read_text(encoding="utf-8"))
    elif json_path is not None:
        try:
            shutil.copyfile(paths["json"], json_path)
        except OSError as exc:
            print(f"report: cannot write {json_path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INPUT
    terminal.write(paint(render(report, terminal.width, TERMINAL_TABLE_PARTS, sections) + [
        [], [(f"Wrote {out_dir}/: " + ", ".join(p.name for p in paths.values()), "")]],
        terminal.color))
    # --fail-on-outlier: a flagged host is the report's failure, status 1 as a failed step's
    return EXIT_STEP_FAILED if fail_on_outlier and report.flagged else EXIT_OK


def default_out_dir(now: _dt.datetime | None = None) -> Path:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    base = Path("reports") / now.strftime("%Y%m%dT%H%M%SZ")
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def write_outputs(report: Report, out_dir: Path) -> dict[str, Path]:
    """Write every file of `exports.EXPORTS` (all but report.txt); returns {key: path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for export in EXPORTS.values():
        path = out_dir / export.file
        export.write(report, path, paths)
        paths[export.key] = path
    return paths
