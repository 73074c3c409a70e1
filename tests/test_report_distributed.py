"""`gpuprov report` over `validate --distributed`'s records (issue 44: "Results go in ... the
report"): the records are real, kept from runs of tests/test_distributed_slurm.py on the test
Slurm cluster (tests/fixtures/distributed/slurm-passed: the job passed, gloo on 3 nodes;
slurm-skew: n3 had another torch and the job never started), each beside its node's
results.json of the same run. A record is as untrusted as any log."""
from __future__ import annotations

import shutil
from pathlib import Path

from remote.report import run_report
from tests.test_report_common import printed, recording_terminal

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "distributed"
PASSED = "20261129T085347.282Z-be81"
SKEW = "20261129T085412.552Z-e598"


def logs_of(tmp_path: Path, *runs: str) -> Path:
    logs = tmp_path / "logs"
    for run in runs:
        shutil.copytree(FIXTURES / run, logs, dirs_exist_ok=True)
    return logs


def report_text(tmp_path: Path, logs: Path) -> tuple[int, str]:
    term = recording_terminal()
    rc = run_report(logs, tmp_path / "out", terminal=term)
    return rc, printed(term)


def row(text: str, run_id: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(run_id))


def test_each_job_is_a_row_with_its_verdict_busbw_backend_and_training_step(tmp_path):
    rc, text = report_text(tmp_path, logs_of(tmp_path, "slurm-passed", "slurm-skew"))
    assert rc == 0, text
    assert "Distributed jobs (validate --distributed), newest first" in text
    passed, skew = row(text, PASSED), row(text, SKEW)
    assert text.index(SKEW + " ") < text.index(PASSED + " ")  # newest first
    assert passed.split()[1:4] == ["3", "passed", "gloo"], passed
    assert "0.318 GB/s at 4 MiB" in passed and "matches" in passed
    assert skew.split()[1:3] == ["3", "FAILED"], skew
    assert "n3: version skew: torch 2.13.0 (the others: 2.14.1)" in skew
    assert "SKIPPED / BAD LOGS" not in text
    assert (tmp_path / "out" / "report.txt").read_text().count(PASSED) >= 1


def test_a_record_naming_another_node_is_a_problem_and_the_others_speak(tmp_path):
    logs = logs_of(tmp_path, "slurm-passed")
    record = logs / "n1" / PASSED / "distributed.json"
    record.write_text(record.read_text().replace('"node": "n1"', '"node": "n9"'))
    rc, text = report_text(tmp_path, logs)
    assert f"{record}: bad distributed record: names node 'n9'" in text
    assert row(text, PASSED).split()[1:4] == ["3", "passed", "gloo"]
