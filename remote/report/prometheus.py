"""`gpuprov report --prometheus PATH`: each host's latest verdicts and bench figures in the
Prometheus text format that node_exporter's textfile collector reads
(https://github.com/prometheus/node_exporter#textfile-collector): point PATH at a `*.prom`
file in its `--collector.textfile.directory`. Each host with a history also gets
`gpuprov_host_quarantined` (1 when it failed K of its last N runs; `history`) and its run
and failure counts, so an alert can take it out of service; each node with a remediation record
its repairs by action and outcome, its time to repair and its repairs that did not hold
(`repairs`; none of these for a node never remediated). Written by the one Prometheus writer
(remote/output/prometheus.py: a temporary file renamed, so the collector never reads half a
file). Metric names follow https://prometheus.io/docs/practices/naming/
(base units: seconds). What a log says is untrusted: label values are whatever the text is
(prometheus_client escapes them), numbers that are not finite are left out.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Optional

from ..output.prometheus import Metric, write_metrics
from .collect import Run, num
from .history import HostHistory
from .prometheus_host import HostMetrics
from .repairs import Repairs

STATUSES = ("pass", "fail", "skip")  # validate/core.py: PASS, FAIL, SKIP


def _latest(runs: list[Run], want: str) -> dict[str, Run]:
    """Per host, its latest run (by run id) that has `want`: 'results' or 'latency'."""
    latest: dict[str, Run] = {}
    for run in runs:  # sorted by host, then run id
        if getattr(run, want):
            latest[run.host] = run
    return latest


def unjudged_latest(latest: dict[str, Run], history: list[HostHistory]) -> dict[str, str]:
    """Host -> its latest run when that run's validation was started and gave no verdict
    (history.Mark.no_verdict), later than its latest results.json: such a host's latest
    validation is not ok and has no checks, so it is taken out of `latest`."""
    out: dict[str, str] = {}
    for record in history:
        marks = record.without_verdict
        if marks and (record.host not in latest or marks[-1].run_id > latest[record.host].run_id):
            out[record.host] = marks[-1].run_id
            latest.pop(record.host, None)
    return out


def _finite(value: Any) -> Optional[float]:
    number = num(value)
    return number if number is not None and math.isfinite(number) else None


def _history_metrics(history: list[HostHistory]) -> list[Metric]:
    """Each host's quarantine flag, run and failure counts."""
    quarantined = Metric("gpuprov_host_quarantined", "1 when the host failed K of its last N "
                         "runs (gpuprov report --quarantine K/N, default 2/3), else 0", ("host",))
    run_count = Metric("gpuprov_host_runs", "the host's runs with a verdict under logs/", ("host",))
    failure_count = Metric("gpuprov_host_failed_runs", "the host's failed runs under logs/",
                           ("host",))
    for record in history:
        quarantined.set((record.host,), 1 if record.quarantined else 0)
        run_count.set((record.host,), record.runs)
        failure_count.set((record.host,), len(record.failures))
    return [quarantined, run_count, failure_count]


def _repair_metrics(repairs: Repairs) -> list[Metric]:
    """Each remediated node's repairs by action and outcome, its time to repair (median and
    latest of the repaired ones) and its repairs that did not hold; nothing without a record."""
    if not repairs.nodes:
        return []
    count = Metric("gpuprov_host_repairs", "the node's remediations (gpuprov remediate) under "
                   "logs/, by the action its verdict named and by outcome", ("host", "action", "outcome"))
    median = Metric("gpuprov_host_repair_duration_median_seconds", "median time to repair of the "
                    "node's repaired remediations, from start to end", ("host",))
    latest = Metric("gpuprov_host_repair_duration_latest_seconds", "time to repair of the node's "
                    "latest repaired remediation, from start to end", ("host",))
    held = Metric("gpuprov_host_repairs_not_held", "the node's repairs followed by a failed run "
                  f"within its next N runs (gpuprov report --repair-window N, now {repairs.window})",
                  ("host",))
    for node in repairs.nodes:
        for r in node.repairs:
            key = (node.node, r.trigger.action, r.outcome)
            count.set(key, count.samples.get(key, 0) + 1)
        if node.median_s is not None and node.latest_s is not None:
            median.set((node.node,), node.median_s)
            latest.set((node.node,), node.latest_s)
        held.set((node.node,), len(node.did_not_hold))
    return [count, median, latest, held]


