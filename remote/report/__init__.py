"""Compare benchmark logs across hosts and runs; flag slow hosts and regressions.

Entry point (what ``invoke report`` calls)::

    run_report(logs_dir: Path = Path("logs"), out_dir: Path | None = None,
               baseline: str | None = None, outlier_pct: float = 15.0,
               regression_pct: float = 10.0, fail_on_outlier: bool = False,
               console: rich.console.Console | None = None) -> int

``invoke report [--logs DIR] [--out DIR] [--baseline RUN-OR-HOST] [--threshold PCT]
[--fail-on-outlier]`` maps to it; ``--threshold PCT`` sets both ``outlier_pct`` and
``regression_pct`` (their defaults differ: 15 and 10).

Returns the exit status: 0 normally; 1 when ``fail_on_outlier`` is set and something was
flagged (a slow host *or* a regression); 2 on bad input (logs folder missing, ``baseline``
names no host or run), with a one-line message on stderr. Bad or unreadable log files are
never an error: each is reported by file (and line) and skipped.

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
- ``flags.json``     machine-readable: outliers, regressions, health, problems, thresholds.
- ``latency.png``    per-model latency of each host's latest run (log scale, slow hosts red).
- ``regressions.png`` change of each host's latest run vs its previous run (or baseline).
- ``report.html``    self-contained (images as data: URIs, inline CSS, no network).
- ``report.txt``     the printed report as plain text.

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
- Columns are matched between runs by head label; two runs with one column each are compared
  whatever their labels are (a label may carry a version string).

The core functions (``collect``, ``build_report``, ``parse_bench_log`` ...) return data and
never print; ``run_report`` prints and writes files.
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import re
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError

BENCH_LOG = "bench_torch.log"
RESULTS = "results.json"
UNKNOWN_GPU = "unknown GPU"
MISSING = "-"
MAX_REGRESSION_LINES = 5  # more regressions than this on one host: one line for the host

# ---------------------------------------------------------------------------------------
# data


@dataclass
class Problem:
    """A file (or line) that could not be used; it was skipped."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


@dataclass
class Run:
    host: str
    run_id: str
    path: Path
    # label -> model -> batch-1 latency in ms; label None = values before any #head line
    latency: dict[str | None, dict[str, float]] = field(default_factory=dict)
    source: str | None = None  # BENCH_LOG or RESULTS: where `latency` came from
    results: dict | None = None  # parsed results.json (a dict), None when absent or bad

    @property
    def key(self) -> str:
        return f"{self.host}/{self.run_id}"

    @property
    def gpu_name(self) -> str | None:
        host = (self.results or {}).get("host")
        name = host.get("gpu_name") if isinstance(host, dict) else None
        return name.strip() if isinstance(name, str) and name.strip() else None

    @property
    def group(self) -> str | None:
        """Fleet group: the GPU model; for a run on CPU (device "cpu", no GPU name)
        "CPU only" plus the CPU model when known; None when results.json does not say."""
        if self.gpu_name:
            return self.gpu_name
        host = (self.results or {}).get("host")
        if isinstance(host, dict) and host.get("device") == "cpu":
            cpu = host.get("cpu")
            return f"CPU only ({cpu.strip()})" if isinstance(cpu, str) and cpu.strip() else "CPU only"
        return None

    def column_name(self, label: str | None) -> str:
        if len(self.latency) > 1:
            return f"{self.key}/{label if label is not None else MISSING}"
        return self.key


@dataclass
class Column:
    host: str
    run_id: str
    label: str | None
    name: str


@dataclass
class Table:
    columns: list[Column]
    models: list[str]
    values: dict[tuple[str, str], float]  # (model, column name) -> ms

    def cell(self, model: str, column: Column) -> float | None:
        return self.values.get((model, column.name))


@dataclass
class ModelRatio:
    label: str | None
    model: str
    value: float
    reference: float  # the peers' median (outliers) or the baseline value (regressions)
    multi: bool = False  # the run has several head labels: name the label when showing it

    @property
    def name(self) -> str:
        return f"{self.model} [{self.label}]" if self.multi else self.model

    @property
    def pct(self) -> float:
        return (self.value / self.reference - 1.0) * 100.0


