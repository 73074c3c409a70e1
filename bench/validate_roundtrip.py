"""`invoke validate` on one host against the check's own run time: what the round trip
(push, run, pull) costs. Part of `python3 -m bench.compare --validate-roundtrip`.

May import: `bench.common`, `bench.peers`, `tests.sshd`, `remote.ground.runfolder`, `remote.ground.exitcodes`.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from remote.ground.exitcodes import EXIT_OK, EXIT_VALIDATION_FAILED
from remote.ground.runfolder import LOGS_DIR, PROVISION_LOG
from tests.sshd import SshdFarm

from .common import REPO, BenchError, own_dir, proc_tail, stats
from .peers import REMOTE_PYTHON


def validate_roundtrip(farm: SshdFarm, work: Path, args) -> dict:
    if not (REPO / "validate" / "__main__.py").exists():
        return {"skipped": "needs validate/: validate/__main__.py is missing in this checkout "
                           "(it lands with the validation package)"}
    root = own_dir(work / "validate")
    inventory = root / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({
        "known_hosts": [str(farm.known_hosts)],
        "hosts": {"h1": farm.host_entry(farm.addresses[0], python=REMOTE_PYTHON)}}))
    check_args = ["--checks", "system"]
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "validate", "--host", "h1",
           "--inventory", str(inventory), "--var", "validate_args=" + " ".join(check_args),
           "--json", str(root / "out.json")]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # The check's own run time: the same command the host runs, started directly here (same
    # machine, same interpreter), without SSH, push or pull.
    own_cmd = [REMOTE_PYTHON, "-m", "validate", "--out", "", "--quick"] + check_args
    roundtrip, own, trips, status = [], [], [], ""
    for run_no in range(args.runs):
        shutil.rmtree(root / LOGS_DIR, ignore_errors=True)
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        roundtrip.append(time.perf_counter() - started)
        data = _json_or_none(root / "out.json")
        host = (data or {}).get("hosts", {}).get("h1", {})
        status = host.get("validation", "")
        # a finished round trip: the checks passed (0) or failed (3: this host has no GPU),
        # its results pulled back either way
        if proc.returncode not in (EXIT_OK, EXIT_VALIDATION_FAILED) or not status \
                or "no readable" in status or host.get("unreachable"):
            raise BenchError(f"invoke validate exited {proc.returncode}: {status!r}\n{proc_tail(proc)}")
        trips.append(_count_round_trips(root / LOGS_DIR / "h1"))
        with tempfile.TemporaryDirectory(prefix="gpuprov-validate-own-") as out_dir:
            own_cmd[4] = out_dir + "/out"
            started = time.perf_counter()
            subprocess.run(own_cmd, cwd=REPO, capture_output=True)
            own.append(time.perf_counter() - started)
        print(f"  validate round trip {run_no + 1}: {roundtrip[-1]:.3f}s  "
              f"(check alone {own[-1]:.3f}s)  {status}", flush=True)
    overhead = statistics.median(roundtrip) - statistics.median(own)
    return {"command": " ".join(shlex.quote(c) for c in cmd), "checks": check_args,
            "roundtrip": stats(roundtrip), "check_alone": stats(own),
            "overhead_s": round(overhead, 3), "remote_commands": trips[-1], "status": status}


def _json_or_none(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _count_round_trips(host_logs: Path) -> dict:
    """Commands sent per kind, from the run's provision.log, plus bytes pushed and pulled."""
    counts: dict = {}
    for log in host_logs.glob(f"*/{PROVISION_LOG}"):
        text = log.read_text()
        for label in re.findall(r"^\[\d\d:\d\d:\d\d\] ([\w -]+): \$ ", text, re.M):
            counts[label] = counts.get(label, 0) + 1
        # the pull is logged as an event, not as a command
        counts["pull"] = len(re.findall(r"^\[\d\d:\d\d:\d\d\] pulled \d+ bytes", text, re.M))
        pushed = re.search(r"\((\d+) bytes pushed\)", text)
        pulled = re.search(r"pulled (\d+) bytes", text)
        counts["bytes_pushed"] = int(pushed.group(1)) if pushed else None
        counts["bytes_pulled"] = int(pulled.group(1)) if pulled else None
    return counts
