"""Hosts in network namespaces for `gpuprov fabric`: each host its own namespace with its own
sshd, joined to the others by a veth pair whose other end is on a bridge in the scenario's
namespace (tests/netns.py runs everything as PID 1 of fresh network, PID and mount namespaces:
never an end in the machine's root namespace). Addresses are 198.18.0.0/24, the range RFC 2544
reserves for benchmarking, inside those namespaces only. Links are slowed for real with
`tc` (netem is not in this kernel; tbf and htb with u32 are):

- `cap_node(i)`: tbf on both ends of host i's veth (its egress and its ingress);
- `cap_link(i, j)`: an htb class with a u32 filter on the destination, in both hosts, so only
  the traffic between i and j is slowed.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.procs import sigint_as_in_a_terminal, wait_until

REPO = Path(__file__).resolve().parent.parent
PORT = 2222
AUTH_FOLDERS = "gpuprov-auth.*"  # remote/fabric/auth.py: mktemp -d /tmp/gpuprov-auth.XXXXXXXX
CAP = "100mbit"  # a veth that carries Gb/s here throttled far below its peers


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=10, capture_output=True)


def address(i: int) -> str:
    return f"198.18.0.{10 + i}"


class FabricNet:
    def __init__(self, count: int):
        from tests.netns import _require_private_namespace
        from tests.sshd import SshdFarm

        _require_private_namespace()
        # `ip netns add` leaves a file per namespace under /run/netns: a tmpfs of this mount
        # namespace's own takes them (and /run/sshd), gone with the scenario
        _sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
        # What a host killed outright leaves in /tmp (its iperf3 credentials folder,
        # remote/fabric/auth.py) is removed by `close`: the folders there before are kept. No
        # tmpfs over /tmp: the checkout may itself live under /tmp (a CI clone) and vanish.
        self.auth_before = set(Path("/tmp").glob(AUTH_FOLDERS))
        _sh("ip", "link", "set", "lo", "up")
        _sh("ip", "link", "add", "br0", "type", "bridge")
        _sh("ip", "addr", "add", "198.18.0.1/24", "dev", "br0")
        _sh("ip", "link", "set", "br0", "up")
        self.count = count
        for i in range(count):
            ns = f"fab{i}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", f"vh{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", f"vh{i}", "master", "br0", "up")
            _sh("ip", "-n", ns, "addr", "add", f"{address(i)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        addrs = [address(i) for i in range(count)]
        self.farm = SshdFarm(count, addresses=addrs, port=PORT,
                             netns={a: f"fab{i}" for i, a in enumerate(addrs)})

    def cap_node(self, i: int) -> None:
        for argv in (["ip", "netns", "exec", f"fab{i}", "tc", "qdisc", "add", "dev", "eth0"],
                     ["tc", "qdisc", "add", "dev", f"vh{i}"]):
            _sh(*argv, "root", "tbf", "rate", CAP, "burst", "64kb", "latency", "100ms")

    def cap_link(self, i: int, j: int) -> None:
        for here, there in ((i, j), (j, i)):
            tc = ["ip", "netns", "exec", f"fab{here}", "tc"]
            _sh(*tc, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb")
            _sh(*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb",
                "rate", CAP)
            _sh(*tc, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "u32",
                "match", "ip", "dst", f"{address(there)}/32", "flowid", "1:20")

    def pids(self, i: int) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", f"fab{i}"], capture_output=True, text=True,
                             timeout=10).stdout
        return [int(p) for p in out.split()]

    def kill_host(self, i: int) -> None:
        """Every process of host i (its sshd, its sessions, its iperf3), by PID."""
        for pid in self.pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def inventory(self, work: Path, extra: dict | None = None) -> Path:
        from tests.conftest import write_yaml

        data = {"known_hosts": [str(self.farm.known_hosts)],
                "timeouts": {"connect": 5, "keepalive": 2},
                "hosts": {f"n{i}": self.farm.host_entry(address(i)) for i in range(self.count)}}
        data.update(extra or {})
        return write_yaml(work / "inventory.yaml", data)

    def close(self) -> None:
        self.farm.close()
        for folder in set(Path("/tmp").glob(AUTH_FOLDERS)) - self.auth_before:
            shutil.rmtree(folder, ignore_errors=True)


def start_fabric(work: Path, inv: Path, *extra: str) -> subprocess.Popen:
    """`invoke fabric --host all` as a user runs it, with every export."""
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "fabric", "--host", "all",
         "--inventory", str(inv), "--json", str(work / "out.json"), "--junit",
         str(work / "junit.xml"), "--prometheus", str(work / "fabric.prom"), "--html",
         str(work / "fabric.html"), *extra],
        cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_as_in_a_terminal)


def finish(run: subprocess.Popen, work: Path, started: float) -> dict:
    try:
        output = run.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        run.kill()
        output = run.communicate()[0]
    read = {name: (work / name).read_text() if (work / name).exists() else None
            for name in ("junit.xml", "fabric.prom", "fabric.html")}
    logs = {}
    for path in sorted((work / "logs").glob("*/*/fabric.json")):
        logs[path.parent.parent.name] = json.loads(path.read_text())
    return {"rc": run.returncode, "output": output, "took_s": round(time.monotonic() - started, 2),
            "json": json.loads((work / "out.json").read_text()) if (work / "out.json").exists()
            else None, "files": read, "fabric_json": logs,
            "iperf3_left": live_iperf3()}


def live_iperf3() -> list[str]:
    """The iperf3 processes still running in the scenario's PID namespace (not zombies: the
    killed host's processes are PID 1's children now, and it does not reap them)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, state = text[text.find("(") + 1:text.rfind(")")], text[text.rfind(")") + 2]
        if name == "iperf3" and state != "Z":
            live.append(stat.parent.name)
    return live