@dataclass
class HostComparison:
    """One host's latest run against the median of its GPU group's peers."""

    host: str
    run_id: str
    gpu: str
    peers: list[str]
    ratios: list[ModelRatio]
    typical_pct: float | None  # median over models of (value / peers' median - 1) * 100
    slow: bool

    @property
    def worst(self) -> ModelRatio | None:
        return max(self.ratios, key=lambda r: r.pct) if self.ratios else None

    def describe(self) -> str:
        worst = self.worst
        pct = self.typical_pct or 0.0
        return (
            f"{self.host} ({self.gpu}): {abs(pct):.1f}% {'slower' if pct >= 0 else 'faster'} "
            f"than the median of its {len(self.peers)} peer{'s' if len(self.peers) != 1 else ''}"
            f" (typical of {len(self.ratios)} model{'s' if len(self.ratios) != 1 else ''}"
            + (f"; worst {worst.name} {worst.pct:+.1f}%" if worst else "")
            + f"), run {self.run_id}"
        )


@dataclass
class RunComparison:
    """One host's latest run against its previous run or the baseline."""

    host: str
    run_id: str
    base_host: str
    base_run_id: str
    changes: list[ModelRatio]
    regressions: list[ModelRatio]

    @property
    def base_key(self) -> str:
        return f"{self.base_host}/{self.base_run_id}"


@dataclass
class CheckRow:
    name: str
    status: str
    required: bool
    reason: str


@dataclass
class SpecFigure:
    name: str  # e.g. "bf16_tflops", "d2d_gbs"
    value: float | None
    spec: float | None
    ratio: float | None


@dataclass
class HostHealth:
    host: str
    run_id: str
    ok: bool | None
    device: str | None
    gpu: str | None
    gpu_count: int | None
    versions: dict[str, str]
    checks: list[CheckRow]
    matmul: list[SpecFigure]
    bandwidth: list[SpecFigure]

    @property
    def failed(self) -> list[CheckRow]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def skipped(self) -> list[CheckRow]:
        return [c for c in self.checks if c.status == "skip"]

    def skipped_groups(self) -> list[tuple[bool, str, list[str]]]:
        """Skipped checks grouped by (required, reason): [(required, reason, names)],
        required first, so eleven "not selected" skips read as one line."""
        groups: dict[tuple[bool, str], list[str]] = {}
        for c in self.skipped:
            groups.setdefault((c.required, c.reason), []).append(c.name)
        return [(req, reason, names) for (req, reason), names in
                sorted(groups.items(), key=lambda kv: not kv[0][0])]

    @property
    def passed(self) -> list[CheckRow]:
        return [c for c in self.checks if c.status == "pass"]


@dataclass
class Report:
    logs_dir: Path
    generated: str
    outlier_pct: float
    regression_pct: float
    baseline: str | None
    runs: list[Run]
    problems: list[Problem]
    table: Table
    groups: dict[str, list[str]]  # GPU model -> hosts
    fleet: list[HostComparison]
    comparisons: list[RunComparison]
    health: list[HostHealth]
    notes: list[str]

    @property
    def outliers(self) -> list[HostComparison]:
        return [h for h in self.fleet if h.slow]

    @property
    def regressions(self) -> list[tuple[RunComparison, ModelRatio]]:
        return [(c, r) for c in self.comparisons for r in c.regressions]

    @property
    def flagged(self) -> bool:
        return bool(self.outliers or self.regressions)

    def flag_lines(self) -> list[str]:
        """One line per flag, slow hosts first: what an operator reads first."""
        lines = [f"SLOW HOST {h.describe()}" for h in self.outliers]
        for comp in self.comparisons:
            regs = comp.regressions
            if len(regs) > MAX_REGRESSION_LINES:  # one line for the host, worst first
                lines.append(
                    f"REGRESSION {comp.host}: {len(regs)} of {len(comp.changes)} models slower "
                    f"by more than {self.regression_pct:g}%: "
                    + ", ".join(f"{r.name} {r.pct:+.1f}%" for r in regs)
                    + f"; run {comp.run_id} vs {comp.base_key}"
                )
                continue
            for r in regs:
                lines.append(
                    f"REGRESSION {comp.host} {r.name}: {fmt_ms(r.reference)} -> "
                    f"{fmt_ms(r.value)} ms ({r.pct:+.1f}%), run {comp.run_id} vs {comp.base_key}"
                )
        return lines


class BadInput(InputError):
    """Bad option or missing folder: exit status 2 with this one-line message."""


# ---------------------------------------------------------------------------------------
# reading

_LINE = re.compile(r"^#([^;]*);(.*)$")