class _Latest:
    """The gauges of each host's latest validation and benchmark."""

    def __init__(self) -> None:
        self.valid = Metric("gpuprov_validation_ok", "1 when the host's latest validation "
                            "passed, else 0", ("host", "run"))
        self.passed = Metric("gpuprov_check_passed", "1 when the check passed in the host's "
                             "latest validation, else 0 (failed or skipped)", ("host", "check"))
        self.status = Metric("gpuprov_check_status", "the check's status in the host's latest "
                             "validation: 1 for the status it had, 0 for the others",
                             ("host", "check", "status"))
        self.seconds = Metric("gpuprov_check_duration_seconds", "how long the check ran",
                              ("host", "check"))
        self.latency = Metric("gpuprov_bench_latency_seconds", "median inference latency per "
                              "model in the host's latest benchmark", ("host", "model"))
        self.throughput = Metric("gpuprov_bench_throughput_images_per_second", "images per "
                                 "second per model and precision in the host's latest benchmark",
                                 ("host", "model", "precision"))
        self.host = HostMetrics()  # findings per action; the host checks' figures (issue 45)

    def metrics(self) -> list[Metric]:
        return [self.valid, self.passed, self.status, self.seconds, self.latency,
                self.throughput] + self.host.metrics()

    def check(self, host: str, check: Any) -> None:
        """One check of the host's latest results: passed, status, duration, bench figures."""
        if not isinstance(check, dict) or not isinstance(check.get("name"), str):
            return
        name, state = check["name"], str(check.get("status"))
        self.passed.set((host, name), 1 if state == "pass" else 0)
        for known in STATUSES:
            self.status.set((host, name, known), 1 if state == known else 0)
        took = _finite(check.get("elapsed_s"))
        if took is not None:
            self.seconds.set((host, name), took)
        if name == "bench":
            self.bench(host, (check.get("figures") or {}).get("models"))
        self.host.check(host, check)

    def bench(self, host: str, models: Any) -> None:
        """The bench check's throughput per model and precision."""
        for model, figures in (models.items() if isinstance(models, dict) else []):
            rates = figures.get("throughput_ips") if isinstance(figures, dict) else None
            for precision in ("fp32", "amp"):
                rate = _finite((rates or {}).get(precision)) if isinstance(rates, dict) else None
                if rate is not None:
                    self.throughput.set((host, str(model), precision), rate)

    def latencies(self, host: str, run: Run) -> None:
        """The host's latest benchmark's median latency per model, in seconds."""
        column = run.latency.get(None) or next(iter(run.latency.values()), {})
        for model, ms in column.items():
            value = _finite(ms)
            if value is not None:
                self.latency.set((host, model), value / 1000.0)


def metrics_for(runs: list[Run], history: Iterable[HostHistory] = (),
                repairs: Repairs | None = None) -> list[Metric]:
    """The metrics of `runs` (collect's runs), of each host's `history` and `repairs`."""
    history = list(history)
    latest = _Latest()
    latest_results = _latest(runs, "results")
    for host, run_id in unjudged_latest(latest_results, history).items():
        latest.valid.set((host, run_id), 0)
    for host, run in latest_results.items():
        results = run.results or {}
        latest.valid.set((host, run.run_id), 1 if results.get("ok") is True else 0)
        checks = results.get("checks")
        for check in checks if isinstance(checks, list) else []:
            latest.check(host, check)
    for host, run in _latest(runs, "latency").items():
        latest.latencies(host, run)
    return _history_metrics(history) + _repair_metrics(repairs or Repairs()) + latest.metrics()


def write_prometheus(path: Path, runs: list[Run], history: Iterable[HostHistory] = (),
                     repairs: Repairs | None = None) -> None:
    """Write the metrics of `runs`, `history` and `repairs` to `path`, by the one Prometheus
    writer (remote/output/prometheus.py: atomically, by prometheus_client)."""
    write_metrics(path, metrics_for(runs, history, repairs))
