"""What the Slurm route costs on top of the validation itself, for 3 and 16 nodes.

    python3 -m bench.slurm_overhead [--nodes 3,16] [--runs 3]

As root, with Slurm installed (`.ci/setup --dev`): starts a real test cluster per node count
(tests/slurm_cluster.py: munged, slurmctld, one slurmd per node, all on this machine) and
times `gpuprov validate --host hpc1` in this process, from the call to its return: the
login-node survey, the job (one salloc, one srun step per node started together, the package
on each step's stdin), every node's results home and stored, slurm.json written. The overhead
is that time minus the validation's own: the longest time a node spent in `python3 -m
validate`, timed on the node (`validate_s` in slurm.json; the nodes run in parallel). The
validation is the cheapest real one (`--checks xid` of an empty kernel log). `job`: the salloc
command with its steps, as the login node saw it (the rest of `total` is the control side:
inventory, survey, storing results). Target (issue 25): at most 2 s, growing no more than
linearly with the nodes.

All the "nodes" share this machine's cores: with 16 of them, 16 Python interpreters start at
once, and N srun processes on the login node, so part of what grows with the count is this
machine, not the route (the bare `srun -N N true` line shows the scheduler's own share for one
step over all nodes).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from remote import cli
from remote.runfolder import CLUSTER_RECORD, LOGS_DIR
from tests.slurm_cluster import SlurmCluster, missing_reason


def one_run(cluster: SlurmCluster, work: Path) -> dict[str, float]:
    work.mkdir(parents=True)
    kernel_log = work / "kernel.log"
    kernel_log.touch()
    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local",
        "slurm": {"partition": "debug", "conf": str(cluster.conf)},
        "vars": {"validate_args": f"--checks xid --kernel-log {kernel_log}"}}}}))
    logs = work / LOGS_DIR
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        rc = cli.validate(host="hpc1", inventory=str(inventory), logs_dir=str(logs))
    total = time.monotonic() - started
    if rc != 0:
        raise SystemExit(f"the run failed (exit {rc}):\n{shown.getvalue()[-3000:]}")
    (record_dir,) = list((logs / "hpc1").iterdir())
    record = json.loads((record_dir / CLUSTER_RECORD).read_text())
    own = max(node["validate_s"] for node in record["nodes"].values())
    return {"total": total, "validation": own, "overhead": total - own, "srun": record["job_s"]}


def bare_srun(cluster: SlurmCluster) -> float:
    started = time.monotonic()
    cluster.run("srun", f"--nodes={cluster.count}", "--ntasks-per-node=1", "--exclusive",
                "true")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="3,16", help="node counts, comma separated")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per count")
    options = parser.parse_args()
    why = missing_reason()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'nodes':>5}  {'overhead median':>15}  {'min':>6}  {'max':>6}  "
          f"{'total':>6}  {'job':>9}  {'validation':>10}  {'bare srun':>9}")
    for count in [int(c) for c in options.nodes.split(",")]:
        cluster = SlurmCluster(count)
        try:
            with tempfile.TemporaryDirectory(prefix="gpuprov-bench-") as tmp:
                one_run(cluster, Path(tmp) / "warm")  # the first job after start waits longer
                runs = [one_run(cluster, Path(tmp) / f"run{i}") for i in range(options.runs)]
            srun = statistics.median(bare_srun(cluster) for _ in range(3))
        finally:
            cluster.stop()
        overheads = [r["overhead"] for r in runs]
        print(f"{count:>5}  {statistics.median(overheads):>14.3f}s  {min(overheads):>5.3f}s  "
              f"{max(overheads):>5.3f}s  {statistics.median(r['total'] for r in runs):>5.3f}s  "
              f"{statistics.median(r['srun'] for r in runs):>8.3f}s  "
              f"{statistics.median(r['validation'] for r in runs):>9.3f}s  {srun:>8.3f}s",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
