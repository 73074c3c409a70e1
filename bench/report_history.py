"""Time `gpuprov report` over a generated logs tree: 1,000 runs of 100 hosts by default (issue
34: under 5 s and under 500 MB of memory), each run a results.json (a few checks and a bench
of 3 models, as the validation package writes it) and a stack.json (a driver change half-way
through on every tenth host, so the timelines have stack changes to show); every seventh host
fails now and then, so there are histories, flapping and quarantines to report.

    python3 -m bench.report_history [--hosts N] [--runs N] [--keep DIR]

Runs `python3 -m invoke report` in a child process, as a user would, and prints its wall
time, CPU time (user + sys: the figure a busy shared machine inflates least) and peak RSS
(the child's ru_maxrss), with the command that reproduces them.

May import: the standard library, `remote.ground.runfolder` (the run folder's names).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from remote.ground.runfolder import RESULTS, STACK_MANIFEST, run_dir

REPO = Path(__file__).resolve().parent.parent
FLAGS = "flags.json"  # the report's own output (remote/report/__init__.py), not a run's file
MODELS = {"alexnet": 1.2, "resnet18": 2.1, "resnet50": 5.0}


def results(ok: bool, factor: float) -> str:
    checks = [{"name": "system", "status": "pass", "required": True, "reason": "",
               "elapsed_s": 0.1, "figures": {}},
              {"name": "gpu", "status": "pass" if ok else "fail", "required": True,
               "reason": "" if ok else "Xid 79", "elapsed_s": 0.2, "figures": {}},
              {"name": "bench", "status": "pass", "required": True, "reason": "",
               "elapsed_s": 1.0, "figures": {"models": {
                   m: {"latency_ms": {"median": v * factor}} for m, v in MODELS.items()}}}]
    return json.dumps({"schema": 1, "started": "2026-11-22T10:00:00Z", "ok": ok,
                       "host": {"hostname": "x", "gpu_name": "NVIDIA H100 80GB HBM3",
                                "gpu_count": 8, "device": "cuda"}, "checks": checks})


def stack(driver: str) -> str:
    packages = [{"name": f"pkg{n}", "version": "1.0", "record_sha256": f"{n:064x}"}
                for n in range(50)]
    return json.dumps({"schema": 1, "kernel": "6.1.0-41-amd64", "driver": driver,
                       "cuda": "13.0.96", "cudnn": "9.28.1.4", "nccl": "", "torch": "2.9.0",
                       "python": "3.11.2", "environment": "/home/admin/.gpuprov/venv",
                       "packages": packages, "apt": []})


def make_tree(logs: Path, hosts: int, runs: int) -> None:
    per_host = max(1, runs // hosts)
    for h in range(hosts):
        for r in range(per_host):
            run = run_dir(logs, f"gpu{h:03d}", f"20261126T{r // 60:02d}{r % 60:02d}00.000Z-{h:04x}")
            run.mkdir(parents=True)
            ok = not (h % 7 == 0 and r % 3 != 0)
            (run / RESULTS).write_text(results(ok, 1.0 + (h % 5) * 0.01))
            driver = "590.44.01" if h % 10 == 0 and r >= per_host // 2 else "580.95.05"
            (run / STACK_MANIFEST).write_text(stack(driver))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--keep", help="build the tree here and keep it (default: a temporary folder)")
    args = parser.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="report-history-"))
    try:
        logs, out = root / "logs", root / "report"
        make_tree(logs, args.hosts, args.runs)
        command = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "report",
                   "--logs", str(logs), "--out", str(out)]
        started = time.perf_counter()
        proc = subprocess.run(command, cwd=root, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
        took = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_mib, cpu_s = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        if proc.returncode not in (0, 1):
            print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
            return 1
        history = json.loads((out / FLAGS).read_text())["history"]
        print(f"gpuprov report over {sum(h['runs'] for h in history)} runs of {len(history)} "
              f"hosts: {took:.2f} s wall, {cpu_s:.2f} s CPU (user+sys), peak RSS "
              f"{peak_mib:.0f} MiB (targets: 5 s, 500 MB); "
              f"{sum(h['quarantined'] for h in history)} quarantined; load average "
              + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f", {os.cpu_count()} CPUs")
        print("command: python3 -m bench.report_history "
              + " ".join(argv) if argv else "command: python3 -m bench.report_history")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
