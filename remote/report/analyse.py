"""Merging and comparing runs: the merged table, fleet outliers (a host against its GPU group's
peers), regressions (a run against the previous one or a baseline) and the health summary,
gathered in one `Report`. Returns data, never prints.
"""
from __future__ import annotations

import bisect
import datetime as _dt
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from validate.shared import counted

from ..ground.errors import InputError
from ..ground.runfolder import (
    ATTEMPTED_RUN,
    EVIDENCE_RUN,
    FABRIC_RUN,
    NOT_STARTED_RUN,
    PROVISIONED_RUN,
    REMEDIATION_RECORD,
    run_without_results,
)
from .collect import NO_RESULTS, Problem, Results, Run, check, collect, fmt_ms, get, num, read_attempt
from .distjobs import DistJob, find_jobs
from .drift import Drift, find_drift
from .fabric import Fabric, find_fabric
from .history import QUARANTINE, HostHistory, find_history
from .repairs import REPAIR_WINDOW, Repairs, find_repairs
from .tree import LogsTree

UNKNOWN_GPU = "unknown GPU"
MAX_REGRESSION_LINES = 5  # more regressions than this on one host: one line for the host


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
    # the inventory's waivers the run used (results.json `waivers`: check, what)
    waivers: list[tuple[str, str]] = field(default_factory=list)
    # the host's latest validation was started and gave no verdict: why (history.Mark)
    no_verdict: str = ""

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

    @property
    def nothing_counted(self) -> bool:
        """The run's checks all left out or not applicable, none waived by the inventory: no
        verdict of passed (issue 45; validate/shared.py counted)."""
        return bool(self.checks) and not any(c.required for c in self.checks) and not self.waivers


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
    drift: Drift = field(default_factory=Drift)  # hosts whose stack differs from their group's
    history: list[HostHistory] = field(default_factory=list)  # every host's runs, oldest first
    quarantine: tuple[int, int] = QUARANTINE  # (K, N): failed K of its last N runs
    fabric: Fabric = field(default_factory=Fabric)  # the newest `gpuprov fabric` run
    distributed: list[DistJob] = field(default_factory=list)  # validate --distributed's jobs
    now: float = field(default_factory=time.time)  # when it was made: each host's age is to it
    repairs: Repairs = field(default_factory=Repairs)  # each node's remediations (repairs.py)

    @property
    def quarantined(self) -> list[HostHistory]:
        return [h for h in self.history if h.quarantined]

    @property
    def outliers(self) -> list[HostComparison]:
        return [h for h in self.fleet if h.slow]

    @property
    def regressions(self) -> list[tuple[RunComparison, ModelRatio]]:
        return [(c, r) for c in self.comparisons for r in c.regressions]

    @property
    def flagged(self) -> bool:
        return bool(self.outliers or self.regressions or self.drift.flags or self.quarantined
                    or self.fabric.lines())

    def flag_lines(self) -> list[str]:
        """One line per flag, hosts to take out of service first: what an operator reads first."""
        lines = [h.quarantine_line() for h in self.quarantined]
        lines += [f"SLOW HOST {h.describe()}; {self.drift.note(h.host)}" for h in self.outliers]
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
        lines += self.drift.lines()
        lines += self.fabric.lines()
        return lines


class BadInput(InputError):
    """Bad option or missing folder: exit status 2 with this one-line message."""


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


def counterpart(label: str | None, run: Run, other: Run) -> dict[str, float] | None:
    """The values of ``other`` under the label that matches ``label`` of ``run``; None when
    no label does (two runs with one column each match whatever their labels)."""
    if label in other.latency:
        return other.latency[label]
    if len(run.latency) == 1 and len(other.latency) == 1:
        return next(iter(other.latency.values()))
    return None


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


class _PeerPools:
    """The latency values of a GPU group's latest runs, sorted per model, in the pools
    `counterpart` draws peers from: a run with one column compares with every other run with one
    column and with the runs of several that have its label; a run with several, label by label,
    with the runs that have that label. A host's peers' median is its pool's median with its own
    value taken out: the same multiset `statistics.median` saw when each host scanned every peer
    (quadratic in the group's hosts: 1,000 hosts took seconds)."""

    def __init__(self, runs: list[Run]):
        self.single: dict[str, list[float]] = {}  # model -> values of the runs with one column
        self.single_by_label: dict[str | None, dict[str, list[float]]] = {}
        self.multi_by_label: dict[str | None, dict[str, list[float]]] = {}
        for run in runs:
            for label, models in run.latency.items():
                if len(run.latency) == 1:
                    _add(self.single, models)
                    _add(self.single_by_label.setdefault(label, {}), models)
                else:
                    _add(self.multi_by_label.setdefault(label, {}), models)
        self.pools: dict[tuple[bool, str | None], dict[str, list[float]]] = {}

    def pool(self, label: str | None, multi: bool) -> dict[str, list[float]]:
        """model -> sorted values a run's `label` column is compared with (itself included)."""
        key = (multi, label)
        if key not in self.pools:
            merged: dict[str, list[float]] = {}
            for part in (self.single_by_label.get(label, {}) if multi else self.single,
                         self.multi_by_label.get(label, {})):
                for model, values in part.items():
                    merged.setdefault(model, []).extend(values)
            self.pools[key] = {model: sorted(values) for model, values in merged.items()}
        return self.pools[key]


