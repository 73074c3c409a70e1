"""A run in which no check counted is "not validated: nothing counted", exit 3 (issue 45): in
validate's last line, validate.log, results.json, gpuprov's recap (`summarize`, which `--json`
carries) and `gpuprov report`. Real runs of `python3 -m validate` on this machine, which has no
HCA and no DCGM (tests/test_validate_dcgm.py has `--checks dcgm`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from remote.engine.jobs.logs import summarize
from remote.report import run_report
from tests.test_report_common import printed, recording_terminal

ROOT = Path(__file__).resolve().parent.parent


def run_validate(tmp_path, *args):
    """`python3 -m validate --out DIR ARGS`: (exit status, results.json, stderr, None)."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH="/bin")
    proc = subprocess.run([sys.executable, "-m", "validate", "--out", str(out)] + list(args),
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return proc.returncode, doc, proc.stderr, None


def test_infiniband_without_hca_is_nothing_counted(tmp_path):
    """`--checks infiniband` on a node without an HCA (an empty sysfs tree): exit 3, nothing counted."""
    (tmp_path / "sys").mkdir()
    rc, doc, err, _ = run_validate(tmp_path, "--checks", "infiniband", "--sysfs-root", str(tmp_path / "sys"))
    assert rc == 3, err
    assert "[validate] NOT VALIDATED: nothing counted; not counted: infiniband n/a (" in err
    assert summarize(tmp_path / "out" / "results.json", rc) == (
        "not validated: nothing counted (infiniband n/a)", False)


def test_nothing_counted_from_an_older_validate_is_not_a_pass(tmp_path):
    """results.json of a validate before this change (ok true, no check required) reads as
    nothing counted, never `passed (0 checks)`."""
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"ok": True, "checks": [
        {"name": "infiniband", "status": "skip", "required": False, "waived": "not applicable: no HCA"}]}))
    assert summarize(path, 0) == ("not validated: nothing counted (infiniband n/a)", False)


def test_gpuprov_report_says_nothing_counted(tmp_path):
    """The run folder of `--checks infiniband` without an HCA, as `gpuprov logs` brings it home:
    the report's host line is a failure that says nothing counted, never ok."""
    (tmp_path / "sys").mkdir()
    rc, doc, err, _ = run_validate(tmp_path, "--checks", "infiniband", "--sysfs-root", str(tmp_path / "sys"))
    assert rc == 3
    logs = tmp_path / "logs"
    shutil.copytree(tmp_path / "out", logs / "gpu1" / "20261129T070000Z")
    terminal = recording_terminal(width=400)
    run_report(logs, tmp_path / "reports", terminal=terminal)
    text = printed(terminal)
    assert "gpu1: NOT VALIDATED: nothing counted (no check applied here)" in text
    assert "not validated: nothing counted" in (tmp_path / "reports" / "report.html").read_text()