def parse_bench_log(
    text: str, path: str = BENCH_LOG
) -> tuple[dict[str | None, dict[str, float]], list[Problem]]:
    """Parse the seed's format. Returns ({label: {model: ms}}, problems).

    ``#head;LABEL`` starts a column, ``#model;ms`` records a value (a positive number).
    Lines not starting with ``#`` or without ``;`` are ignored (program output, comments,
    ``#!/bin/bash``). A ``#...;...`` line that does not parse is a problem and is skipped;
    a repeated model within a column keeps the last value (reported).
    """
    columns: dict[str | None, dict[str, float]] = {}
    problems: list[Problem] = []
    label: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _LINE.match(line)
        if not m:
            continue
        name, rest = m.group(1).strip(), m.group(2).strip()
        shown = line if len(line) <= 60 else line[:57] + "..."
        if name == "head":
            if not rest or ";" in rest:
                problems.append(Problem(path, f"malformed head line {shown!r}: skipped", lineno))
                continue
            label = rest
            columns.setdefault(label, {})
            continue
        if not name or any(ch.isspace() for ch in name):
            problems.append(
                Problem(path, f"malformed line {shown!r}: no model name: skipped", lineno)
            )
            continue
        try:
            value = float(rest)
        except ValueError:
            problems.append(
                Problem(path, f"malformed line {shown!r}: {rest!r} is not a number: skipped",
                        lineno)
            )
            continue
        if not math.isfinite(value) or value <= 0:
            problems.append(
                Problem(path, f"malformed line {shown!r}: latency must be > 0 ms: skipped",
                        lineno)
            )
            continue
        column = columns.setdefault(label, {})
        if name in column:
            problems.append(
                Problem(path, f"{name} appears again (was {fmt_ms(column[name])} ms); "
                        "keeping the later value", lineno)
            )
        column[name] = value
    return {k: v for k, v in columns.items() if v}, problems


