"""How long a `MaxSessions 1` sshd refuses a new session after the previous one (issue 21,
point 6): what `remote.transport.ssh.SESSION_RETRY_DELAYS_S` must cover.

    python3 -m bench.one_session_host [--commands 300] [--load N]

As root. Starts the test's one-session sshd (tests/test_max_sessions.py: MaxSessions 1, a
banner, a chatty ~/.ssh/rc), logs in once with paramiko and runs `true` on a new session
channel again and again, as gpuprov runs commands: open, exec, read to the exit status, close,
and at once the next open. A refused open is asked again every 10 ms. Prints how many opens
were refused at least once and the distribution of the time until the open went through.
`--load N` runs N busy-loop processes meanwhile (default: cores + 1; 0: none).
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time

import paramiko

from tests.test_max_sessions import RC_USER, _OneSessionFarm


def main() -> None:
    logging.getLogger("paramiko").addHandler(logging.NullHandler())  # a line per refusal
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=300)
    parser.add_argument("--load", type=int, default=(os.cpu_count() or 1) + 1)
    options = parser.parse_args()
    farm = _OneSessionFarm()
    load = [subprocess.Popen(["timeout", "600", sys.executable, "-c", "while True: pass"])
            for _ in range(options.load)]
    waits, refusals = [], 0
    try:
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # loopback test sshd
        client.connect(farm.addresses[0], port=farm.port, username=RC_USER,
                       key_filename=str(farm.key), look_for_keys=False, allow_agent=False)
        transport = client.get_transport()
        assert transport is not None
        for _ in range(options.commands):
            started = time.monotonic()
            tries = 0
            while True:
                try:
                    channel = transport.open_session(timeout=15)
                    break
                except paramiko.ChannelException:
                    tries += 1
                    time.sleep(0.01)
            if tries:
                refusals += 1
                waits.append(time.monotonic() - started)
            channel.exec_command("true")
            while not channel.exit_status_ready():
                channel.recv(65536)
                channel.recv_stderr(65536)
                time.sleep(0.001)
            channel.close()
        client.close()
    finally:
        for proc in load:
            proc.terminate()
            proc.wait(10)
        farm.close()
    print(f"{options.commands} sessions, load {options.load} busy loops on "
          f"{os.cpu_count()} cores: {refusals} refused at first")
    if waits:
        waits.sort()
        print(f"time until the open went through: median {statistics.median(waits):.3f} s, "
              f"p90 {waits[int(len(waits) * 0.9)]:.3f} s, max {waits[-1]:.3f} s")


if __name__ == "__main__":
    main()
