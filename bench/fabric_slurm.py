"""What a `gpuprov fabric` run on a Slurm cluster spends starting jobs: each command on a node
(the probe, each pair's server and client) is a job of its own (`srun -N1 -n1 -c1 -w NODE`
from the login node).

    python3 -m bench.fabric_slurm [--runs 3] [--seconds 1] [--bare 10]

As root, with Slurm installed (`.ci/setup --dev`): starts the 3-node test cluster
(tests/slurm_cluster.py: munged, slurmctld, three slurmd on this machine; the login node is
this machine) and times, `--runs` times each:

- `bare srun`: one job of a trivial command, as fabric starts each of its commands
  (`srun -N1 -n1 -c1 -w n1 -p debug -u /bin/true`, `--bare` of them one after the other):
  what every command pays to start and end as a job;
- `gpuprov fabric --host hpc1` in this process, from the call to its return (`total`), with
  `fabric_seconds` tests: the round's wall time (`round`), and of it the clients' longest
  command (`client`: its srun, iperf3's connect and the test) less the test's own seconds
  (`client start`).

A run's jobs: 3 probes at once, then per pair a server job and a client job (the client
starts once the server listens: two job starts in a row on each pair's path). So about three
job starts lie on the run's critical path (the probes', the server's, the client's), plus
`scancel` at the end. `start-up share` = 3 x the bare job's median / total.

The nodes share this machine's 2 cores with slurmctld and three slurmd: a real cluster's
job start differs (its controller and network); the figures say what the design costs here.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.common import machine
from remote.commands import fabric as fabric_cmd
from tests.slurm_cluster import SlurmCluster, missing_reason


def bare_srun(cluster: SlurmCluster, count: int) -> list[float]:
    """Seconds of each of `count` trivial jobs on n1, one after the other."""
    took = []
    for _ in range(count):
        began = time.monotonic()
        subprocess.run(["srun", "-N1", "-n1", "-c1", "-w", "n1", "-p", "debug", "-u", "/bin/true"],
                       env=cluster.env, check=True, capture_output=True, timeout=120)
        took.append(time.monotonic() - began)
    return took


def fabric_run(cluster: SlurmCluster, work: Path, seconds: float) -> dict[str, float]:
    inventory = work / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({
        "vars": {"fabric_seconds": seconds},
        "hosts": {"hpc1": {"connection": "local",
                           "slurm": {"partition": "debug", "conf": str(cluster.conf)}}}}))
    out = work / "out.json"
    began = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = fabric_cmd.run(host="hpc1", inventory=str(inventory), logs_dir=str(work / "logs"),
                        json_path=str(out))
    total = time.monotonic() - began
    doc = json.loads(out.read_text())["fabric"]
    if rc != 0:
        raise SystemExit(f"fabric exit {rc}: {doc}")
    client = max(p["test_s"] for p in doc["pairs"])
    return {"total": total, "round": doc["rounds"][0]["seconds"], "client": client,
            "client_start": client - seconds}


def _spread(values: list[float]) -> str:
    return (f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--bare", type=int, default=10)
    args = parser.parse_args()
    why = missing_reason()
    if why:
        sys.exit(why)
    cluster = SlurmCluster(3)
    try:
        bare: list[float] = []
        runs = []
        with tempfile.TemporaryDirectory(prefix="gpuprov-bench-") as tmp:
            for number in range(args.runs):
                bare += bare_srun(cluster, args.bare)
                work = Path(tmp) / str(number)
                work.mkdir()
                runs.append(fabric_run(cluster, work, args.seconds))
    finally:
        cluster.stop()
    print(f"# {socket.gethostname()}: {machine()}")
    print(f"3 nodes, tests of {args.seconds:g} s, {args.runs} runs; min / median / max, seconds")
    print(f"bare srun job ({len(bare)}): {_spread(bare)}")
    for key in ("total", "round", "client", "client_start"):
        print(f"fabric {key.replace('_', ' ')}: {_spread([r[key] for r in runs])}")
    share = [3 * statistics.median(bare) / r["total"] for r in runs]
    print(f"start-up share (3 x bare median / total): {_spread(share)}")


if __name__ == "__main__":
    main()