def read_bench_log(path: Path, shown: str) -> tuple[dict[str | None, dict[str, float]], list[Problem]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return {}, [Problem(shown, f"unreadable ({exc.strerror or exc}): skipped")]
    if not data.strip():
        return {}, [Problem(shown, "empty file: skipped")]
    columns, problems = parse_bench_log(data.decode("utf-8", errors="replace"), shown)
    if not columns:
        problems.append(Problem(shown, "no benchmark values (no '#model;ms' lines): skipped"))
    return columns, problems


def read_results(path: Path, shown: str) -> tuple[dict | None, list[Problem]]:
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        return None, [Problem(shown, f"unreadable ({exc.strerror or exc}): skipped")]
    if not text.strip():
        return None, [Problem(shown, "empty file: skipped")]
    try:
        data = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        msg = getattr(exc, "msg", str(exc))
        return None, [Problem(shown, f"not valid JSON ({msg}): skipped", line)]
    if not isinstance(data, dict):
        return None, [Problem(shown, f"not a JSON object (a {type(data).__name__}): skipped")]
    problems = []
    schema = data.get("schema")
    if schema != 1:
        problems.append(Problem(shown, f"schema {schema!r} is not 1; reading what matches"))
    return data, problems


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def check(results: dict | None, name: str) -> dict | None:
    """The first check called ``name`` in results.json, or None."""
    checks = (results or {}).get("checks")
    if not isinstance(checks, list):
        return None
    for item in checks:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return None


def bench_from_results(results: dict | None) -> dict[str, float]:
    """Batch-1 median latency per model from the ``bench`` check's figures."""
    models = _get(check(results, "bench"), "figures", "models")
    out: dict[str, float] = {}
    if isinstance(models, dict):
        for model, figs in models.items():
            value = _num(_get(figs, "latency_ms", "median"))
            if isinstance(model, str) and model and value is not None and value > 0:
                out[model] = value
    return out


def collect(logs_dir: Path) -> tuple[list[Run], list[Problem]]:
    """Read every ``logs_dir/<host>/<run>/``. Runs sorted by host, then run id."""
    logs_dir = Path(logs_dir)
    runs: list[Run] = []
    problems: list[Problem] = []

    def shown(p: Path) -> str:
        return str(p)

    for host_dir in _subdirs(logs_dir, problems, shown):
        run_dirs = _subdirs(host_dir, problems, shown)
        if not run_dirs:
            problems.append(Problem(shown(host_dir), "no run folders: skipped"))
        for run_dir in run_dirs:
            run = Run(host=host_dir.name, run_id=run_dir.name, path=run_dir)
            res_path, log_path = run_dir / RESULTS, run_dir / BENCH_LOG
            if not res_path.exists() and not log_path.exists():
                problems.append(
                    Problem(shown(run_dir), f"neither {RESULTS} nor {BENCH_LOG}: skipped")
                )
                continue
            if res_path.exists():
                run.results, probs = read_results(res_path, shown(res_path))
                problems += probs
            if log_path.exists():
                columns, probs = read_bench_log(log_path, shown(log_path))
                problems += probs
                if columns:
                    run.latency, run.source = columns, BENCH_LOG
            if not run.latency:
                values = bench_from_results(run.results)
                if values:
                    run.latency, run.source = {None: values}, RESULTS
            if run.results is None and not run.latency:
                continue  # nothing usable; the problems above say why
            runs.append(run)
    runs.sort(key=lambda r: (r.host, r.run_id))
    return runs, problems


def _subdirs(path: Path, problems: list[Problem], shown) -> list[Path]:
    try:
        entries = sorted(path.iterdir())
    except OSError as exc:
        problems.append(Problem(shown(path), f"unreadable folder ({exc.strerror or exc}): skipped"))
        return []
    return [e for e in entries if e.is_dir() and not e.name.startswith(".")]


# ---------------------------------------------------------------------------------------
# merging and comparing


def has_label(col: Column) -> bool:
    """True when the column's name carries its head label (its run has several)."""
    return col.name != f"{col.host}/{col.run_id}"


def merge_table(runs: Iterable[Run]) -> Table:
    columns: list[Column] = []
    values: dict[tuple[str, str], float] = {}
    models: set[str] = set()
    for run in runs:
        labels = sorted(run.latency, key=lambda lab: (lab is not None, lab or ""))
        for label in labels:
            col = Column(run.host, run.run_id, label, run.column_name(label))
            columns.append(col)
            for model, ms in run.latency[label].items():
                values[(model, col.name)] = ms
                models.add(model)
    return Table(columns, sorted(models), values)


def counterpart(label: str | None, run: Run, other: Run) -> str | None | bool:
    """The label in ``other`` that matches ``label`` of ``run``; False when none does."""
    if label in other.latency:
        return label
    if len(run.latency) == 1 and len(other.latency) == 1:
        return next(iter(other.latency))
    return False


def _latest_with_values(runs: list[Run]) -> dict[str, Run]:
    latest: dict[str, Run] = {}
    for run in runs:  # sorted by run id within a host
        if run.latency:
            latest[run.host] = run
    return latest


def host_gpus(runs: list[Run]) -> dict[str, str]:
    """Host -> its group from its latest results.json that names one: the GPU model, or
    "CPU only (...)" for a CPU run; UNKNOWN_GPU when no results.json says."""
    gpus: dict[str, str] = {}
    for run in runs:
        gpus.setdefault(run.host, UNKNOWN_GPU)
        if run.group:
            gpus[run.host] = run.group
    return gpus


def find_outliers(runs: list[Run], outlier_pct: float) -> tuple[dict[str, list[str]], list[HostComparison]]:
    latest = _latest_with_values(runs)
    gpus = host_gpus(runs)
    groups: dict[str, list[str]] = {}
    for host in sorted(latest):
        groups.setdefault(gpus[host], []).append(host)
    fleet: list[HostComparison] = []
    for gpu, hosts in groups.items():
        for host in hosts:
            run = latest[host]
            peers = [latest[h] for h in hosts if h != host]
            ratios: list[ModelRatio] = []
            for label, models in run.latency.items():
                for model, value in models.items():
                    refs = []
                    for peer in peers:
                        lab = counterpart(label, run, peer)
                        if lab is not False and model in peer.latency[lab]:
                            refs.append(peer.latency[lab][model])
                    if refs:
                        ratios.append(ModelRatio(label, model, value, statistics.median(refs),
                                                 multi=len(run.latency) > 1))
            typical = statistics.median(r.pct for r in ratios) if ratios else None
            fleet.append(
                HostComparison(
                    host, run.run_id, gpu, [p.host for p in peers], ratios, typical,
                    slow=typical is not None and typical > outlier_pct,
                )
            )
    return groups, fleet


def _baseline_runs(runs: list[Run], baseline: str | None) -> dict[str, Run | None]:
    """Host -> the run its latest run is compared with (None: nothing to compare with)."""
    latest = _latest_with_values(runs)
    by_host: dict[str, list[Run]] = {}
    for run in runs:
        if run.latency:
            by_host.setdefault(run.host, []).append(run)
    out: dict[str, Run | None] = {}
    if baseline is None:
        for host, run in latest.items():
            earlier = [r for r in by_host[host] if r.run_id < run.run_id]
            out[host] = earlier[-1] if earlier else None
        return out
    base = baseline.strip().strip("/")
    if "/" in base:
        b_host, b_run = base.split("/", 1)
        match = [r for r in by_host.get(b_host, []) if r.run_id == b_run]
        if not match:
            raise BadInput(f"--baseline {baseline}: no run {b_run!r} with benchmark values "
                           f"for host {b_host!r}")
        return {host: match[0] for host in latest}
    if base in by_host:
        return {host: (latest[base] if host != base else None) for host in latest}
    if any(r.run_id == base for rs in by_host.values() for r in rs):
        return {
            host: next((r for r in by_host[host] if r.run_id == base), None) for host in latest
        }
    raise BadInput(f"--baseline {baseline}: names no host or run with benchmark values")


def find_regressions(runs: list[Run], regression_pct: float, baseline: str | None = None) -> list[RunComparison]:
    latest = _latest_with_values(runs)
    bases = _baseline_runs(runs, baseline)
    out: list[RunComparison] = []
    for host in sorted(latest):
        run, base = latest[host], bases.get(host)
        if base is None or base is run:
            continue
        changes: list[ModelRatio] = []
        for label, models in run.latency.items():
            lab = counterpart(label, run, base)
            if lab is False:
                continue
            for model, value in models.items():
                ref = base.latency[lab].get(model)
                if ref is not None:
                    changes.append(ModelRatio(label, model, value, ref,
                                              multi=len(run.latency) > 1))
        regressions = sorted(
            (c for c in changes if c.pct > regression_pct), key=lambda c: -c.pct
        )
        out.append(RunComparison(host, run.run_id, base.host, base.run_id, changes, regressions))
    return out


_SPEC_KEYS = {
    "matmul": ("fp32_tflops", "tf32_tflops", "bf16_tflops"),
    "bandwidth": ("d2d_gbs", "h2d_gbs", "d2h_gbs"),
}


def _spec_figures(results: dict, check_name: str) -> list[SpecFigure]:
    figs = _get(check(results, check_name), "figures")
    if not isinstance(figs, dict):
        return []
    out = []
    for key in _SPEC_KEYS[check_name]:
        value = _num(figs.get(key))
        spec = _num(_get(figs, "spec", key))
        ratio = _num(_get(figs, "ratio", key))
        if ratio is None and value is not None and spec:
            ratio = value / spec
        if value is not None or spec is not None:
            out.append(SpecFigure(key, value, spec, ratio))
    return out


def health_summary(runs: list[Run]) -> list[HostHealth]:
    """Per host, its latest run with a readable results.json."""
    latest: dict[str, Run] = {}
    for run in runs:
        if run.results is not None:
            latest[run.host] = run
    out = []
    for host in sorted(latest):
        run = latest[host]
        res = run.results or {}
        info = res.get("host") if isinstance(res.get("host"), dict) else {}
        checks = []
        for item in res.get("checks") or []:
            if not isinstance(item, dict):
                continue
            checks.append(CheckRow(
                name=str(item.get("name", "?")),
                status=str(item.get("status", "?")),
                required=bool(item.get("required", False)),
                reason=str(item.get("reason") or ""),
            ))
        count = info.get("gpu_count")
        ok = res.get("ok")
        out.append(HostHealth(
            host=host, run_id=run.run_id,
            ok=ok if isinstance(ok, bool) else None,
            device=info.get("device") if isinstance(info.get("device"), str) else None,
            gpu=run.gpu_name,
            gpu_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            versions={k: str(info[k]) for k in ("driver", "cuda", "torch")
                      if info.get(k) not in (None, "")},
            checks=checks,
            matmul=_spec_figures(res, "matmul"),
            bandwidth=_spec_figures(res, "bandwidth"),
        ))
    return out


def build_report(
    logs_dir: Path,
    baseline: str | None = None,
    outlier_pct: float = 15.0,
    regression_pct: float = 10.0,
) -> Report:
    """Read, merge and compare; no output. Raises BadInput for a missing logs folder or
    a baseline that names nothing."""
    logs_dir = Path(logs_dir)
    if not logs_dir.is_dir():
        raise BadInput(f"logs folder {logs_dir} does not exist")
    runs, problems = collect(logs_dir)
    groups, fleet = find_outliers(runs, outlier_pct)
    comparisons = find_regressions(runs, regression_pct, baseline)
    notes = []
    if not runs:
        notes.append(f"no runs found under {logs_dir}/<host>/<run>/")
    for gpu, hosts in groups.items():
        if len(hosts) == 1:
            notes.append(f"{hosts[0]} is the only host in its GPU group ({gpu}): "
                         "no fleet comparison")
    with_values = {r.host for r in runs if r.latency}
    uncompared = sorted(with_values - {c.host for c in comparisons})
    if uncompared:
        notes.append(
            ("no earlier run to compare with: " if baseline is None
             else f"baseline {baseline} gives nothing to compare with: ")
            + ", ".join(uncompared)
        )
    return Report(
        logs_dir=logs_dir,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        outlier_pct=outlier_pct, regression_pct=regression_pct, baseline=baseline,
        runs=runs, problems=problems, table=merge_table(runs), groups=groups,
        fleet=fleet, comparisons=comparisons, health=health_summary(runs), notes=notes,
    )


# ---------------------------------------------------------------------------------------
# writing


def fmt_ms(value: float | None) -> str:
    if value is None:
        return MISSING
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _csv_value(value: float | None) -> str:
    if value is None:
        return MISSING
    return f"{value:.6f}".rstrip("0").rstrip(".")


def table_csv(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=";", lineterminator="\n")
    writer.writerow(["model"] + [c.name for c in table.columns])
    for model in table.models:
        writer.writerow([model] + [_csv_value(table.cell(model, c)) for c in table.columns])
    return buf.getvalue()


def flags_json(report: Report) -> dict:
    def ratio(r: ModelRatio, ref_name: str) -> dict:
        return {"model": r.model, "label": r.label, "ms": r.value, ref_name: r.reference,
                "pct": round(r.pct, 3)}

    return {
        "schema": 1,
        "generated": report.generated,
        "logs_dir": str(report.logs_dir),
        "thresholds": {"outlier_pct": report.outlier_pct,
                       "regression_pct": report.regression_pct},
        "baseline": report.baseline,
        "flagged": report.flagged,
        "flags": report.flag_lines(),
        "outliers": [
            {"host": h.host, "run": h.run_id, "gpu": h.gpu, "peers": h.peers,
             "typical_pct": round(h.typical_pct, 3), "models": len(h.ratios),
             "worst": ratio(h.worst, "peers_median_ms") if h.worst else None}
            for h in report.outliers
        ],
        "regressions": [
            {"host": c.host, "run": c.run_id, "baseline": c.base_key,
             **ratio(r, "baseline_ms")}
            for c, r in report.regressions
        ],
        "fleet": [
            {"host": h.host, "run": h.run_id, "gpu": h.gpu, "peers": h.peers,
             "typical_pct": None if h.typical_pct is None else round(h.typical_pct, 3),
             "slow": h.slow, "models": [ratio(r, "peers_median_ms") for r in h.ratios]}
            for h in report.fleet
        ],
        "comparisons": [
            {"host": c.host, "run": c.run_id, "baseline": c.base_key,
             "changes": [ratio(r, "baseline_ms") for r in c.changes]}
            for c in report.comparisons
        ],
        "health": [
            {**{k: v for k, v in asdict(h).items() if k not in ("checks",)},
             "failed": [asdict(c) for c in h.failed],
             "skipped": [asdict(c) for c in h.skipped],
             "passed": [c.name for c in h.passed]}
            for h in report.health
        ],
        "problems": [asdict(p) for p in report.problems],
        "notes": report.notes,
        "runs": [{"host": r.host, "run": r.run_id, "source": r.source,
                  "gpu": r.gpu_name} for r in report.runs],
    }


def default_out_dir(now: _dt.datetime | None = None) -> Path:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    base = Path("reports") / now.strftime("%Y%m%dT%H%M%SZ")
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def write_outputs(report: Report, out_dir: Path) -> dict[str, Path]:
    """Write every output file; returns {kind: path}."""
    from . import plot  # matplotlib is only needed here

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "csv": out_dir / "merged.csv",
        "json": out_dir / "flags.json",
        "latency_png": out_dir / "latency.png",
        "regressions_png": out_dir / "regressions.png",
        "html": out_dir / "report.html",
    }
    paths["csv"].write_text(table_csv(report.table), encoding="utf-8")
    paths["json"].write_text(json.dumps(flags_json(report), indent=2) + "\n", encoding="utf-8")
    plot.latency_png(report, paths["latency_png"])
    plot.regressions_png(report, paths["regressions_png"])
    plot.write_html(report, paths["html"],
                    {"latency": paths["latency_png"], "regressions": paths["regressions_png"]})
    return paths


