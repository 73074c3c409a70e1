"""The report reads real outputs of the validation package (`python3 -m validate`, CPU run).

Needs validate/ with its __main__.py at the repository root, and torch + torchvision.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from remote.report import build_report, run_report
from tests.test_report_common import REPO, printed, recording_terminal, seed_log, write_run

# Real CPU runs of the validation package (torch and torchvision come with `.[dev]`).
pytestmark = [pytest.mark.slow]

RUN_ID = "20261122T120000Z"


@pytest.fixture(scope="module")
def cpu_logs(tmp_path_factory):
    """logs/<host>/<run>/ holding what one real CPU validation run wrote."""
    logs = tmp_path_factory.mktemp("validate") / "logs"
    run_dir = logs / "cpu-a" / RUN_ID
    run_dir.parent.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "validate", "--out", str(run_dir), "--device", "cpu",
         "--checks", "system,bench", "--models", "resnet18", "--iters", "3", "--warmup", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert (run_dir / "results.json").exists(), (
        f"validate wrote no results.json (exit {proc.returncode})\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return logs, proc


def test_report_reads_a_real_cpu_validation_run(cpu_logs, tmp_path):
    logs, _proc = cpu_logs
    run_dir = logs / "cpu-a" / RUN_ID
    results = json.loads((run_dir / "results.json").read_text())
    bench = next(c for c in results["checks"] if c["name"] == "bench")
    median = bench["figures"]["models"]["resnet18"]["latency_ms"]["median"]

    terminal = recording_terminal()
    assert run_report(logs, tmp_path / "out", terminal=terminal) == 0
    text = printed(terminal)

    report = build_report(logs)
    # nothing the package wrote is reported as bad
    assert report.problems == [], [str(p) for p in report.problems]
    (run,) = report.runs
    assert (run.host, run.run_id) == ("cpu-a", RUN_ID)
    # one column, not two: results.json and bench_torch.log hold the same batch-1 median
    assert [c.name for c in report.table.columns] == [f"cpu-a/{RUN_ID}"]
    value = report.table.cell("resnet18", report.table.columns[0])
    assert value == pytest.approx(median, rel=0.01)
    if (run_dir / "bench_torch.log").exists():
        assert run.source == "bench_torch.log"
    # a CPU run is not an unknown GPU: it has a group of its own
    assert report.fleet[0].gpu.startswith("CPU only")
    # health: the checks the package ran, with their statuses
    (health,) = report.health
    assert {c.name: c.status for c in health.checks} == {
        c["name"]: c["status"] for c in results["checks"]}
    assert health.ok is results["ok"]
    assert health.device == "cpu"
    assert "resnet18" in text and f"cpu-a/{RUN_ID}" in (tmp_path / "out" / "merged.csv").read_text()
    # skipped checks are listed once per (required, reason), not once per check
    skipped = {(c["required"], c["reason"]) for c in results["checks"] if c["status"] == "skip"}
    assert text.count("cpu-a: SKIPPED") == len(skipped)


def test_real_runs_merge_with_seed_logs_and_compare(cpu_logs, tmp_path):
    """Copies of the real run as peers and article-style GPU logs merge into one table; a
    copy made 40% slower is flagged against its CPU peers' median."""
    logs, _proc = cpu_logs
    merged = tmp_path / "logs"
    shutil.copytree(logs, merged)
    shutil.copytree(merged / "cpu-a" / RUN_ID, merged / "cpu-b" / RUN_ID)
    shutil.copytree(merged / "cpu-a" / RUN_ID, merged / "cpu-c" / RUN_ID)
    slow_dir = merged / "cpu-c" / RUN_ID
    (slow_dir / "bench_torch.log").unlink(missing_ok=True)
    data = json.loads((slow_dir / "results.json").read_text())
    for check in data["checks"]:
        if check["name"] == "bench":
            check["figures"]["models"]["resnet18"]["latency_ms"]["median"] *= 1.4
    (slow_dir / "results.json").write_text(json.dumps(data))
    # article-style logs of GPU hosts (no results.json): the unknown-GPU group, never peers
    # of CPU runs, however much faster they are
    write_run(merged, "article", "20220110T090000Z", seed_log({"resnet18": 2.47}))
    write_run(merged, "article2", "20220110T090000Z", seed_log({"resnet18": 2.50}))

    report = build_report(merged)
    assert [c.host for c in report.table.columns] == [
        "article", "article2", "cpu-a", "cpu-b", "cpu-c"]
    assert [h.host for h in report.outliers] == ["cpu-c"]
    assert report.outliers[0].typical_pct == pytest.approx(40.0, abs=1.5)
    assert sorted(report.outliers[0].peers) == ["cpu-a", "cpu-b"]
