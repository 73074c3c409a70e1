"""Each host's history in `gpuprov report` (issue 34, item 2): runs, passes, failures, first and
last failure, streak, flapping, quarantine (flags.json kind `quarantine`, the Prometheus file),
a timeline per host in report.html, stack changes between runs. Real files, a real report; the
first test makes its logs tree with real `invoke validate` runs over sshd on loopback."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from remote.commands import report as report_cmd
from remote.report import run_report
from tests.conftest import invoke
from tests.test_report_common import REPO, recording_terminal, results_json, write_run
from tests.test_slow_host import _stop_leftover

# The host's python as `validate_python` (as in tests/test_slow_host.py): `-m validate` is a
# stand-in (a real validation needs torch and a GPU) that writes a results.json passing, or
# failing while MARKER exists; anything else, the stack manifest's script included, is the
# real python3, with EXTRA on its path so that a test can change the host's stack for real.
STAND_IN = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = validate ]; then
  while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
  mkdir -p "$out"
  if [ -e {marker} ]; then
    echo '[gpu] FAIL (0.0s) Xid 79: GPU has fallen off the bus' >&2
    printf '%s' '{failed}' > "$out/results.json"
    exit 1
  fi
  echo '[system] PASS (0.0s) a stand-in for validate' >&2
  printf '%s' '{passed}' > "$out/results.json"
  exit 0
fi
PYTHONPATH={extra} exec {python} "$@"
"""
PASSED = json.dumps({"checks": [{"name": "system", "status": "pass", "required": True}],
                     "ok": True})
FAILED = json.dumps({"checks": [{"name": "gpu", "status": "fail", "required": True,
                                 "reason": "Xid 79"}], "ok": False})


def _stand_in(work: Path, host: str) -> tuple[str, Path, Path]:
    """(the host's validate_python, its failure marker, the folder on its python's path)."""
    extra = work / f"{host}-site"
    extra.mkdir()
    path = work / f"{host}-python"
    path.write_text(STAND_IN.format(marker=work / f"{host}-fails", extra=extra,
                                    python="/usr/bin/python3", passed=PASSED, failed=FAILED))
    os.chmod(path, 0o755)
    os.chmod(work, 0o777)
    return str(path), work / f"{host}-fails", extra


def _install(site: Path, name: str, version: str) -> None:
    """A distribution in `site` as pip leaves one: its dist-info with METADATA and RECORD."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{name}-{version}.dist-info/METADATA,,\n")


def test_a_host_that_failed_twice_is_quarantined_and_its_timeline_shows(farm, work, inventory):
    """Three real validations of two sshd hosts; h2 fails the second and third, h1's stack
    changes before the third. The report's outputs say so, read back from its files."""
    h1_python, _h1_marker, h1_site = _stand_in(work, "h1")
    h2_python, h2_marker, _h2_site = _stand_in(work, "h2")
    inv = inventory(hosts={
        "h1": farm.host_entry(farm.addresses[0], vars={"validate_python": h1_python}),
        "h2": farm.host_entry(farm.addresses[1], vars={"validate_python": h2_python}),
    })
    for n in range(3):
        if n == 1:
            h2_marker.touch()
        if n == 2:
            _install(h1_site, "gpuprov_history_probe", "1.0")
        result = invoke("validate", "--host", "h1,h2", "--inventory", str(inv), cwd=work,
                        timeout=300)
        assert (result.rc == 0) == (n == 0), result.out  # h2's failures fail the run
        assert "Traceback" not in result.out + result.err, result.out + result.err
    logs, out, prom = work / "logs", work / "report", work / "fleet.prom"
    runs = {host: sorted(p.name for p in (logs / host).iterdir()) for host in ("h1", "h2")}
    assert all(len(ids) == 3 for ids in runs.values()), runs
    for host, ids in runs.items():  # each real run left its verdict and its stack manifest
        for run_id in ids:
            assert {"results.json", "stack.json"} <= set(os.listdir(logs / host / run_id))
    report = invoke("report", "--logs", str(logs), "--out", str(out), "--prometheus", str(prom),
                    "--json", "-", cwd=work, timeout=300)
    assert report.rc == 0, report.out + report.err

    flags = json.loads((out / "flags.json").read_text())
    assert flags["quarantine"] == [{"kind": "quarantine", "host": "h2", "failed": runs["h2"][1:],
                                    "of_last_runs": 3, "last_failure": runs["h2"][2]}]
    assert any(line.startswith("QUARANTINE h2: failed 2 of its last 3 runs")
               for line in flags["flags"]), flags["flags"]
    history = {h["host"]: h for h in flags["history"]}
    assert (history["h2"]["runs"], history["h2"]["passes"], history["h2"]["failures"]) == (3, 1, 2)
    assert history["h2"]["first_failure"] == runs["h2"][1]
    assert history["h2"]["streak"] == {"verdict": "fail", "runs": 2}
    assert history["h1"]["quarantined"] is False and history["h1"]["streak"]["runs"] == 3
    changed = [m for m in history["h1"]["timeline"] if m["stack_change"]]
    assert [m["run"] for m in changed] == [runs["h1"][2]], history["h1"]["timeline"]
    assert "gpuprov-history-probe (not installed) -> 1.0" in changed[0]["stack_change"]
    # --json -: the same document on stdout
    assert json.loads(report.out)["history"] == flags["history"]

    page = (out / "report.html").read_text()
    for n, run_id in enumerate(runs["h2"]):
        verdict = "pass" if n == 0 else "fail"
        assert f'class="tl {verdict}" title="{run_id}: {verdict}"' in page
    assert re.search(rf'class="tl pass stack" title="{runs["h1"][2]}: pass; stack changed: '
                     r'package gpuprov-history-probe', page), page[-3000:]
    metrics = prom.read_text()
    assert 'gpuprov_host_quarantined{host="h2"} 1.0' in metrics
    assert 'gpuprov_host_quarantined{host="h1"} 0.0' in metrics
    text = (out / "report.txt").read_text()
    assert re.search(r"^h2 +3 +1 +2 +2 fail +QUARANTINE +[0-9][0-9a-z ]* ago$", text, re.M), text


