"""Where one gpuprov no-op run spends its time: phases and cProfile (bench/profile_gpuprov.py),
`python -X importtime`, and the wire floor of plain paramiko. Part of
`python3 -m bench.compare --profile`.

May import: `bench.common`, `bench.peers`, `remote.transport.ssh`, `tests.sshd`.
"""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.sshd import SshdFarm

from .common import REPO, BenchError, proc_tail
from .peers import Gpuprov


def profile(tool: Gpuprov, work: Path) -> dict:
    """Phases (wall clock, per host), cProfile top functions, import time of one no-op run."""
    out = {}
    base = tool.command()[tool.command().index("provision"):]
    for mode in ("phases", "cprofile"):
        path = work / f"profile-{mode}.json"
        cmd = [sys.executable, "-m", "bench.profile_gpuprov", "--repo", str(REPO),
               "--mode", mode, "--out", str(path), "--"] + base
        proc = subprocess.run(cmd, cwd=tool.dir, env=tool.env(), capture_output=True, text=True)
        if proc.returncode != 0 or not path.exists():
            raise BenchError(f"profiling ({mode}) failed:\n{proc_tail(proc)}")
        out[mode] = json.loads(path.read_text())
        tool.check_noop(subprocess.CompletedProcess(cmd, out[mode]["status"], "", ""))
    # interpreter start-up alone, and imports as `python -X importtime` sees them
    starts = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        starts.append(time.perf_counter() - started)
    out["python_startup_s"] = round(statistics.median(starts), 4)
    proc = subprocess.run([sys.executable, "-X", "importtime"] + tool.command()[1:],
                          cwd=tool.dir, env=tool.env(), capture_output=True, text=True)
    out["imports"] = _import_summary(proc.stderr)
    out["wire"] = wire_floor(tool.farm, next(iter(tool.hosts.values())))
    return out


def wire_floor(farm: SshdFarm, address: str, count: int = 5) -> dict:
    """What one SSH connect and one command cost on this machine with plain paramiko (the
    library gpuprov uses through Fabric): with paramiko's own socket, with TCP_NODELAY, and with
    TCP_NODELAY plus gpuprov's quick-ACK socket. The first command of a connection is timed on
    its own (OpenSSH's post-login messages stall it when the client delays its ACKs)."""
    import socket

    import paramiko

    from remote.transport.ssh import _QuickAckSocket

    out = {}
    for variant in ("default", "tcp_nodelay", "quickack"):
        sock = socket.create_connection((address, farm.port), timeout=10)
        if variant != "default":
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if variant == "quickack":
            sock = _QuickAckSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # loopback farm only
        started = time.perf_counter()
        client.connect(address, port=farm.port, username=farm.user, key_filename=str(farm.key),
                       look_for_keys=False, allow_agent=False, sock=sock)
        connect_s = time.perf_counter() - started
        trips = []
        for _ in range(count + 1):
            started = time.perf_counter()
            _, stdout, _ = client.exec_command("true")
            stdout.read()
            stdout.channel.recv_exit_status()
            trips.append(time.perf_counter() - started)
        client.close()
        out[variant] = {"connect_s": round(connect_s, 4), "first_exec_s": round(trips[0], 4),
                        "exec_true_median_s": round(statistics.median(trips[1:]), 4)}
    return out


def _import_summary(stderr: str, top: int = 10) -> dict:
    """From `python -X importtime`: total import time (sum over the outermost imports) and the
    slowest packages (cumulative, each counted where first imported; a package nested inside
    another counts in both, e.g. cryptography inside paramiko)."""
    rows = []
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
    level = min((r[1] for r in rows), default=0)
    total = sum(us for us, indent, _ in rows if indent == level)
    packages: dict = {}
    for us, _, name in rows:
        if "." not in name and not name.startswith("_"):
            packages[name] = max(us, packages.get(name, 0))
    ranked = sorted(packages.items(), key=lambda kv: kv[1], reverse=True)
    return {"total_s": round(total / 1e6, 4),
            "top": [{"module": name, "cumulative_s": round(us / 1e6, 4)}
                    for name, us in ranked[:top]]}
