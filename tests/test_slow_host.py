"""A slow host cannot hold the fleet's recap (issue 21, point 4), over real OpenSSH.

Two hosts of the sshd farm are validated together. The honest one's `validate_python` is a
stand-in that prints a progress line and writes a passing results.json; the slow one's
dribbles one byte every 2 s and never ends a line, as the host of the attack did. Before, the
slow host ran on past the inventory's `timeouts.command` (validate had a fixed 7200 s) and no
recap came while it lasted; now it fails alone with the reason, within the inventory's bound,
and the honest host's recap line shows.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.procs import alive

# The command `validate` runs is `cd PKG && "$PY" -m validate --out OUT ARGS`.
HONEST = """#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out"
echo '[system] PASS (0.0s) a stand-in for validate' >&2
printf '%s' '{"checks": [{"name": "system", "status": "pass", "required": true}], "ok": true}' \\
  > "$out/results.json"
"""
DRIBBLE = """#!/bin/sh
echo $$ > {pidfile}
while :; do printf x; sleep 2; done
"""
# The test's own bound on the whole run: far above the 5 s and 10 s set below, far below the
# 7200 s validation had. Not a timing assert: past it the run is a hang.
RUN_BOUND_S = 120


def _tool(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    os.chmod(path, 0o755)
    return str(path)


@pytest.mark.parametrize("timeouts, reason", [
    ({"idle": 5}, "no output line for 5 s (timeouts.idle)"),
    ({"command": 10}, "timed out after 10 s"),
], ids=["idle", "command"])
def test_a_dribbling_host_fails_alone_and_the_recap_is_printed(farm, work, inventory,
                                                               timeouts, reason):
    pidfile = work / "dribbler.pid"
    honest = _tool(work, "honest-python", HONEST)
    slow = _tool(work, "dribbling-python", DRIBBLE.format(pidfile=pidfile))
    inv = inventory(hosts={
        "honest": farm.host_entry(farm.addresses[0], vars={"validate_python": honest}),
        "slow": farm.host_entry(farm.addresses[1], vars={"validate_python": slow}),
    }, timeouts=timeouts)
    started = time.monotonic()
    try:
        result = invoke("validate", "--host", "honest,slow", "--inventory", str(inv),
                        cwd=work, timeout=RUN_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run was still going after {RUN_BOUND_S} s: the slow host held it")
    finally:
        _stop_leftover(pidfile)
    print(f"run with a dribbling host ({timeouts}): {time.monotonic() - started:.1f} s")
    assert result.rc != 0, result.out
    recap = result.out[result.out.index("RECAP"):]
    assert re.search(r"^honest .* passed \(1 checks\)$", recap, re.M), recap
    assert re.search(rf"^slow .* not validated: {re.escape(reason)}", recap, re.M), recap
    assert "Traceback" not in result.out + result.err
    # the silent host is not asked for its stack manifest after that (it would hold the recap
    # up to the manifest's own timeout more): its run log says why there is none
    log = next((work / "logs" / "slow").glob("*/provision.log")).read_text()
    assert f"stack manifest not recorded: validation {reason}" in log, log


def test_a_step_that_timed_out_does_not_hold_the_host_for_its_manifest(farm, work, inventory,
                                                                       provision):
    """Issue 30, point 2: a step (`timeout: 5`) of a host whose stack python dribbles a byte
    every 2 s fails at its timeout; the host is then not asked for its stack manifest (with
    that python, up to the manifest's own 60 s more) and ends at most 10 s after the step's
    timeout."""
    pidfile = work / "dribbler.pid"
    slow = _tool(work, "dribbling-python", DRIBBLE.format(pidfile=pidfile))
    inv = inventory(hosts={"slow": farm.host_entry(farm.addresses[0],
                                                   vars={"validate_python": slow})})
    rec = work / "r.yaml"
    rec.write_text("steps:\n  - name: stack check\n    shell: '{{ validate_python }} -c pass'\n"
                   "    timeout: 5\n")
    try:
        result = provision("slow", rec, inv)
    finally:
        _stop_leftover(pidfile)
    host = result.host("slow")
    assert [(s["name"], s["status"], s["message"]) for s in host["steps"]] == [
        ("stack check", "failed", "timed out after 5 s")]
    assert host["elapsed_s"] < 5 + 10, host
    log = next((work / "logs" / "slow").glob("*/provision.log")).read_text()
    assert "stack manifest not recorded: stack check timed out after 5 s" in log, log


def _stop_leftover(pidfile: Path) -> None:
    """The dribbler must have been stopped on the host (its SIGTERM was sent before the run
    ended; it may take a moment to be reaped); end it here if not (the run failed)."""
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    for _ in range(50):
        if not alive(pid):
            return
        time.sleep(0.1)
    os.kill(pid, 15)
    pytest.fail(f"the dribbling command (pid {pid}) was still running on the host")


@pytest.mark.parametrize("args, bound", [
    ([], 600), (["--quick"], 600), (["--stress-seconds", "900"], 1500),
    (["--stress-seconds=120", "--quick"], 720), (["--stress-seconds", "soon"], 600),
])
def test_a_longer_stress_check_gets_its_length_of_silence(args, bound):
    """stress is silent for its whole length: a longer one asked in `validate_args` must not
    read as a stalled host."""
    from remote.engine.jobs.validate import idle_bound

    assert idle_bound(600, args) == bound
