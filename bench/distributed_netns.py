"""What `gpuprov validate --distributed` costs on 4 hosts in network namespaces, CPU and gloo.

    python3 -m bench.distributed_netns [--runs 3]

As root: each run is tests/distributed_net.py's passing scenario (4 hosts, each its own
namespace and sshd, real torch 2.14.1 on the CPU, validate's own checks cut to torch_import) as
PID 1 of fresh namespaces (tests/netns.py). Reported from each run: the distributed job's own
wall time (the stack probe on every node, torchrun's rendezvous, the all-reduce sweep up to
4 MiB, the training step, the cleanup: `elapsed_s` of distributed.json) and the whole command's.
All hosts share this machine's 2 cores: the figures are this machine's, not a cluster's; the
bus bandwidth of gloo over veths means nothing beyond it.
"""
from __future__ import annotations

import argparse
import json
import statistics

from bench.common import machine


def main() -> None:
    from tests.netns import run_scenario

    parser = argparse.ArgumentParser(prog="python3 -m bench.distributed_netns")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for _ in range(args.runs):
        result = run_scenario("dist_pass", timeout=600)
        rec = result["records"]["n0"]
        rows.append({"rc": result["rc"], "job_s": rec["elapsed_s"], "command_s": result["took_s"],
                     "busbw_gbs": max(rec["sizes"], key=lambda r: r["bytes"])["busbw_gbs"]
                     if rec["sizes"] else None})
    job = [r["job_s"] for r in rows]
    print(json.dumps({"machine": machine(), "runs": rows,
                      "job_s_median": statistics.median(job), "job_s_max": max(job)}, indent=2))


if __name__ == "__main__":
    main()