def _verdicts(logs: Path, host: str, verdicts: str, start: int = 10) -> list[str]:
    """Runs of `host` with results.json passing (P) or failing (F), in that order."""
    ids = []
    for n, sign in enumerate(verdicts):
        run_id = f"20261126T{start + n:02d}0000Z"
        results = json.loads(results_json("NVIDIA H100 80GB HBM3"))
        if sign == "F":
            results["ok"] = False
            results["checks"][0].update(status="fail", reason="Xid 79")
        write_run(logs, host, run_id, results=json.dumps(results))
        ids.append(run_id)
    return ids


def _report(logs: Path, out: Path, **options) -> tuple[int, dict, str, str]:
    terminal = recording_terminal()
    rc = run_report(logs, out, terminal=terminal, **options)
    return (rc, json.loads((out / "flags.json").read_text()), (out / "report.txt").read_text(),
            (out / "report.html").read_text())


def test_a_flapping_host_and_the_quarantine_limit_are_reported(tmp_path):
    logs = tmp_path / "logs"
    flapper = _verdicts(logs, "gpu-flap", "PPFPFP")   # 4 changes in its last 6 runs
    steady = _verdicts(logs, "gpu-ok", "PPPPPP")
    _verdicts(logs, "gpu-once", "FPP")                 # failed long ago: neither
    rc, flags, text, _page = _report(logs, tmp_path / "out")
    assert rc == 0
    history = {h["host"]: h for h in flags["history"]}
    assert history["gpu-flap"]["flapping"] is True and history["gpu-flap"]["flap_changes"] == 4
    assert (history["gpu-flap"]["first_failure"], history["gpu-flap"]["last_failure"]) == (
        flapper[2], flapper[4])
    assert history["gpu-flap"]["quarantined"] is False  # 1 of its last 3 failed
    assert history["gpu-ok"]["flapping"] is False and history["gpu-ok"]["failures"] == 0
    assert [m["run"] for m in history["gpu-ok"]["timeline"]] == steady
    assert flags["quarantine"] == []
    assert "FLAPPING (4 changes in its last 6 runs)" in text
    assert "timeline (oldest first; P pass, F fail, . no verdict, | stack changed): PPFPFP" in text
    assert "gpu-ok:" not in text  # a host without failures has its one line, no detail
    assert re.search(r"^gpu-ok +6 +6 +0 +6 pass +- +[0-9][0-9a-z ]* ago$", text, re.M), text

    # 2 of its last 4 failed: quarantined under 2/4, and the printed report says so first
    rc, flags, text, _page = _report(logs, tmp_path / "out2", quarantine=(2, 4))
    assert [q["host"] for q in flags["quarantine"]] == ["gpu-flap"]
    assert flags["history_rules"]["quarantine"] == {"failed": 2, "of_last_runs": 4}
    assert text.index("QUARANTINE gpu-flap: failed 2 of its last 4 runs (limit 2 of 4)") < \
        text.index("History")