def _add(into: dict[str, list[float]], models: dict[str, float]) -> None:
    for model, value in models.items():
        into.setdefault(model, []).append(value)


def _median_without(values: list[float], value: float) -> float | None:
    """`statistics.median` of the sorted `values` with one `value` (the host's own) taken out;
    None when nothing is left."""
    n = len(values) - 1
    if n <= 0:
        return None
    gap = bisect.bisect_left(values, value)  # values[gap] is the host's own

    def at(k: int) -> float:
        return values[k if k < gap else k + 1]

    if n % 2 == 1:
        return at(n // 2)
    return (at(n // 2 - 1) + at(n // 2)) / 2


def _peer_ratios(run: Run, pools: _PeerPools) -> list[ModelRatio]:
    """Each model of `run` against its peers' median (see `_PeerPools`), in the run's order."""
    multi = len(run.latency) > 1
    ratios: list[ModelRatio] = []
    for label, models in run.latency.items():
        pool = pools.pool(label, multi)
        for model, value in models.items():
            reference = _median_without(pool[model], value)
            if reference is not None:
                ratios.append(ModelRatio(label, model, value, reference, multi=multi))
    return ratios


def find_outliers(runs: list[Run], outlier_pct: float) -> tuple[dict[str, list[str]], list[HostComparison]]:
    latest = _latest_with_values(runs)
    gpus = host_gpus(runs)
    groups: dict[str, list[str]] = {}
    for host in sorted(latest):
        groups.setdefault(gpus[host], []).append(host)
    fleet: list[HostComparison] = []
    for gpu, hosts in groups.items():
        pools = _PeerPools([latest[h] for h in hosts])
        for host in hosts:
            run = latest[host]
            ratios = _peer_ratios(run, pools)
            typical = statistics.median(r.pct for r in ratios) if ratios else None
            fleet.append(
                HostComparison(
                    host, run.run_id, gpu, [h for h in hosts if h != host], ratios, typical,
                    slow=typical is not None and typical > outlier_pct,
                )
            )
    return groups, fleet


def _previous_runs(latest: dict[str, Run], by_host: dict[str, list[Run]]) -> dict[str, Run | None]:
    """No baseline: each host's run before its latest."""
    out: dict[str, Run | None] = {}
    for host, run in latest.items():
        earlier = [r for r in by_host[host] if r.run_id < run.run_id]
        out[host] = earlier[-1] if earlier else None
    return out


def _one_run(base: str, baseline: str, latest: dict[str, Run],
             by_host: dict[str, list[Run]]) -> dict[str, Run | None]:
    """`HOST/RUN`: that one run, for every host."""
    b_host, b_run = base.split("/", 1)
    match = [r for r in by_host.get(b_host, []) if r.run_id == b_run]
    if not match:
        raise BadInput(f"--baseline {baseline}: no run {b_run!r} with benchmark values "
                       f"for host {b_host!r}")
    return {host: match[0] for host in latest}


def _named_baseline(base: str, baseline: str, latest: dict[str, Run],
                    by_host: dict[str, list[Run]]) -> dict[str, Run | None]:
    """A host name (its latest run, for every other host), else a run id (each host's run of
    that id): a host name wins over a run id spelt the same."""
    if base in by_host:
        return {host: (latest[base] if host != base else None) for host in latest}
    if any(r.run_id == base for rs in by_host.values() for r in rs):
        return {
            host: next((r for r in by_host[host] if r.run_id == base), None) for host in latest
        }
    raise BadInput(f"--baseline {baseline}: names no host or run with benchmark values")


def _baseline_runs(runs: list[Run], baseline: str | None) -> dict[str, Run | None]:
    """Host -> the run its latest run is compared with (None: nothing to compare with)."""
    latest = _latest_with_values(runs)
    by_host: dict[str, list[Run]] = {}
    for run in runs:
        if run.latency:
            by_host.setdefault(run.host, []).append(run)
    if baseline is None:
        return _previous_runs(latest, by_host)
    base = baseline.strip().strip("/")
    if "/" in base:
        return _one_run(base, baseline, latest, by_host)
    return _named_baseline(base, baseline, latest, by_host)


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
            base_values = counterpart(label, run, base)
            if base_values is None:
                continue
            for model, value in models.items():
                ref = base_values.get(model)
                if ref is not None:
                    changes.append(ModelRatio(label, model, value, ref,
                                              multi=len(run.latency) > 1))
        regressions = sorted(
            (c for c in changes if c.pct > regression_pct), key=lambda c: -c.pct
        )
        out.append(RunComparison(host, run.run_id, base.host, base.run_id, changes, regressions))
    return out


SPEC_KEYS = {
    "matmul": ("fp32_tflops", "tf32_tflops", "bf16_tflops"),
    "bandwidth": ("d2d_gbs", "h2d_gbs", "d2h_gbs"),
}


def _spec_figures(results: Results, check_name: str) -> list[SpecFigure]:
    figs = get(check(results, check_name), "figures")
    if not isinstance(figs, dict):
        return []
    out = []
    for key in SPEC_KEYS[check_name]:
        value = num(figs.get(key))
        spec = num(get(figs, "spec", key))
        ratio = num(get(figs, "ratio", key))
        if ratio is None and value is not None and spec:
            ratio = num(value / spec)  # 1e308 / 1e-308 overflows to inf
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
        info = res.get("host")
        if not isinstance(info, dict):
            info = {}
        checks = []
        for item in res.get("checks") or []:  # a list of objects: collect checked
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
            # no check ran: not a pass; nothing counted (validate before issue 45 said ok): not either
            ok=(ok and counted(res.get("checks"))) if isinstance(ok, bool) and checks else None,
            device=info.get("device") if isinstance(info.get("device"), str) else None,
            gpu=run.gpu_name,
            gpu_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            versions={k: str(info[k]) for k in ("driver", "cuda", "torch")
                      if info.get(k) not in (None, "")},
            checks=checks,
            matmul=_spec_figures(res, "matmul"),
            bandwidth=_spec_figures(res, "bandwidth"),
            waivers=_waivers(res),
        ))
    return out


def with_no_verdicts(health: list[HostHealth], history: list[HostHistory]) -> list[HostHealth]:
    """The health rows, a host's replaced (or added) by its latest run when that run's
    validation was started and gave no verdict: a host that hangs is not "ok" on its last pass."""
    rows = {h.host: h for h in health}
    for record in history:
        judged = record.judged
        last = judged[-1] if judged else None
        row = rows.get(record.host)
        if last is None or not last.no_verdict or (row is not None and row.run_id > last.run_id):
            continue
        rows[record.host] = HostHealth(host=record.host, run_id=last.run_id, ok=False,
                                       device=None, gpu=row.gpu if row else None,
                                       gpu_count=None, versions={}, checks=[], matmul=[],
                                       bandwidth=[], no_verdict=last.no_verdict)
    return [rows[host] for host in sorted(rows)]


def _waivers(res: dict[str, Any]) -> list[tuple[str, str]]:
    """(check, what) of each waiver a run used; what the host wrote is untrusted: strings only."""
    used = res.get("waivers")
    return [(w["check"], w["what"]) for w in used if isinstance(w, dict)
            and isinstance(w.get("check"), str) and isinstance(w.get("what"), str)] if isinstance(used, list) else []


def _set_apart(problems: list[Problem]) -> tuple[dict[str, list[Problem]], list[Problem]]:
    """Folders without results that are no bad log (runfolder.run_without_results): a fabric
    run (read apart), a validation started that brought nothing home (a failure in History),
    a host a rollout never started, an evidence run, a run that only provisioned
    (--no-validate, a cache host); each counted apart ({kind: its problems}), not listed as
    problems (the rest)."""
    apart: dict[str, list[Problem]] = {}
    for p in problems:
        kind = run_without_results(Path(p.path)) if p.message == NO_RESULTS else None
        if kind == ATTEMPTED_RUN and not _counts(Path(p.path)):
            kind = STOPPED_RUN
        if kind in (None, PROVISIONED_RUN) and p.message == NO_RESULTS and \
                (Path(p.path) / REMEDIATION_RECORD).exists():
            kind = REMEDIATION_RUN
        if kind is not None:
            apart.setdefault(kind, []).append(p)
    counted = {id(p) for kept in apart.values() for p in kept}
    return apart, [p for p in problems if id(p) not in counted]


# A validation started and stopped before it could give the host a verdict, which its record
# says does not count (collect.Attempt.counts): a sweep's node preempted by real work, Ctrl-C,
# a node whose task its scheduler never started. Not a failure (history.py): its own note.
STOPPED_RUN = "stopped"
# A remediation run that did not validate the node again (the breaker held it back, an RMA,
# stopped before it): its record is under Repairs (repairs.py), the folder no bad log.
REMEDIATION_RUN = "remediation"


def _counts(folder: Path) -> bool:
    attempt, _ = read_attempt(folder)
    return attempt is None or attempt.counts


# The note on each kind of folder set apart, in this order: (kind, text from its count, the
# hosts it names, the newest fabric run's id)
APART_NOTES: tuple[tuple[str, Callable[[int, str, str], str]], ...] = (
    (FABRIC_RUN, lambda n, hosts, fabric_run: (
        f"{n} fabric run folder(s) (gpuprov fabric): pairs, no validation figures; the newest "
        f"run, {fabric_run}, under Fabric")),
    (ATTEMPTED_RUN, lambda n, hosts, fabric_run: (
        f"{n} run(s) whose validation was started and brought no results home (timed out, "
        f"crashed, archive refused): failed runs in History ({hosts})")),
    (STOPPED_RUN, lambda n, hosts, fabric_run: (
        f"{n} run(s) whose validation was started and stopped before a verdict of the host's "
        f"(preempted by real work in a sweep, interrupted): no verdict, no failure ({hosts})")),
    (REMEDIATION_RUN, lambda n, hosts, fabric_run: (
        f"{n} remediation run(s) without a validation (waiting for the breaker, an RMA, "
        f"stopped before it): under Repairs ({hosts})")),
    (PROVISIONED_RUN, lambda n, hosts, fabric_run: (
        f"{n} run(s) without validation results (provisioning only, e.g. --no-validate): "
        "nothing to compare")),
    (EVIDENCE_RUN, lambda n, hosts, fabric_run: (
        f"{n} evidence run(s) (gpuprov evidence): archives, no figures ({hosts})")),
    (NOT_STARTED_RUN, lambda n, hosts, fabric_run: (
        f"{n} host run(s) not started: a rollout stopped before them ({hosts})")),
)


def _apart_notes(apart: dict[str, list[Problem]], fabric_run: str) -> list[str]:
    """A note per kind of folder set apart (`APART_NOTES`), naming up to 10 of its hosts."""
    notes = []
    for kind, note in APART_NOTES:
        if kind in apart:
            hosts = ", ".join(sorted({Path(p.path).parent.name for p in apart[kind]})[:10])
            notes.append(note(len(apart[kind]), hosts, fabric_run))
    return notes


def _comparison_notes(logs_dir: Path, runs: list[Run], groups: dict[str, list[str]],
                      comparisons: list[RunComparison], baseline: str | None) -> list[str]:
    """No runs at all; a host alone in its GPU group; hosts with nothing to compare with."""
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
    return notes


def build_report(
    logs_dir: Path,
    baseline: str | None = None,
    outlier_pct: float = 15.0,
    regression_pct: float = 10.0,
    quarantine: tuple[int, int] = QUARANTINE,
    repair_window: int = REPAIR_WINDOW,
) -> Report:
    """Read, merge and compare; no output. Raises BadInput for a missing logs folder or
    a baseline that names nothing."""
    logs_dir = Path(logs_dir)
    if not logs_dir.is_dir():
        raise BadInput(f"logs folder {logs_dir} does not exist")
    tree = LogsTree(logs_dir)  # listed once, read by each part below
    runs, problems = collect(tree)
    apart, problems = _set_apart(problems)
    groups, fleet = find_outliers(runs, outlier_pct)
    gpus = host_gpus(runs)
    hosts = tree.hosts()
    drift = find_drift(tree, {h: gpus.get(h, UNKNOWN_GPU) for h in hosts})
    problems += drift.problems
    history, history_problems = find_history(tree, runs, hosts, quarantine)
    known = {str(p) for p in problems}  # drift reported the newest bad manifests already
    problems += [p for p in history_problems if str(p) not in known]
    repairs, repair_problems = find_repairs(tree, history, repair_window)
    problems += repair_problems
    comparisons = find_regressions(runs, regression_pct, baseline)
    fabric, fabric_problems = find_fabric(tree, hosts)
    problems += fabric_problems
    distributed, distributed_problems = find_jobs(tree, hosts)
    problems += distributed_problems
    notes = (_apart_notes(apart, fabric.run_id)
             + _comparison_notes(logs_dir, runs, groups, comparisons, baseline))
    return Report(
        logs_dir=logs_dir,
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        outlier_pct=outlier_pct, regression_pct=regression_pct, baseline=baseline,
        runs=runs, problems=problems, table=merge_table(runs), groups=groups,
        fleet=fleet, comparisons=comparisons, notes=notes,
        health=with_no_verdicts(health_summary(runs), history),
        drift=drift, history=history, quarantine=quarantine, fabric=fabric,
        distributed=distributed, repairs=repairs,
    )
