"""Does a streamed validate answer stall at paramiko's re-key? (issue 21, point 7)

    python3 -m bench.rekey_stream [--sizes 1,2]

Needs root: it starts one real sshd on loopback for the tests' login user (tests/sshd.py).
paramiko 5.1 asks for a new key exchange after 2**29 bytes (512 MiB) received
(paramiko/packet.py REKEY_BYTES), so a validate run printing more than that streams through at
least one re-key. For each size (GiB), one line of `x`, no newline until the end:

1. `transport`: one `SSHConnection.run` of `head -c SIZE /dev/zero | tr '\\0' x`, its output
   passed to a `LineSplitter` as validate's job does, under the default timeouts; paramiko's
   own DEBUG lines count the re-keys.
2. `invoke validate`: the whole command as a user runs it, against a host whose
   `validate_python` prints SIZE bytes on one line and writes a passing results.json; its
   time, exit status, the recap's verdict and the process's peak memory.

Prints one line per size and way; a stall shows as a time near a timeout and a failed host.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import time
from pathlib import Path

from remote.config.inventory import load_inventory
from remote.transport.base import LineSplitter
from remote.transport.connection import connection_for
from remote.transport.hostkeys import KnownHosts
from tests.conftest import REPO, write_yaml
from tests.procs import run_python_module_measured
from tests.sshd import SshdFarm, shared_tmp

GIB = 1 << 30
ADDRESS_INDEX = 90  # the sshd listens on 127.0.0.90

TALKER = """#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
head -c {size} /dev/zero | tr '\\0' x
mkdir -p "$out"
printf '%s' '{{"checks": [{{"name": "talk", "status": "pass", "required": true}}], "ok": true}}' \\
  > "$out/results.json"
"""


class _Rekeys(logging.Handler):
    """Counts paramiko's "Rekeying (hit ...)" lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Rekeying" in record.getMessage():
            self.count += 1


def through_transport(inventory: Path, size: int) -> str:
    inv = load_inventory(inventory)
    host = inv.hosts["talker"]
    conn = connection_for(host, inv.hosts, inv.timeouts, KnownHosts(inv.known_hosts)).open()
    rekeys = _Rekeys()
    logger = logging.getLogger("paramiko")
    logger.addHandler(rekeys)
    logger.setLevel(logging.DEBUG)
    shown = [0]
    lines = LineSplitter(lambda line: shown.__setitem__(0, shown[0] + len(line)))
    started = time.monotonic()
    try:
        result = conn.run(f"head -c {size} /dev/zero | tr '\\0' x", on_output=lines)
        outcome = f"rc {result.rc}, {result.stdout_bytes} bytes read"
    except Exception as exc:  # noqa: BLE001 - a stall ends in a timeout or a lost link: report it
        outcome = f"{type(exc).__name__}: {exc}"
    finally:
        elapsed = time.monotonic() - started
        logger.removeHandler(rekeys)
        conn.close()
    return (f"transport       {size / GIB:.1f} GiB: {elapsed:6.1f} s "
            f"({size / elapsed / (1 << 20):.0f} MiB/s), {rekeys.count} re-key(s), {outcome}")


def through_invoke(work: Path, inventory: Path, size: int) -> str:
    started = time.monotonic()
    rc, out, err, _, rss = run_python_module_measured(
        "invoke", ["--search-root", str(REPO), "validate", "--host", "talker",
                   "--inventory", str(inventory)],
        work / "peak_kib", env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]},
        cwd=str(work), timeout=1800)
    elapsed = time.monotonic() - started
    verdict = re.findall(r"^talker .*?(passed.*|failed.*|not validated.*)$", out, re.M)
    return (f"invoke validate {size / GIB:.1f} GiB: {elapsed:6.1f} s "
            f"({size / elapsed / (1 << 20):.0f} MiB/s), exit {rc}, "
            f"{verdict[-1] if verdict else 'no recap line: ' + (out + err)[-300:]!r}, "
            f"peak RSS {rss:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2", help="GiB per run, comma list (default 1,2)")
    sizes = [int(float(s) * GIB) for s in parser.parse_args().sizes.split(",")]
    if os.geteuid() != 0:
        raise SystemExit("needs root: it starts sshd for the tests' login user")
    farm = SshdFarm(1, first=ADDRESS_INDEX)
    work = shared_tmp("gpuprov-rekey-")
    try:
        talker = work / "talker"
        inventory = write_yaml(work / "inventory.yaml", {
            "known_hosts": [str(farm.known_hosts)],
            "hosts": {"talker": farm.host_entry(farm.addresses[0],
                                                vars={"validate_python": str(talker)})}})
        print(f"paramiko re-keys after 2**29 bytes; sshd on {farm.addresses[0]}, "
              f"load {os.getloadavg()[0]:.1f}")
        for size in sizes:
            talker.write_text(TALKER.format(size=size))
            talker.chmod(0o755)
            print(through_transport(inventory, size), flush=True)
            print(through_invoke(work, inventory, size), flush=True)
    finally:
        farm.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