# ---------------------------------------------------------------------------------------
# printing (rich)


def render(report: Report, console) -> None:
    """Print the report: flags first, then bad logs, fleet, health, the merged table."""
    from rich.table import Table as RTable
    from rich.text import Text

    # every string from the logs goes in as Text: a name like "RTX 3080 [LHR]" is not markup
    console.rule(Text(f"gpuprov report: {report.logs_dir}"))
    n_hosts = len({r.host for r in report.runs})
    console.print(Text(
        f"{_plural(len(report.runs), 'run')} on {_plural(n_hosts, 'host')}; "
        f"slow host: > {report.outlier_pct:g}% vs GPU-group peers; regression: > "
        f"{report.regression_pct:g}% vs "
        + (f"baseline {report.baseline}" if report.baseline else "previous run")
    ))
    console.print()
    flags = report.flag_lines()
    if flags:
        console.print(Text(f"FLAGS ({len(flags)})", style="bold red"))
        for line in flags:
            console.print(Text("  " + line, style="red"), soft_wrap=True)
    else:
        console.print(Text("FLAGS: none (no slow host, no regression)", style="bold green"))
    if report.problems:
        console.print()
        console.print(Text(f"SKIPPED / BAD LOGS ({len(report.problems)})", style="bold yellow"))
        for p in report.problems:
            console.print(Text(f"  {p}", style="yellow"), soft_wrap=True)
    if report.notes:
        console.print()
        for note in report.notes:
            console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)

    if report.fleet:
        console.print()
        t = RTable(title="Fleet: latest run vs GPU-group peers", title_justify="left",
                   box=None, pad_edge=False)
        host_w = max(len(h.host) + (5 if h.slow else 0) for h in report.fleet)
        t.add_column("host", no_wrap=True, min_width=host_w)
        t.add_column("GPU group", no_wrap=True, overflow="ellipsis")
        t.add_column("run", no_wrap=True, min_width=max(len(h.run_id) for h in report.fleet))
        t.add_column("peers", justify="right", no_wrap=True, min_width=5)
        t.add_column("models", justify="right", no_wrap=True, min_width=6)
        t.add_column("typical", justify="right", no_wrap=True, min_width=7)
        t.add_column("worst model", no_wrap=True, overflow="ellipsis")
        for h in report.fleet:
            worst = h.worst
            host = Text(h.host)
            if h.slow:
                host.append(" SLOW", style="bold red")
            t.add_row(
                host, Text(h.gpu), Text(h.run_id), str(len(h.peers)), str(len(h.ratios)),
                Text(MISSING if h.typical_pct is None else f"{h.typical_pct:+.1f}%",
                     style="bold red" if h.slow else ""),
                Text(f"{worst.name} {worst.pct:+.1f}%") if worst else MISSING,
            )
        console.print(t)

    if report.health:
        console.print()
        t = RTable(title="Health (latest results.json per host)", title_justify="left",
                   box=None, pad_edge=False)
        t.add_column("host", no_wrap=True, min_width=max(len(h.host) for h in report.health))
        t.add_column("run", no_wrap=True, min_width=max(len(h.run_id) for h in report.health))
        t.add_column("result", no_wrap=True, min_width=6)
        t.add_column("GPU", no_wrap=True, overflow="ellipsis")
        t.add_column("checks\npass/fail/skip", no_wrap=True, min_width=14)
        t.add_column("matmul %spec\nfp32/tf32/bf16", no_wrap=True, min_width=14)
        t.add_column("bandwidth %spec\nd2d/h2d/d2h", no_wrap=True, min_width=15)
        for h in report.health:
            counts = Text(f"{len(h.passed)}/")
            counts.append(str(len(h.failed)), style="bold red" if h.failed else "")
            counts.append(f"/{len(h.skipped)}", style="yellow" if h.skipped else "")
            t.add_row(
                Text(h.host), Text(h.run_id),
                Text("ok" if h.ok else ("FAIL" if h.ok is False else "?"),
                     style="green" if h.ok else "bold red"),
                Text(_device_text(h)), counts,
                _spec_text(h.matmul, _SPEC_KEYS["matmul"]),
                _spec_text(h.bandwidth, _SPEC_KEYS["bandwidth"]),
            )
        console.print(t)
        for h in report.health:
            for c in h.failed:
                console.print(Text(f"  {h.host}: FAILED {_check_text(c)}", style="red"),
                              soft_wrap=True)
            for required, reason, names in h.skipped_groups():
                what = " (required: not validated)" if required else " (optional)"
                console.print(Text(f"  {h.host}: SKIPPED {', '.join(names)}{what}"
                                   + (f": {reason}" if reason else ""),
                                   style="yellow" if required else ""), soft_wrap=True)

    console.print()
    for t in latency_tables(report, console.width):
        console.print(Text(t.title), highlight=False)  # above the table, never wrapped
        t.title = None
        console.print(t)
    console.print(Text("red column: slow host; red value: regression", style="dim"))


