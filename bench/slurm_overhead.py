"""What the Slurm route costs on top of the validation itself, and the login node's memory.

    python3 -m bench.slurm_overhead [--nodes 16,64,128] [--runs 2]

As root, with Slurm installed (`.ci/setup --dev`): starts a real test cluster per node count
(tests/slurm_cluster.py: munged, slurmctld, one slurmd per node, all on this machine) and
times `gpuprov validate --host hpc1` in this process, from the call to its return: the
login-node survey, the job (one salloc, one srun step whose tasks are all the nodes, the package
on the step's stdin), every node's results home and stored, slurm.json written. The overhead
is that time minus the validation's own: the longest time a node spent in `python3 -m
validate`, timed on the node (`validate_s` in slurm.json; the nodes run in parallel). The
validation is the cheapest real one (`--checks xid` of an empty kernel log). `job`: the salloc
command with its steps, as the login node saw it (the rest of `total` is the control side:
inventory, survey, storing results). Target (issue 25): at most 2 s, growing no more than
linearly with the nodes; issue 43: at most 2 s at 64 nodes and 3 s at 128, at most 2 srun
processes on the login node at any time, its peak memory at 128 nodes at most 1.3x the one at 16.

The login node's memory: while each run goes, the processes under `salloc` (the login-node
script, its srun clients and their labelling awks) are sampled every 0.1 s from /proc
(VmRSS), and the peak of their sum is kept (`tree MiB`), with the srun clients' own
(`srun MiB`: their RSS summed, shared pages counted once per process, so an upper bound) and
the most srun processes seen at once (`sruns`: every process named srun under salloc). `job
out KiB`: all the job's stdout (every node's lines and results), `results KiB`: the largest
node's results archive. `tree x16`: the tree's peak over the first count's (16 by default).
`1st task` and `last task`: when, from the job's start, the first and the last node's task
said it started (slurm.json `first_task_s`, `last_task_s`): salloc's grant and srun's launch,
and how far the launch spreads over the nodes on this machine's two cores.

All the "nodes" share this machine's cores: with 16 of them, 16 Python interpreters start at
once, and N srun processes on the login node, so part of what grows with the count is this
machine, not the route (the bare `srun -N N true` line shows the scheduler's own share for one
step over all nodes). The load average is printed with the table: rerun when it is high.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import yaml

from remote.commands import validate as validate_cmd
from remote.ground.runfolder import LOGS_DIR
from remote.scheduler.slurm import CLUSTER_RECORD
from tests.slurm_cluster import SlurmCluster, missing_reason

PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _processes() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, RSS in KiB) of every process readable now, from
    /proc/PID/stat (proc(5): comm field 2, ppid field 4, rss field 24 in pages): one short
    read per process, where /proc/PID/status costs the kernel every field it formats."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                line = stat.read()
        except OSError:
            continue
        head, _, tail = line.rpartition(b")")
        fields = tail.split()
        if len(fields) < 22:
            continue
        found[int(entry)] = (int(fields[1]), head.partition(b"(")[2].decode(errors="replace"),
                             int(fields[21]) * PAGE_KIB)
    return found


class LoginMemory:
    """Samples the processes under this process's `salloc` (the login node's share of a run)
    until stopped; keeps the peaks. The sampler is a process of its own: as a thread of this
    one it held the interpreter lock the route's own threads need (reading /proc every 0.1 s
    cost 2.5 s of this process's time in a 128-node run, profiled), and it
    counted against the very overhead it sits beside."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.tree_kib = self.srun_kib = self.srun_one_kib = self.sruns = 0
        context = multiprocessing.get_context("fork")
        self._stop = context.Event()
        self._peaks, sender = context.Pipe(duplex=False)
        self._process = context.Process(target=_sample, daemon=True,
                                        args=(os.getpid(), interval, self._stop, sender))

    def __enter__(self) -> "LoginMemory":
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.tree_kib, self.srun_kib, self.srun_one_kib, self.sruns = self._peaks.recv()
        self._process.join()


def _sample(me: int, interval: float, stop: Any, peaks: Any) -> None:
    """Until `stop` is set: the peaks of the tree under `me`'s salloc, sent on `peaks`."""
    tree_kib = srun_kib = srun_one_kib = sruns_max = 0
    while not stop.wait(interval):
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        roots = [p for p in _descendants(children, me) if procs[p][1] == "salloc"]
        tree = [p for root in roots for p in [root, *_descendants(children, root)]]
        sruns = [procs[p][2] for p in tree if procs[p][1] == "srun"]
        tree_kib = max(tree_kib, sum(procs[p][2] for p in tree))
        srun_kib = max(srun_kib, sum(sruns))
        srun_one_kib = max([srun_one_kib, *sruns])
        sruns_max = max(sruns_max, len(sruns))
    peaks.send((tree_kib, srun_kib, srun_one_kib, sruns_max))