@pytest.mark.parametrize("value", ["3/2", "0/3", "2", "two/3", "2/3/4", "2/9999"])
def test_a_bad_quarantine_value_is_one_line_and_exit_2(tmp_path, capsys, value):
    (tmp_path / "logs").mkdir()
    rc = report_cmd.run(logs=str(tmp_path / "logs"), out=str(tmp_path / "out"), quarantine=value)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--quarantine must be K/N" in err, err
    assert not (tmp_path / "out").exists()


def test_a_hostile_results_json_and_folder_names_are_that_hosts_problem(tmp_path):
    """One run's results.json is not JSON, another is a FIFO; a run folder's name is markup.
    The run shows without a verdict and the file as a problem; nothing is read as markup."""
    logs = tmp_path / "logs"
    good = _verdicts(logs, "gpu-a", "PFF")
    write_run(logs, "gpu-a", "20261126T230000Z", results="{not json")
    fifo_run = write_run(logs, "gpu-a", "20261126T235900Z")
    os.mkfifo(fifo_run / "results.json")
    hostile = '<img src=x onerror=alert(1)>"'
    _verdicts(logs, hostile, "FF")
    write_run(logs, "gpu-b", '"><b onmouseover=alert(1)>', results=results_json("x"))
    rc, flags, _text, page = _report(logs, tmp_path / "out")
    assert rc == 0
    history = {h["host"]: h for h in flags["history"]}
    assert [m["verdict"] for m in history["gpu-a"]["timeline"]] == [
        "pass", "fail", "fail", "none", "none"]
    assert history["gpu-a"]["runs"] == 3 and history["gpu-a"]["quarantined"] is True
    assert {q["host"] for q in flags["quarantine"]} == {"gpu-a", hostile}
    problems = {Path(p["path"]).parent.name for p in flags["problems"]}
    assert {"20261126T230000Z", "20261126T235900Z"} <= problems
    assert good[0] in page
    assert "<b onmouseover" not in page and "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;&#34;" in page
    assert 'title="&#34;&gt;&lt;b onmouseover=alert(1)&gt;: pass"' in page


def test_a_stack_change_between_runs_is_on_the_timeline(tmp_path):
    from tests.test_report_drift import manifest

    logs = tmp_path / "logs"
    ids = _verdicts(logs, "gpu-a", "PPF")
    for run_id, driver in zip(ids, ("580.95.05", "580.95.05", "590.44.01")):
        (logs / "gpu-a" / run_id / "stack.json").write_text(json.dumps(manifest(driver=driver)))
    rc, flags, text, page = _report(logs, tmp_path / "out")
    timeline = flags["history"][0]["timeline"]
    assert [m["stack_change"] for m in timeline] == [None, None, "driver 580.95.05 -> 590.44.01"]
    assert f"stack changed in {ids[2]}: driver 580.95.05 -> 590.44.01" in text
    assert "timeline (oldest first; P pass, F fail, . no verdict, | stack changed): PP|F" in text
    assert f'class="tl fail stack" title="{ids[2]}: fail; stack changed: driver 580.95.05 -&gt; ' \
        '590.44.01"' in page


def test_the_bench_tree_is_a_valid_logs_tree(tmp_path):
    """bench/report_history.py's generated tree reads with no problem (a small one here)."""
    proc = subprocess.run([sys.executable, "-m", "bench.report_history", "--hosts", "4",
                           "--runs", "12", "--keep", str(tmp_path / "tree")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flags = json.loads((tmp_path / "tree" / "report" / "flags.json").read_text())
    assert flags["problems"] == [] and len(flags["history"]) == 4


# A host that passes once, then hangs, crashes and forges a control file (issue 41, attack 6):
# its `validate_python` runs the behaviour that the file NEXT names (the real python3 for the
# rest: the stack manifest's script).
SICK = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = validate ]; then
  while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
  case $(cat {next}) in
  pass)
    mkdir -p "$out"
    echo '[system] PASS (0.0s) a stand-in for validate' >&2
    printf '%s' '{passed}' > "$out/results.json";;
  hang)
    echo $$ > {pidfile}
    exec sleep 600;;
  crash)
    kill -SEGV $$;;
  forge)
    mkdir -p "$out"
    printf '%s' '{passed}' > "$out/results.json"
    echo 'not started: a rollout stopped before this host' > "$out/not-started.txt";;
  esac
  exit 0
