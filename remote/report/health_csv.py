"""``health.csv``: each host's latest validation, a row per host (``;``-separated, header row),
for a spreadsheet or a script that takes failing hosts out of service: its verdict, GPU, the
checks that failed and were skipped, and why a validation gave no verdict. What comes from a
log is neutralised as in merged.csv (`export.csv_text`: a cell never becomes a formula).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from .analyse import HostHealth, Report
from .export import csv_text

FILE = "health.csv"
HEADER = ["host", "run", "verdict", "device", "gpu", "gpus", "failed", "skipped", "no verdict"]


def _verdict(health: HostHealth) -> str:
    if health.no_verdict:
        return "no verdict"
    if health.ok is None:
        return "unknown"
    return "pass" if health.ok else "fail"


def health_csv(report: Report) -> str:
    """The report's per-host health, a row per host."""
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=";", lineterminator="\n")
    writer.writerow(HEADER)
    for h in report.health:
        writer.writerow([csv_text(h.host), csv_text(h.run_id), _verdict(h),
                         csv_text(h.device or ""), csv_text(h.gpu or ""),
                         "" if h.gpu_count is None else h.gpu_count,
                         csv_text(",".join(c.name for c in h.failed)),
                         csv_text(",".join(c.name for c in h.skipped)), csv_text(h.no_verdict)])
    return buf.getvalue()


def write(report: Report, path: Path, written: dict[str, Path]) -> None:
    path.write_text(health_csv(report), encoding="utf-8")
