"""What an idle sweep costs: `gpuprov validate --host hpc1 --sweep` on a real test cluster, and
reading every node's history to decide which nodes a sweep skips.

    python3 -m bench.slurm_sweep [--nodes 16] [--batches 4,16] [--history-nodes 1000] [--runs 10]

As root, with Slurm installed (`.ci/setup --dev`): starts a real test cluster with preemption
(tests/slurm_cluster.py, `preempt=True`) and, per batch size, times in this process a first
sweep (every node idle, none validated: `total`, and the jobs' own time as slurm.json's
`job_s` per batch) and a second one right after, within --max-age (every node skipped: the
survey, the preemption check and each node's history read). The validation is the cheapest
real one (`--checks xid` of an empty kernel log), so `total` is mostly the sweep's own cost.

`--history-nodes`: the selection alone at scale, without a cluster: a logs folder of that many
nodes with `--runs` runs each (results.json and validation.json, as a sweep leaves them), and
`report.history.last_validation` for every node, as a sweep's plan calls it (cold: the files
were just written, so the page cache holds them; the figure is the reading and parsing).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from remote.commands import validate as validate_cmd
from remote.ground.runfolder import RESULTS, VALIDATION_ATTEMPT, attempt_record
from remote.report.history import last_validation
from remote.scheduler.slurm import CLUSTER_RECORD
from tests.slurm_cluster import SlurmCluster, missing_reason

from .common import BenchError


def _inventory(cluster: SlurmCluster, work: Path, batch: int) -> Path:
    path = work / "inventory.yaml"
    (work / "kernel.log").touch()
    path.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local",
        "slurm": {"partition": "debug", "conf": str(cluster.conf), "gpus_per_node": 2,
                  "sweep_partition": "sweep", "sweep_batch": batch},
        "vars": {"validate_args": f"--checks xid --kernel-log {work / 'kernel.log'}"}}}}))
    return path


def _sweep(inventory: Path, logs: Path) -> tuple[int, float]:
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = validate_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(logs),
                              sweep=True, max_age="1h")
    return rc, time.monotonic() - started


def cluster_rows(nodes: int, batches: list[int]) -> list[str]:
    why = missing_reason()
    if why:
        raise BenchError(why)
    rows = []
    cluster = SlurmCluster(nodes, preempt=True)
    try:
        for batch in batches:
            work = Path(tempfile.mkdtemp(prefix="gpuprov-bench-sweep-"))
            try:
                inventory, logs = _inventory(cluster, work, batch), work / "logs"
                rc, first = _sweep(inventory, logs)
                run = sorted((logs / "hpc1").iterdir())[-1]
                record = json.loads((run / CLUSTER_RECORD).read_text())
                jobs = [b.get("job_s") or 0.0 for b in record["sweep"]["batches"]]
                passed = sum(n.get("ok") is True for n in record["nodes"].values())
                rc2, second = _sweep(inventory, logs)
                if rc or rc2 or passed != nodes:
                    raise BenchError(f"sweep exit {rc}/{rc2}, {passed} of {nodes} passed")
                rows.append(f"| {nodes} | {batch} | {len(jobs)} | {first:.2f} | "
                            f"{statistics.median(jobs):.2f} | {second:.2f} |")
            finally:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        cluster.stop()
    return rows


def history_row(nodes: int, runs: int) -> str:
    work = Path(tempfile.mkdtemp(prefix="gpuprov-bench-history-"))
    try:
        results = json.dumps({"schema": 2, "ok": True, "host": {"hostname": "n"},
                              "checks": [{"name": "xid", "status": "pass", "required": True}]})
        base = time.time() - runs * 86400
        for n in range(nodes):
            for r in range(runs):
                at = base + r * 86400
                run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(at)) + f".000Z-{r:04x}"
                folder = work / f"n{n}" / run_id
                folder.mkdir(parents=True)
                (folder / RESULTS).write_text(results)
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
                (folder / VALIDATION_ATTEMPT).write_text(attempt_record(stamp, stamp, "passed"))
        started = time.monotonic()
        found = sum(last_validation(work, f"n{n}") is not None for n in range(nodes))
        took = time.monotonic() - started
        if found != nodes:
            raise BenchError(f"{found} of {nodes} nodes had a last validation")
        return f"| {nodes} | {runs} | {took:.2f} | {took / nodes * 1000:.2f} |"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--batches", default="4,16")
    parser.add_argument("--history-nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-cluster", action="store_true", help="the history figure only")
    args = parser.parse_args()
    if not args.no_cluster:
        print("| nodes | batch | jobs | first sweep s | job s (median) | second sweep s (all skipped) |")
        print("|---|---|---|---|---|---|")
        for row in cluster_rows(args.nodes, [int(b) for b in args.batches.split(",")]):
            print(row)
        print()
    print("| nodes | runs each | last_validation for all, s | ms per node |")
    print("|---|---|---|---|")
    print(history_row(args.history_nodes, args.runs))


if __name__ == "__main__":
    main()