fi
exec /usr/bin/python3 "$@"
"""


def test_a_host_that_hangs_crashes_and_forges_is_quarantined(farm, work, inventory):
    """gpu2 passes once, then its validation hangs (stopped at timeouts.idle), then crashes
    (SIGSEGV, no output folder), then sends a passing results.json beside a forged
    not-started.txt (the pull refuses the archive): each run exits 3, "not validated". Before,
    the report counted the three as "provisioning only": no quarantine, Health "ok". Now the
    control side's record of each started validation (validation.json, written before the host
    runs anything) makes each a failure: quarantined, 3 failures, Health FAIL. A --no-validate
    run is still "provisioning only"."""
    step, pidfile = work / "next", work / "hang.pid"
    python = work / "gpu2-python"
    python.write_text(SICK.format(next=step, pidfile=pidfile, passed=PASSED))
    os.chmod(python, 0o755)
    os.chmod(work, 0o777)
    inv = inventory(hosts={"gpu2": farm.host_entry(farm.addresses[0],
                                                   vars={"validate_python": str(python)})},
                    timeouts={"idle": 3})
    said = {}
    try:
        for behaviour in ("pass", "hang", "crash", "forge"):
            step.write_text(behaviour)
            result = invoke("validate", "--host", "gpu2", "--inventory", str(inv), cwd=work,
                            timeout=300)
            assert result.rc == (0 if behaviour == "pass" else 3), result.out + result.err
            assert "Traceback" not in result.out + result.err, result.out + result.err
            said[behaviour] = result.out
    finally:
        _stop_leftover(pidfile)  # the hang's sleep, if the run's stop missed it
    assert "not validated: no output line for 3 s (timeouts.idle)" in said["hang"]
    assert "not validated: no output on the host" in said["crash"]
    assert "not-started.txt, which only the control side writes: refusing it" in said["forge"]
    recipe = work / "noop.yaml"
    recipe.write_text("steps:\n  - name: nothing\n    shell: 'true'\n    changed_when: false\n")
    result = invoke("provision", "--host", "gpu2", "--inventory", str(inv), "--recipe",
                    str(recipe), "--no-validate", cwd=work, timeout=300)
    assert result.rc == 0, result.out + result.err

    logs, out, prom = work / "logs", work / "report", work / "fleet.prom"
    runs = sorted(p.name for p in (logs / "gpu2").iterdir())
    assert len(runs) == 5, runs
    report = invoke("report", "--logs", str(logs), "--out", str(out), "--prometheus", str(prom),
                    cwd=work, timeout=300)
    assert report.rc == 0, report.out + report.err
    flags = json.loads((out / "flags.json").read_text())
    assert flags["quarantine"] == [{"kind": "quarantine", "host": "gpu2", "failed": runs[1:4],
                                    "of_last_runs": 3, "last_failure": runs[3]}]
    (history,) = flags["history"]
    assert (history["runs"], history["passes"], history["failures"]) == (4, 1, 3)
    # the forged file never reached the run folder; the control side's record did
    assert not (logs / "gpu2" / runs[3] / "not-started.txt").exists()
    assert {"provision.log", "validation.json"} <= set(os.listdir(logs / "gpu2" / runs[3]))
    assert not (logs / "gpu2" / runs[4] / "validation.json").exists()
    assert history["without_verdict"] == 3
    why = [m["no_verdict"] for m in history["timeline"]]
    assert why[0] is None and why[4] is None, why
    assert why[1] == "timed out (no output line for 3 s (timeouts.idle), stopped)"
    assert why[2].startswith("crashed (no output folder on the host) (no output on the host (tar:")
    assert why[3] == ("archive refused (the pulled archive has not-started.txt, which only the "
                      "control side writes: refusing it)")
    text = (out / "report.txt").read_text()
    assert re.search(r"^gpu2 +4 +1 +3 +3 fail +QUARANTINE +[0-9][0-9a-z ]* ago$", text, re.M), text
    assert "timeline (oldest first; P pass, F fail, X fail: started, no verdict, . no verdict, " \
           "| stack changed): PXXX." in text, text
    assert re.search(rf"^gpu2 +{runs[3]} +FAIL ", text, re.M), text  # Health: not "ok"
    assert f"gpu2: NO VERDICT in {runs[3]}: validation started, no verdict: archive refused" in text
    assert "note: 1 run(s) without validation results (provisioning only" in text, text
    assert "note: 3 run(s) whose validation was started and brought no results home" in text
    page = (out / "report.html").read_text()
    assert f'class="tl fail noverdict" title="{runs[1]}: fail: validation started, no verdict ' \
           "(timed out" in page
    assert "3 validations started without a verdict, counted as failed" in page
    metrics = prom.read_text()
    assert 'gpuprov_host_quarantined{host="gpu2"} 1.0' in metrics
    assert f'gpuprov_validation_ok{{host="gpu2",run="{runs[3]}"}} 0.0' in metrics
