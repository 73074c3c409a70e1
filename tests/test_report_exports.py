"""`gpuprov report`'s files are a table (remote/report/exports.py, `EXPORTS`): a file defined
here, which no other file names, is one row registered at test time and is written beside the
others and named in the report's last line; health.csv is a row like any (issue 42)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from remote.report import run_report
from remote.report.exports import EXPORTS, Export
from tests.test_report_common import printed, recording_terminal, results_json, write_run

A100 = "NVIDIA A100-SXM4-80GB"


def _fleet(logs: Path) -> None:
    write_run(logs, "a", "r1", results=results_json(A100, {"resnet50": 2.0}))
    failing = json.loads(results_json(A100, {"resnet50": 2.1}))
    failing["ok"] = False
    failing["checks"].append({"name": "xid", "status": "fail", "required": True,
                              "reason": "Xid 79", "elapsed_s": 0.1, "figures": {}})
    write_run(logs, "=cmd|calc", "r1", results=json.dumps(failing))


def test_an_export_no_other_file_names_is_written_and_listed(tmp_path, monkeypatch):
    def hosts(report, path, written):
        path.write_text("".join(f"{h.host}\n" for h in report.health), encoding="utf-8")

    monkeypatch.setitem(EXPORTS, "hosts", Export("hosts", "hosts.txt", "each host", hosts))
    logs, out = tmp_path / "logs", tmp_path / "out"
    _fleet(logs)
    terminal = recording_terminal()
    assert run_report(logs, out, terminal=terminal) == 0
    assert (out / "hosts.txt").read_text() == "=cmd|calc\na\n"
    assert "hosts.txt" in printed(terminal).splitlines()[-1]


def test_health_csv_has_a_row_per_host_and_never_a_formula(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    _fleet(logs)
    assert run_report(logs, out, terminal=recording_terminal()) == 0
    rows = list(csv.reader((out / "health.csv").read_text().splitlines(), delimiter=";"))
    assert rows[0] == ["host", "run", "verdict", "device", "gpu", "gpus", "failed", "skipped",
                       "no verdict"]
    by_host = {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}
    assert set(by_host) == {"a", "'=cmd|calc"}
    assert by_host["'=cmd|calc"]["verdict"] == "fail" and by_host["'=cmd|calc"]["failed"] == "xid"
    assert by_host["a"]["verdict"] == "pass" and by_host["a"]["gpu"] == A100
