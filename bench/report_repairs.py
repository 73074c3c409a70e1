"""Time `gpuprov report` over a generated logs tree with remediation records (issue 46: 1,000
nodes of history, under 5 s and under 500 MB of memory): 1,000 nodes by default, 6 runs each,
each run a results.json as bench/report_history.py writes it (a few checks and a bench of 3
models). Every third run of a node is a verdict that names an action (failed on the node's first
run, then again on every fifth node: a repair that did not hold), the run after it a remediation
run: its record (remote/ground/repairs.py's `Repair.to_json`) and its re-validation's
results.json; a tenth of the nodes is left out after it (the re-validation failed), a tenth is
held back by the breaker (the record alone, no validation).

    python3 -m bench.report_repairs [--nodes N] [--runs N] [--keep DIR] [--baseline]

Runs `python3 -m invoke report` in a child process, as a user would, and prints its wall time,
CPU time (user + sys: the figure a busy shared machine inflates least) and peak RSS (the
child's ru_maxrss), with the command that reproduces them; with `--baseline`, then the wall
and CPU time of the same over the same tree without its records: the repairs' own share is the
difference.

May import: the standard library, `remote.ground.runfolder` and `remote.ground.repairs` (the run
folder's names, the record's writer), bench/report_history.py (its results.json), and
`remote.report` to time the repairs' own part in process.
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
from calendar import timegm
from pathlib import Path

from bench.report_history import FLAGS, REPO, results
from remote.ground.repairs import (
    LEFT_OUT,
    REMEDIATION_RECORD,
    REPAIRED,
    VALIDATE_STEP,
    WAITING,
    Repair,
    Step,
    Trigger,
)
from remote.ground.runfolder import RESULTS, run_dir

DAY = timegm((2026, 11, 26, 0, 0, 0, 0, 0, 0))
ACTIONS = ("reboot the node", "reset the GPU")


def run_name(node: int, run: int) -> str:
    return f"20261126T{run // 60:02d}{run % 60:02d}00.000Z-{node:04x}"


def outcome_of(node: int) -> str:
    return {3: LEFT_OUT, 7: WAITING}.get(node % 10, REPAIRED)


def record(name: str, node: int, run: int) -> str:
    """The remediation record of `node`'s run `run`, triggered by the run before it."""
    action, outcome = ACTIONS[node % 2], outcome_of(node)
    start = DAY + run * 60.0
    took = 300.0 + (node % 7) * 60
    steps = [] if outcome == WAITING else [
        Step(action, start, took - 120, "done", "back after 180 s"),
        Step(VALIDATE_STEP, start + took - 120, 120, "done" if outcome == REPAIRED else "failed")]
    return Repair(name, run_name(node, run),
                  Trigger(run_name(node, run - 1), "gpu: Xid 79: GPU has fallen off the bus", action),
                  start, None if outcome == WAITING else start + took, steps, outcome,
                  "still failing after the reboot: left out for an RMA" if outcome == LEFT_OUT
                  else "").to_json()


def make_tree(logs: Path, nodes: int, runs: int, records: bool = True) -> None:
    for h in range(nodes):
        name = f"gpu{h:04d}"
        for r in range(runs):
            run = run_dir(logs, name, run_name(h, r))
            run.mkdir(parents=True)
            if r % 3 == 1:  # a remediation run
                if records:
                    (run / REMEDIATION_RECORD).write_text(record(name, h, r))
                if outcome_of(h) != WAITING:
                    (run / RESULTS).write_text(results(outcome_of(h) == REPAIRED, 1.0))
                elif not records:
                    run.rmdir()
                continue
            ok = r % 3 == 2 or not (r == 0 or h % 5 == 0)
            (run / RESULTS).write_text(results(ok, 1.0 + (h % 5) * 0.01))


def measure(root: Path, logs: Path, out: Path) -> tuple[float, float, float, dict]:
    """(wall s, CPU s, peak RSS MiB, flags.json) of one `invoke report` in a child process."""
    command = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "report",
               "--logs", str(logs), "--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    took = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    cpu = (usage.ru_utime + usage.ru_stime) - (before.ru_utime + before.ru_stime)
    # ru_maxrss of the children is the largest of any child so far: the first run is the one
    # with the records, so its figure is its own
    return took, cpu, usage.ru_maxrss / 1024, json.loads((out / FLAGS).read_text())


def own_part(logs: Path) -> float:
    """CPU seconds of the repairs' part of a report over `logs`: their reading, the printed
    section (twice: terminal and report.txt) and flags.json's `repairs`."""
    from remote.report.analyse import build_report
    from remote.report.export import repairs_json
    from remote.report.repairs import find_repairs
    from remote.report.text import repairs_table

    report = build_report(logs)
    started = time.process_time()
    repairs, _problems = find_repairs(logs, report.history, report.repairs.window)
    repairs_table(repairs)
    repairs_table(repairs)
    json.dumps(repairs_json(repairs))
    return time.process_time() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=6, help="run folders per node")
    parser.add_argument("--keep", help="build the tree here and keep it (default: a temporary folder)")
    parser.add_argument("--baseline", action="store_true",
                        help="then time the report again over the same tree without its records")
    args = parser.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="report-repairs-"))
    try:
        make_tree(root / "logs", args.nodes, args.runs)
        try:
            took, cpu, peak, flags = measure(root, root / "logs", root / "report")
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        rep = flags["repairs"]
        print(f"gpuprov report over {sum(h['runs'] for h in flags['history'])} runs of "
              f"{len(flags['history'])} nodes with {rep['repairs']} remediation records: "
              f"{took:.2f} s wall, {cpu:.2f} s CPU (user+sys), peak RSS {peak:.0f} MiB (targets: "
              f"5 s, 500 MB); {rep['nodes_repaired']} nodes repaired, median time to repair "
              f"{rep['median_time_to_repair_s']} s, {len(rep['coming_back'])} nodes whose repair did not hold; "
              "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
              + f", {os.cpu_count()} CPUs")
        print(f"the repairs' own part, in this process: {own_part(root / 'logs'):.2f} s CPU "
              "(reading the records and what did not hold, the printed section, flags.json's part)")
        if args.baseline:
            make_tree(root / "logs-without", args.nodes, args.runs, records=False)
            took, cpu, _peak, flags = measure(root, root / "logs-without", root / "report-without")
            print(f"the same tree without its records: {took:.2f} s wall, {cpu:.2f} s CPU "
                  "(user+sys); load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        print("command: python3 -m bench.report_repairs " + " ".join(argv))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
