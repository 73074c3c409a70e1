"""`gpuprov report --prometheus PATH`: each host's latest verdicts and bench figures in the
Prometheus text format that node_exporter's textfile collector reads
(https://github.com/prometheus/node_exporter#textfile-collector): point PATH at a `*.prom`
file in its `--collector.textfile.directory`. Each host with a history also gets
`gpuprov_host_quarantined` (1 when it failed K of its last N runs; `history`) and its run
and failure counts, so an alert can take it out of service. Written with prometheus_client's
CollectorRegistry and write_to_textfile, which writes a temporary file and renames it, so the
collector never reads half a file. Metric names follow https://prometheus.io/docs/practices/naming/
(base units: seconds). What a log says is untrusted: label values are whatever the text is
(prometheus_client escapes them), numbers that are not finite are left out.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Optional

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from .collect import Run, num
from .history import HostHistory

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


def registry_for(runs: list[Run], history: Iterable[HostHistory] = ()) -> CollectorRegistry:
    """The metrics of `runs` (collect's runs) and of each host's `history`, in a registry of
    their own."""
    registry = CollectorRegistry()
    history = list(history)
    quarantined = Gauge("gpuprov_host_quarantined", "1 when the host failed K of its last N "
                        "runs (gpuprov report --quarantine K/N, default 2/3), else 0",
                        ["host"], registry=registry)
    run_count = Gauge("gpuprov_host_runs", "the host's runs with a verdict under logs/",
                      ["host"], registry=registry)
    failure_count = Gauge("gpuprov_host_failed_runs", "the host's failed runs under logs/",
                          ["host"], registry=registry)
    for record in history:
        quarantined.labels(record.host).set(1 if record.quarantined else 0)
        run_count.labels(record.host).set(record.runs)
        failure_count.labels(record.host).set(len(record.failures))
    valid = Gauge("gpuprov_validation_ok", "1 when the host's latest validation passed, else 0",
                  ["host", "run"], registry=registry)
    passed = Gauge("gpuprov_check_passed", "1 when the check passed in the host's latest "
                   "validation, else 0 (failed or skipped)", ["host", "check"], registry=registry)
    status = Gauge("gpuprov_check_status", "the check's status in the host's latest validation: "
                   "1 for the status it had, 0 for the others", ["host", "check", "status"],
                   registry=registry)
    seconds = Gauge("gpuprov_check_duration_seconds", "how long the check ran",
                    ["host", "check"], registry=registry)
    latency = Gauge("gpuprov_bench_latency_seconds", "median inference latency per model in "
                    "the host's latest benchmark", ["host", "model"], registry=registry)
    throughput = Gauge("gpuprov_bench_throughput_images_per_second", "images per second per "
                       "model and precision in the host's latest benchmark",
                       ["host", "model", "precision"], registry=registry)
    latest_results = _latest(runs, "results")
    for host, run_id in unjudged_latest(latest_results, history).items():
        valid.labels(host, run_id).set(0)
    for host, run in latest_results.items():
        results = run.results or {}
        valid.labels(host, run.run_id).set(1 if results.get("ok") is True else 0)
        checks = results.get("checks")
        for check in checks if isinstance(checks, list) else []:
            if not isinstance(check, dict) or not isinstance(check.get("name"), str):
                continue
            name, state = check["name"], str(check.get("status"))
            passed.labels(host, name).set(1 if state == "pass" else 0)
            for known in STATUSES:
                status.labels(host, name, known).set(1 if state == known else 0)
            took = _finite(check.get("elapsed_s"))
            if took is not None:
                seconds.labels(host, name).set(took)
            models = (check.get("figures") or {}).get("models") if name == "bench" else None
            for model, figures in (models.items() if isinstance(models, dict) else []):
                rates = figures.get("throughput_ips") if isinstance(figures, dict) else None
                for precision in ("fp32", "amp"):
                    rate = _finite((rates or {}).get(precision)) if isinstance(rates, dict) else None
                    if rate is not None:
                        throughput.labels(host, str(model), precision).set(rate)
    for host, run in _latest(runs, "latency").items():
        column = run.latency.get(None) or next(iter(run.latency.values()), {})
        for model, ms in column.items():
            value = _finite(ms)
            if value is not None:
                latency.labels(host, model).set(value / 1000.0)
    return registry


def write_prometheus(path: Path, runs: list[Run], history: Iterable[HostHistory] = ()) -> None:
    """Write the metrics of `runs` and `history` to `path` (atomically, by prometheus_client)."""
    write_to_textfile(str(path), registry_for(runs, history))