def latency_tables(report: Report, width: int) -> list:
    """The merged table as rich Tables, its columns split into chunks that fit ``width``
    (the model column repeated), like a wide data frame printed in a narrow terminal."""
    from rich.table import Table as RTable
    from rich.text import Text

    table = report.table
    slow_hosts = {h.host: h.run_id for h in report.outliers}
    regressed = {(c.host, c.run_id, r.label, r.model) for c, r in report.regressions}
    model_w = max([len("model")] + [len(m) for m in table.models]) + 3
    chunks: list[list[Column]] = [[]]
    used = model_w + 1
    for col in table.columns:
        w = _column_width(col) + 3
        if chunks[-1] and used + w > width:
            chunks.append([])
            used = model_w + 1
        chunks[-1].append(col)
        used += w
    out = []
    for i, cols in enumerate(chunks):
        title = "Batch-1 latency, ms (row per model, column per host/run)"
        if len(chunks) > 1:
            title += f", part {i + 1} of {len(chunks)}"
        t = RTable(title=title, title_justify="left")
        t.add_column("model", no_wrap=True)
        for col in cols:
            head = f"{col.host}\n{col.run_id}" + (f"\n{col.label}" if has_label(col) else "")
            style = "bold red" if slow_hosts.get(col.host) == col.run_id else ""
            t.add_column(Text(head, style=style), justify="right", no_wrap=True,
                         min_width=_column_width(col))
        for model in table.models:
            cells = []
            for col in cols:
                bad = (col.host, col.run_id, col.label, model) in regressed
                cells.append(Text(fmt_ms(table.cell(model, col)),
                                  style="bold red" if bad else ""))
            t.add_row(Text(model), *cells)
        out.append(t)
    return out