def _descendants(children: dict[int, list[int]], root: int) -> list[int]:
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def one_run(cluster: SlurmCluster, work: Path) -> dict[str, float]:
    work.mkdir(parents=True)
    kernel_log = work / "kernel.log"
    kernel_log.touch()
    inventory = work / "inventory.yaml"
    slurm: dict[str, object] = {"partition": "debug", "conf": str(cluster.conf)}
    inventory.write_text(yaml.safe_dump({"hosts": {"hpc1": {
        "connection": "local", "slurm": slurm,
        "vars": {"validate_args": f"--checks xid --kernel-log {kernel_log}"}}}}))
    logs = work / LOGS_DIR
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()) as shown, LoginMemory() as memory:
        rc = validate_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(logs))
    total = time.monotonic() - started
    if rc != 0:
        raise SystemExit(f"the run failed (exit {rc}):\n{shown.getvalue()[-3000:]}")
    (record_dir,) = list((logs / "hpc1").iterdir())
    record = json.loads((record_dir / CLUSTER_RECORD).read_text())
    own = max(node["validate_s"] for node in record["nodes"].values())
    results = [node.get("results_bytes") or 0 for node in record["nodes"].values()]
    return {"total": total, "validation": own, "overhead": total - own, "srun": record["job_s"],
            "out_kib": (record.get("job_stdout_bytes") or 0) / 1024,
            "results_kib": max(results) / 1024,
            "tree_mib": memory.tree_kib / 1024, "srun_mib": memory.srun_kib / 1024,
            "srun_one_mib": memory.srun_one_kib / 1024, "sruns": memory.sruns,
            "first": record.get("first_task_s") or 0.0, "last": record.get("last_task_s") or 0.0}


def bare_srun(cluster: SlurmCluster) -> float:
    started = time.monotonic()
    cluster.run("srun", f"--nodes={cluster.count}", "--ntasks-per-node=1", "--exclusive",
                "true")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="16,64,128", help="node counts, comma separated")
    parser.add_argument("--runs", type=int, default=2, help="timed runs per count")
    options = parser.parse_args()
    why = missing_reason()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'nodes':>5}  {'overhead median':>15}  {'min':>6}  {'max':>6}  "
          f"{'total':>6}  {'job':>9}  {'validation':>10}  {'bare srun':>9}  {'1st task':>8}  "
          f"{'last task':>9}  {'sruns':>5}  "
          f"{'srun MiB':>8}  {'tree MiB':>8}  {'tree x16':>8}  {'job out KiB':>11}  "
          f"{'results KiB':>11}  {'load':>5}")
    first_tree: Optional[float] = None
    for count in [int(c) for c in options.nodes.split(",")]:
        cluster = SlurmCluster(count)
        try:
            srun = statistics.median(bare_srun(cluster) for _ in range(3))
            with tempfile.TemporaryDirectory(prefix="gpuprov-bench-") as tmp:
                one_run(cluster, Path(tmp) / "warm")  # the first job waits longer
                runs = [one_run(cluster, Path(tmp) / f"run{i}") for i in range(options.runs)]
            overheads = [r["overhead"] for r in runs]
            tree = max(r["tree_mib"] for r in runs)
            first_tree = first_tree or tree
            print(f"{count:>5}  {statistics.median(overheads):>14.3f}s  "
                  f"{min(overheads):>5.3f}s  {max(overheads):>5.3f}s  "
                  f"{statistics.median(r['total'] for r in runs):>5.3f}s  "
                  f"{statistics.median(r['srun'] for r in runs):>8.3f}s  "
                  f"{statistics.median(r['validation'] for r in runs):>9.3f}s  {srun:>8.3f}s  "
                  f"{statistics.median(r['first'] for r in runs):>7.3f}s  "
                  f"{statistics.median(r['last'] for r in runs):>8.3f}s  "
                  f"{max(r['sruns'] for r in runs):>5}  "
                  f"{max(r['srun_mib'] for r in runs):>8.1f}  {tree:>8.1f}  "
                  f"{tree / first_tree:>8.2f}  "
                  f"{max(r['out_kib'] for r in runs):>11.1f}  "
                  f"{max(r['results_kib'] for r in runs):>11.1f}  "
                  f"{os.getloadavg()[0]:>5.1f}", flush=True)
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
