"""How far apart the two ends of an honest iperf3 test are: the sender's own figure (the
client's `end.sum_sent`) against the receiver's own (the server's `end.sum_received`), which
`gpuprov fabric` compares (remote/fabric/verdict.py DISAGREE).

    python3 -m bench.fabric_ends [--tests 10] [--seconds 1]

As root: re-runs itself inside a fresh network namespace (`unshare --net`: only its own `lo`,
nothing of the machine's), then runs `--tests` real iperf3 tests on that `lo` at full speed,
then as many with `lo` at a veth's MTU (1500) capped at 100 Mbit/s by tc's tbf (as
tests/fabric_net.py caps a veth).
Prints, for each, the largest and the median ratio of the higher figure over the lower.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def one_test(seconds: float, port: int) -> float:
    server = subprocess.Popen(["iperf3", "-s", "-1", "-J", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    client = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", f"{seconds:g}",
                             "-J"], capture_output=True, text=True, timeout=60)
    server_out = server.communicate(timeout=30)[0]
    sent = json.loads(client.stdout)["end"]["sum_sent"]["bits_per_second"]
    received = json.loads(server_out)["end"]["sum_received"]["bits_per_second"]
    return max(sent, received) / min(sent, received)


def series(label: str, tests: int, seconds: float) -> None:
    ratios = [one_test(seconds, 52000 + i) for i in range(tests)]
    print(f"{label}: {tests} tests of {seconds:g} s: higher/lower median "
          f"{statistics.median(ratios):.4f}, max {max(ratios):.4f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tests", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    if os.environ.get("GPUPROV_BENCH_INSIDE") != "1":
        env = dict(os.environ, GPUPROV_BENCH_INSIDE="1")
        raise SystemExit(subprocess.call(["unshare", "--net", sys.executable, "-m",
                                          "bench.fabric_ends", *sys.argv[1:]], env=env))
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    series("lo, full speed", args.tests, args.seconds)
    # the MTU of the fabric tests' veths (tests/fabric_net.py): lo's 64 KiB packets would not
    # pass a 64 KiB tbf bucket at all
    subprocess.run(["ip", "link", "set", "lo", "mtu", "1500"], check=True)
    subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "100mbit",
                    "burst", "64kb", "latency", "100ms"], check=True)
    series("lo, 100 Mbit/s (tbf)", args.tests, args.seconds)


if __name__ == "__main__":
    main()