def _column_width(col: Column) -> int:
    return max(len(col.host), len(col.run_id), len(col.label or "") if has_label(col) else 0, 7)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _check_text(c: CheckRow) -> str:
    if c.status == "skip" and c.required:
        req = " (required: not validated)"
    else:
        req = "" if c.required else " (optional)"
    return f"{c.name}{req}: {c.reason}" if c.reason else f"{c.name}{req}"


def _device_text(h: HostHealth) -> str:
    if h.gpu:
        name = h.gpu[len("NVIDIA "):] if h.gpu.startswith("NVIDIA ") else h.gpu
        return f"{h.gpu_count or '?'}x {name}"
    return f"({h.device or '?'})"


def _spec_text(figs: list[SpecFigure], keys: tuple[str, ...]) -> str:
    """Ratios vs spec in ``keys`` order, e.g. '93/76/74%'; '-' where unknown."""
    by_name = {f.name: f for f in figs}
    parts = []
    for key in keys:
        f = by_name.get(key)
        parts.append(f"{f.ratio * 100:.0f}" if f and f.ratio is not None else MISSING)
    return MISSING if all(p == MISSING for p in parts) else "/".join(parts) + "%"


def run_report(
    logs_dir: Path = Path("logs"),
    out_dir: Path | None = None,
    baseline: str | None = None,
    outlier_pct: float = 15.0,
    regression_pct: float = 10.0,
    fail_on_outlier: bool = False,
    console=None,
) -> int:
    """Build, print and write the report; return the exit status (see module docstring)."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    try:
        if outlier_pct < 0 or regression_pct < 0:
            raise BadInput("--threshold must be a percentage >= 0")
        report = build_report(Path(logs_dir), baseline, outlier_pct, regression_pct)
    except BadInput as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir()
    paths = write_outputs(report, out_dir)

    text_console = Console(file=io.StringIO(), width=120,
                           no_color=True, highlight=False, emoji=False)
    render(report, text_console)
    (out_dir / "report.txt").write_text(text_console.file.getvalue(), encoding="utf-8")
    paths["txt"] = out_dir / "report.txt"

    render(report, console)
    console.print()
    console.print(Text(f"Wrote {out_dir}/: " + ", ".join(p.name for p in paths.values())),
                  soft_wrap=True)
    return 1 if fail_on_outlier and report.flagged else 0