def scenario_fabric_faults() -> dict:
    """5 hosts: n2's link capped both ways (a bad node), and the link n0-n1 capped (a bad
    link between two hosts otherwise fast)."""
    from tests.sshd import shared_tmp

    net = FabricNet(5)
    work = shared_tmp()
    try:
        net.cap_node(2)
        net.cap_link(0, 1)
        # a pair below a quarter of the reference is slow: 2 cores shared by 10 iperf3 make
        # healthy pairs vary by 2x here (bench/fabric.py), a capped link is 20x below
        inv = net.inventory(work, {"vars": {"fabric_seconds": 1, "fabric_relative": 0.25}})
        started = time.monotonic()
        return finish(start_fabric(work, inv), work, started)
    finally:
        net.close()
        shutil.rmtree(work, ignore_errors=True)


def scenario_fabric_kill() -> dict:
    """5 hosts; n4 is killed (every process in its namespace) while its first test runs."""
    from tests.sshd import shared_tmp

    net = FabricNet(5)
    work = shared_tmp()
    try:
        inv = net.inventory(work, {"vars": {"fabric_seconds": 3, "fabric_relative": 0.25}})
        started = time.monotonic()
        run = start_fabric(work, inv)

        def iperf3_on_n4() -> bool:
            for pid in net.pids(4):
                try:
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "iperf3":
                        return True
                except OSError:
                    pass
            return False

        killed = wait_until(iperf3_on_n4, 60)
        time.sleep(0.5)
        net.kill_host(4)
        result = finish(run, work, started)
        result["killed"] = killed
        return result
    finally:
        net.close()
        shutil.rmtree(work, ignore_errors=True)


def scenario_fabric_interrupt() -> dict:
    """4 hosts, 20 s tests; Ctrl-C once every server of round 1 listens: the run stops, and
    every server it started is stopped by its PID."""
    from tests.sshd import shared_tmp

    net = FabricNet(4)
    work = shared_tmp()
    try:
        inv = net.inventory(work, {"vars": {"fabric_seconds": 20}})
        started = time.monotonic()
        run = start_fabric(work, inv)
        listening = wait_until(lambda: len(live_iperf3()) >= 8, 60)  # 4 servers, 4 clients
        before = len(live_iperf3())
        run.send_signal(signal.SIGINT)
        sent = time.monotonic()
        result = finish(run, work, started)
        result.update(listening=listening, before=before,
                      stopped_s=round(time.monotonic() - sent, 2))
        return result
    finally:
        net.close()
        shutil.rmtree(work, ignore_errors=True)
