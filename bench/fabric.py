"""What `gpuprov fabric` costs beyond the tests themselves, per round, for N hosts.

    python3 -m bench.fabric [--hosts 16] [--seconds 1] [--runs 2]

As root: re-runs itself as PID 1 of fresh network, PID and mount namespaces (as
tests/netns.py does), builds N hosts there (tests/fabric_net.py: a namespace, a veth to a
bridge and an sshd each, real iperf3), and times `gpuprov fabric --host all` in a subprocess,
as a user runs it. From its `--json`: each round's wall time, and the longest client command of
the round (`test_s`: the iperf3 client as the node ran it, its SSH exec included). Overhead
per round = round seconds - fabric_seconds (everything that is not the test's own duration:
starting and stopping the servers, the clients' start, the SSH round trips); `over client` =
round seconds - the round's longest client. Target (issue 33): at most 2 s per round, and at
most 2 rounds for any N.

All hosts share this machine's cores: N iperf3 pairs at once on 2 cores is part of what is
measured (the figures themselves, Gb/s, mean nothing here).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from bench.common import REPO, machine


def _inside(hosts: int, seconds: float, runs: int) -> dict:
    from tests.fabric_net import FabricNet, start_fabric
    from tests.sshd import shared_tmp

    net = FabricNet(hosts)
    work = shared_tmp()
    rows = []
    try:
        inv = net.inventory(work, {"vars": {"fabric_seconds": seconds}})
        for _ in range(runs):
            began = time.monotonic()
            run = start_fabric(work, inv)
            run.communicate(timeout=600)
            total = time.monotonic() - began
            doc = json.loads((work / "out.json").read_text())["fabric"]
            for r in doc["rounds"]:
                clients = [p["test_s"] for p in doc["pairs"] if p["round"] == r["round"]]
                rows.append({"round": r["round"], "pairs": r["pairs"], "seconds": r["seconds"],
                             "overhead_s": round(r["seconds"] - seconds, 3),
                             "over_client_s": round(r["seconds"] - max(clients), 3),
                             "failed": sum(1 for p in doc["pairs"] if p["round"] == r["round"]
                                           and p["value"] is None)})
            rows.append({"total_s": round(total, 2), "rc": run.returncode,
                         "rounds": len(doc["rounds"]), "suspects": doc["suspect_nodes"],
                         "links": doc["suspect_links"],
                         "spread": [round(min(v), 2), round(max(v), 2)] if (v := [
                             p["value"] for p in doc["pairs"] if p["value"]]) else []})
    finally:
        net.close()
        shutil.rmtree(work, ignore_errors=True)
    return {"hosts": hosts, "seconds": seconds, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(_inside(args.hosts, args.seconds, args.runs)), flush=True)
        return
    if os.geteuid() != 0 or not shutil.which("iperf3"):
        sys.exit("needs root and iperf3 (.ci/setup --dev)")
    argv = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            sys.executable, "-m", "bench.fabric", "--inside", "--hosts", str(args.hosts),
            "--seconds", str(args.seconds), "--runs", str(args.runs)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        sys.exit(f"bench failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    data = json.loads(lines[-1])
    info = machine()
    print(f"# {socket.gethostname()}: {info}")
    print(f"hosts {data['hosts']}, tests of {data['seconds']:g} s")
    print("round  pairs  seconds  overhead_s  over_client_s  failed")
    for row in data["rows"]:
        if "round" in row:
            print(f"{row['round']:>5}  {row['pairs']:>5}  {row['seconds']:>7.2f}  "
                  f"{row['overhead_s']:>10.2f}  {row['over_client_s']:>13.2f}  {row['failed']:>6}")
        else:
            print(f"run: {row['total_s']} s in all (rc {row['rc']}), {row['rounds']} rounds; "
                  f"figures {row['spread']} Gb/s; suspects {row['suspects']}, links {row['links']} "
                  "(on a clean network: what sharing 2 cores does to the figures)")


if __name__ == "__main__":
    main()
