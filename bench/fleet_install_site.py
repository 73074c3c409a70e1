"""One bundle per site (issue 43, item 5): the bytes the control machine sends to install N
offline hosts from a bundle, through a site host against straight to each host.

    python3 -m bench.fleet_install_site [--hosts 3] [--bundle PATH] [--direct]
                                        [--timeout 1800] [--json PATH]

1. The bundle: `--bundle PATH` (built before), else `build_bundle` of the 13.0 row, its defaults
   (the row's lock, uv's, cuda-wheels.yaml's .debs: about 1.25 GB).
2. site: N+1 OFFLINE sandbox hosts (`sandbox up --offline`), joined by a site network
   (tests/test_bundle_site_sandbox.py `site_network`: a bridge in sandbox1's namespace, a veth
   pair into each other host's), so the N hosts reach sandbox1 and nothing else. The
   inventory's `bundle_site: {host: sandbox1, address: 10.243.0.1}`; `gpuprov provision
   --bundle` of playbooks/cuda-wheels.yaml (`--var cuda_version=13.0 --var with_torch=false`,
   `--no-validate`, `--forks N+1`) on the N hosts.
3. `--direct`: N fresh offline hosts, no site: the bundle pushed to each (N bundles).

Bytes: what this machine sends to each host, counted as bench/fleet_install counts what it
receives, by the kernel's counters of the traffic itself, here narrowed to that traffic: an
nftables counter (nft(8), "COUNTER STATEMENT") per host on this machine's output hook, for
TCP to the address and port the host's SSH relay listens on (remote/sandbox/init.py `Relay`:
the only way into an offline host from here). They count whole IP packets (headers, SSH
framing and all) that `gpuprov provision` sent to the hosts, and nothing else's: the site's
HTTP traffic to the other hosts runs in the hosts' own namespaces, which the counters do not
see. The goal: at most 1.1 x one bundle's size for N = 3.

Needs root (sandbox hosts, nft), and PyPI and the Debian mirror unless --bundle is given. The
hosts are stopped and the nftables table removed at the end, also on a failure or Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from remote.bundle import BundleOptions
from remote.bundle.build import build_bundle
from remote.ground.fileio import sha256_file
from tests.sandbox_fixture import SandboxHosts, own_hosts
from tests.test_bundle_site_sandbox import PORT, SITE, site_network

from .common import REPO, BenchError, machine
from .fleet_install import WHEELS_VARS, _interrupted, mb

RECIPE = str(REPO / "playbooks" / "cuda-wheels.yaml")
TABLE = "gpuprov_site_bench"


def _nft(*args: str) -> str:
    proc = subprocess.run(["nft", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise BenchError(f"nft {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


class Counters:
    """One nftables counter per host: TCP bytes this machine sends to its SSH relay."""

    def __init__(self, hosts: SandboxHosts):
        self.hosts = {name: (h["address"], int(h["port"])) for name, h in hosts.hosts.items()}
        _nft("add", "table", "ip", TABLE)
        _nft("add", "chain", "ip", TABLE, "out",
             "{ type filter hook output priority 0 ; policy accept ; }")
        for name, (address, port) in self.hosts.items():
            _nft("add", "counter", "ip", TABLE, name)
            _nft("add", "rule", "ip", TABLE, "out", "ip", "daddr", address, "tcp", "dport",
                 str(port), "counter", "name", name)

    def read(self) -> dict[str, int]:
        data = json.loads(_nft("-j", "list", "counters", "table", "ip", TABLE))
        return {c["counter"]["name"]: c["counter"]["bytes"]
                for c in data["nftables"] if "counter" in c}

    def close(self) -> None:
        subprocess.run(["nft", "delete", "table", "ip", TABLE], capture_output=True, timeout=30)


def provision(work: Path, inventory: Path, hosts: list[str], bundle: Path, sha: str,
              timeout: float, label: str) -> dict:
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision",
           "--host", ",".join(hosts), "--inventory", str(inventory), "--recipe", RECIPE,
           "--bundle", str(bundle), "--bundle-sha256", sha, "--no-validate",
           "--forks", str(len(hosts) + 1), "--json", str(work / f"{label}.json")]
    for v in WHEELS_VARS:
        cmd += ["--var", v]
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{label}: provisioning took longer than {timeout:.0f} s") from None
    wall = time.monotonic() - started
    (work / f"{label}.out").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise BenchError(f"{label}: provision exited {proc.returncode}:\n{proc.stdout[-3000:]}")
    result = json.loads((work / f"{label}.json").read_text())["hosts"]
    return {"wall_s": round(wall, 1),
            "hosts": {n: {"elapsed_s": round(h["elapsed_s"], 1), "failed": h["failed"]}
                      for n, h in result.items()}}


def run_side(work: Path, label: str, count: int, bundle: Path, sha: str, timeout: float,
             through_site: bool) -> dict:
    """N (+1 site) fresh offline hosts; the provisioning of the N; bytes sent to each host."""
    total = count + 1 if through_site else count
    with own_hosts(total, offline=True) as hosts:
        data = yaml.safe_load(hosts.inventory.read_text())
        targets = hosts.names[1:] if through_site else hosts.names
        if through_site:
            site_network(hosts)
            data["bundle_site"] = {"host": "sandbox1", "address": SITE, "port": PORT}
        inventory = work / f"{label}-inventory.yaml"
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        counters = Counters(hosts)
        try:
            before = counters.read()
            out = provision(work, inventory, targets, bundle, sha, timeout, label)
            after = counters.read()
        finally:
            counters.close()
    out["sent"] = {n: after[n] - before[n] for n in after}
    out["sent_total"] = sum(out["sent"].values())
    out["ratio"] = round(out["sent_total"] / bundle.stat().st_size, 3)
    return out


def show(title: str, side: dict, size: int) -> None:
    print(f"{title}: wall {side['wall_s']} s, sent {mb(side['sent_total'])} = "
          f"{side['ratio']:.3f} x one bundle ({mb(size)})")
    for name, sent in side["sent"].items():
        host = side["hosts"].get(name, {})
        shown = mb(sent) if sent >= 10e6 else f"{sent / 1e3:,.1f} kB"
        print(f"    {name}: sent {shown}" + (f", {host['elapsed_s']} s" if host else
                                                  " (the site: not provisioned)"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--bundle", type=Path, help="a bundle built before (else the 13.0 row's)")
    ap.add_argument("--direct", action="store_true", help="also push it to each host, no site")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("fleet_install_site: needs root (sandbox hosts, nft)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupted)
    result: dict = {"machine": machine(), "hosts": args.hosts}
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores; {m['date']}; load {m['loadavg_1m_at_start']} at start")
    work = Path(tempfile.mkdtemp(prefix="gpuprov-site-bench-"))
    try:
        bundle = args.bundle
        if bundle is None:
            bundle = work / "site.bundle.tar"
            report = build_bundle(BundleOptions("13.0", str(bundle)), progress=lambda line: None)
            result["build_s"] = round(report.total_s, 1)
        bundle = bundle.resolve()
        size, sha = bundle.stat().st_size, sha256_file(bundle)
        result["bundle_bytes"] = size
        result["site"] = run_side(work, "site", args.hosts, bundle, sha, args.timeout, True)
        if args.direct:
            result["direct"] = run_side(work, "direct", args.hosts, bundle, sha, args.timeout, False)
    except BenchError as exc:
        print(f"fleet_install_site: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fleet_install_site: interrupted (the hosts were stopped)", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print(f"bundle {bundle.name}: {mb(size)}, sha256 {sha[:16]}...")
    show(f"through the site host, {args.hosts} hosts", result["site"], size)
    if args.direct:
        show(f"pushed to each host, {args.hosts} hosts", result["direct"], size)
    print(f"load {m['loadavg_1m_at_end']} at end")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
