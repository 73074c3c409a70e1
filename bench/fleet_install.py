"""Fleet install benchmark (issue 16): N fresh hosts on the wheels route, without and with the
fleet cache.

    python3 -m bench.fleet_install [--hosts 3] [--one-first] [--prefetch] [--torch]
                                     [--timeout 1800] [--json PATH]

Needs root (it starts sandbox hosts, see remote/sandbox/) and the internet: PyPI
(pypi.org, files.pythonhosted.org) and Debian's mirror (deb.debian.org).

What it does:
1. Run A, no cache: starts N+1 fresh sandbox hosts (sandbox1 stays idle) and provisions
   sandbox2..N+1 in parallel with `gpuprov provision --recipe playbooks/cuda-wheels.yaml
   --var cuda_version=13.0 --var with_torch=false --no-validate` (apt: python3-venv, g++; pip:
   the CUDA 13.0 compiler, runtime and cuDNN wheels). Then stops the hosts.
2. Run B, with cache: N+1 fresh hosts again; `provision --recipe playbooks/cache.yaml` on
   sandbox1 (apt-cacher-ng and devpi-server), then the same provisioning of sandbox2..N+1 with
   the inventory's `cache: {host: sandbox1}`. Checks every host reports `"cache": "direct"`.
   `--one-first` adds run C: as B, but one host first, then the other N-1 (a warm cache).
   `--prefetch`: cache.yaml fetches the CUDA row's wheels into devpi before the fleet starts
   (`prefetch_cuda_wheels=true`): devpi does not share one upstream download between hosts
   asking for the same file at once, so a cold cache can fetch a big wheel twice.
3. For each run prints: the bytes this machine received from outside during the provisioning
   (rx of its non-loopback interfaces, /proc/net/dev: the sandbox hosts share its network
   namespace, so everything they fetch is counted there, and so is anything else this machine
   downloads meanwhile), what each host's pip downloaded (the `Downloading FILE (SIZE)` lines
   of pip's log) and apt fetched (apt-get's `Fetched SIZE` lines in gpuprov's run log), how
   many step attempts it retried, the cache's own statistics (`gpuprov-cache stats`: bytes
   apt-cacher-ng and devpi hold; devpi's log: how often it fetched each file from upstream)
   and the wall times (the cache's setup apart from the fleet's provisioning). The reference
   "one host's download" is what run A's first host's pip and apt fetched: the goal is run B
   ~ 1x, run A ~ N x.

Honest bytes: each sandbox host gets this machine's pip configuration, which here points pip at
local copies of wheels (find-links /opt/wheels, a file:// index); the bench replaces the hosts'
/etc/pip.conf with one that keeps only `cert` (this network's TLS-inspecting CA, which the
sandbox's copy of /etc/ssl/certs/ca-certificates.crt holds) and names pip's log file.
No torch by default (with_torch=false). `--torch` adds torch and torchvision of the row, from
PyPI (`torch_index_url=https://pypi.org/simple/`: PyTorch's own index, download.pytorch.org,
is not reachable from this development machine), and with `--prefetch` cache.yaml fetches them
into devpi too (`prefetch_torch=true`).
The cache listens on two free ports picked at start (not 3141/3142), so a cache another test
runs on this machine at the same time does not collide with the bench's.
Exit status 0 when every host of every run succeeded, 1 otherwise. The hosts are stopped at the
end, also on a failure or Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from remote import sandbox
from remote.ground.runfolder import LOGS_DIR, PROVISION_LOG
from tests.sandbox_fixture import connect, run

from .common import REPO, BenchError, machine, tail

CACHE_HOST = "sandbox1"
ADMIN_HOME = "/home/admin"  # the sandbox's login user (remote/sandbox/rootfs.py ADMIN_USER)
PIP_LOG = "/var/tmp/gpuprov-bench-pip.log"
# Only the CA bundle: no find-links or file:// index (local copies), so pip goes to PyPI.
PIP_CONF = f"""# written by bench/fleet_install.py: PyPI only, no local wheel copies
[global]
cert = /etc/ssl/certs/ca-certificates.crt
log = {PIP_LOG}
"""
WHEELS_VARS = ["cuda_version=13.0", "with_torch=false"]
# PyPI's torch: the PyTorch index is not reachable from here (see the docstring).
TORCH_VARS = ["cuda_version=13.0", "with_torch=true", "torch_index_url=https://pypi.org/simple/"]
UNITS = {"bytes": 1, "B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}
# pip's log line for a file it fetched (pip/_internal/network/download.py `_prepare_download`:
# "Downloading %s" with " (SIZE)" when the server sent Content-Length; "Using cached" otherwise).
PIP_DOWNLOAD = re.compile(r"Downloading (\S+) \(([\d.]+) (bytes|kB|MB|GB)\)")
# apt-get's summary of what it fetched ("Fetched 9,213 kB in 3s (3,070 kB/s)").
APT_FETCHED = re.compile(r"Fetched ([\d.,]+) (B|kB|MB|GB) in ")
# devpi-server's log where cache.yaml's service script starts it without systemd (a sandbox),
# and its line (INFO level) for each download of a file from upstream:
# "[req25] [Rtx6] reading remote: URL('https://files.pythonhosted.org/.../x.whl'), target ...".
DEVPI_LOG = "/var/log/gpuprov-devpi.log"
DEVPI_FILE_FETCH = re.compile(r"reading remote: URL\('(https?://[^']+)'\)")
# gpuprov's run log line for a failed attempt of a step with `retries` (remote/engine/jobs).
STEP_RETRIED = re.compile(r": attempt \d+/\d+ failed ")


# ---------------------------------------------------------------- bytes from outside
def outside_rx_bytes() -> int:
    """Bytes received so far on this machine's interfaces that lead outside: every interface but
    loopback and ifb (an ifb device re-counts another interface's incoming traffic for shaping)."""
    total = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, counters = line.partition(":")
        name = name.strip()
        if name != "lo" and not name.startswith("ifb"):
            total += int(counters.split()[0])
    return total


def size_bytes(number: str, unit: str) -> int:
    return int(float(number.replace(",", "")) * UNITS[unit])


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


# ---------------------------------------------------------------- sandbox hosts
@dataclass
class Fleet:
    """N+1 running sandbox hosts: their state folder, inventory and root SSH access."""

    state: Path
    inventory: Path
    hosts: dict[str, dict] = field(default_factory=dict)

    @property
    def targets(self) -> list[str]:
        return [name for name in self.hosts if name != CACHE_HOST]

    def root(self, name: str, command: str, timeout: float = 120.0) -> str:
        """Run `command` as root on host `name`; its output, or BenchError when it fails."""
        client = connect(self.hosts[name], self.state / "known_hosts", user="root")
        try:
            rc, out, err = run(client, command, timeout)
        finally:
            client.close()
        if rc != 0:
            raise BenchError(f"{name}: `{command}` exited {rc}: {(out + err).strip()[-500:]}")
        return out


def start_fleet(state: Path, count: int, say: Callable[[str], None]) -> Fleet:
    inventory = sandbox.up(count, state, progress=say)
    key = str(state / "id_ed25519")
    hosts = {s["name"]: {"address": s["address"], "port": s["port"], "user": s["user"],
                         "identity_file": key} for s in sandbox.status(state)}
    fleet = Fleet(state, inventory, hosts)
    for name in hosts:
        fleet.root(name, f"cat > /etc/pip.conf <<'EOF'\n{PIP_CONF}EOF\n"
                         f"install -m 0666 /dev/null {PIP_LOG}")
    return fleet


def free_port(taken: set[int]) -> int:
    """A port nothing listens on, below 32768: apt-cacher-ng 3.7.4 (Debian 12) cannot bind a
    port above 32767 ("Error resolving address for binding"; measured in a sandbox host)."""
    for port in random.sample(range(20000, 32768), 200):
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise BenchError("no free port between 20000 and 32767 for the cache")


# ---------------------------------------------------------------- provisioning
@dataclass
class Provisioning:
    """One `gpuprov provision` of some hosts: wall time, bytes from outside, per-host results."""

    wall_s: float
    outside_bytes: int
    hosts: dict[str, dict]


def provision(work: Path, inventory: Path, hosts: list[str], recipe: str, variables: list[str],
              timeout: float, label: str) -> Provisioning:
    """Run `gpuprov provision` as a user does (a subprocess; cwd `work`, so its run logs land in
    work/logs); BenchError unless it exits 0 with every selected host failed == 0."""
    json_path = work / f"{label}.json"
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision",
           "--host", ",".join(hosts), "--inventory", str(inventory), "--recipe", recipe,
           "--no-validate", "--forks", str(len(hosts)), "--json", str(json_path)]
    for v in variables:
        cmd += ["--var", v]
    print(f"  $ {' '.join(shlex.quote(a) for a in cmd[1:])}", flush=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    before = outside_rx_bytes()
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{label}: provisioning took longer than {timeout:.0f} s "
                         f"(--timeout); output so far:\n{tail(exc.stdout, 25)}") from None
    wall = time.monotonic() - started
    outside = outside_rx_bytes() - before
    (work / f"{label}.out").write_text(proc.stdout + proc.stderr)
    try:
        result = json.loads(json_path.read_text())["hosts"]
    except (OSError, ValueError, KeyError):
        result = {}
    bad = [n for n in hosts if n not in result or result[n]["failed"] or result[n]["unreachable"]]
    if proc.returncode != 0 or bad:
        raise BenchError(f"{label}: provisioning exited {proc.returncode}, hosts not done: "
                         f"{', '.join(bad) or 'none'} (output in {work / (label + '.out')}):\n"
                         + tail(proc.stdout + proc.stderr, 25))
    return Provisioning(wall, outside, result)


def host_downloads(fleet: Fleet, name: str, logs: Path) -> dict:
    """What host `name`'s pip downloaded (its pip log: file, size, where from) and what its apt
    fetched (apt-get's 'Fetched' lines in gpuprov's run log of that host)."""
    pip_log = fleet.root(name, f"cat {PIP_LOG}", timeout=60)
    files = [(url, size_bytes(n, unit)) for url, n, unit in PIP_DOWNLOAD.findall(pip_log)]
    apt = retries = 0
    for log in sorted((logs / name).glob(f"*/{PROVISION_LOG}")):
        text = log.read_text()
        apt += sum(size_bytes(n, unit) for n, unit in APT_FETCHED.findall(text))
        retries += len(STEP_RETRIED.findall(text))
    origins = sorted({re.sub(r"^(\w+://[^/]+).*", r"\1", url) if "://" in url else "PyPI"
                      for url, _ in files})
    return {"pip_bytes": sum(s for _, s in files),
            "pip_files": {url.split("#")[0].rsplit("/", 1)[-1]: size for url, size in files},
            "pip_from": origins, "apt_bytes": apt, "retries": retries}


def cache_stats(fleet: Fleet, run_dir: Path, sizes: dict[str, int]) -> dict:
    """`gpuprov-cache stats` (bytes each cache holds), and how often devpi fetched each file
    from upstream (its log's "reading remote" lines) and so how many bytes (`sizes`: file name
    -> size, from the hosts' pip logs). The log is kept in the run's folder."""
    out = fleet.root(CACHE_HOST, "/usr/local/sbin/gpuprov-cache stats")
    stats: dict = {name: int(value) for name, value in
                   (line.split() for line in out.splitlines() if len(line.split()) == 2)}
    log = fleet.root(CACHE_HOST, f"cat {DEVPI_LOG}")
    (run_dir / "devpi.log").write_text(log)
    fetches: dict[str, int] = {}
    for url in DEVPI_FILE_FETCH.findall(log):
        name = url.split("#")[0].rsplit("/", 1)[-1]
        fetches[name] = fetches.get(name, 0) + 1
    stats["devpi_upstream_file_fetches"] = fetches
    stats["devpi_upstream_bytes"] = sum(n * sizes.get(name, 0) for name, n in fetches.items())
    return stats


# ---------------------------------------------------------------- the two runs
def run_fleet(work: Path, label: str, count: int, variables: list[str], timeout: float,
              with_cache: bool, one_first: bool = False, prefetch: bool = False) -> dict:
    """Start N+1 fresh hosts, (set up the cache,) provision the N (`one_first`: one host, then
    the others, so the cache is warm for them), measure, stop the hosts."""
    run_dir = work / label
    run_dir.mkdir()
    state = run_dir / "sandbox"
    say = lambda line: print(f"  {line}", flush=True)  # noqa: E731
    fleet = start_fleet(state, count + 1, say)
    try:
        inventory = fleet.inventory
        out: dict = {}
        if with_cache:
            taken: set[int] = set()
            ports = {"apt_port": free_port(taken), "pypi_port": free_port(taken)}
            data = yaml.safe_load(inventory.read_text())
            data["cache"] = {"host": CACHE_HOST, **ports}
            inventory = run_dir / "inventory.yaml"
            inventory.write_text(yaml.safe_dump(data, sort_keys=False))
            # The inventory's cache ports reach cache.yaml as its cache_*_port vars.
            setup = provision(run_dir, inventory, [CACHE_HOST], str(REPO / "playbooks/cache.yaml"),
                              [*variables, f"prefetch_cuda_wheels={str(prefetch).lower()}",
                               f"prefetch_torch={str(prefetch and 'with_torch=true' in variables).lower()}"],
                              timeout, "cache-setup")
            out["cache_setup"] = {"wall_s": round(setup.wall_s, 1),
                                  "outside_bytes": setup.outside_bytes, "ports": ports}
            say(f"cache set up on {CACHE_HOST} in {setup.wall_s:.1f} s, "
                f"{mb(setup.outside_bytes)} from outside")
        recipe = str(REPO / "playbooks/cuda-wheels.yaml")
        waves = [fleet.targets[:1], fleet.targets[1:]] if one_first else [fleet.targets]
        fleet_run = Provisioning(0.0, 0, {})
        for i, wave in enumerate(w for w in waves if w):
            part = provision(run_dir, inventory, wave, recipe, variables, timeout, f"fleet-{i + 1}")
            out.setdefault("waves_s", []).append(round(part.wall_s, 1))
            fleet_run = Provisioning(fleet_run.wall_s + part.wall_s,
                                     fleet_run.outside_bytes + part.outside_bytes,
                                     {**fleet_run.hosts, **part.hosts})
        routes = {n: fleet_run.hosts[n].get("cache", "") for n in fleet.targets}
        if with_cache and set(routes.values()) != {"direct"}:
            raise BenchError(f"{label}: hosts did not all reach the cache directly: {routes} "
                             f"(warnings: {[fleet_run.hosts[n].get('warnings') for n in routes]})")
        out.update(wall_s=round(fleet_run.wall_s, 1), outside_bytes=fleet_run.outside_bytes,
                   hosts={n: {"elapsed_s": fleet_run.hosts[n]["elapsed_s"],
                              "failed": fleet_run.hosts[n]["failed"],
                              "changed": fleet_run.hosts[n]["changed"], "cache": routes[n],
                              **host_downloads(fleet, n, run_dir / LOGS_DIR)}
                          for n in fleet.targets})
        if with_cache:
            sizes = {name: size for h in out["hosts"].values()
                     for name, size in h["pip_files"].items()}
            out["cache_stats"] = cache_stats(fleet, run_dir, sizes)
        return out
    finally:
        sandbox.down(state, progress=say)


def print_run(title: str, run_result: dict, reference: float, count: int) -> None:
    print(f"{title}")
    setup = run_result.get("cache_setup")
    if setup:
        print(f"  cache setup ({CACHE_HOST}, playbooks/cache.yaml): {setup['wall_s']:.1f} s, "
              f"{mb(setup['outside_bytes'])} from outside")
    ratio = run_result["outside_bytes"] / reference if reference else float("nan")
    waves = run_result.get("waves_s", [])
    split = f" ({' + '.join(f'{w:.1f}' for w in waves)})" if len(waves) > 1 else ""
    print(f"  fleet of {count}: wall {run_result['wall_s']:.1f} s{split}, from outside "
          f"{mb(run_result['outside_bytes'])} = {ratio:.2f} x one host's download")
    for name, h in run_result["hosts"].items():
        print(f"    {name}: {h['elapsed_s']:.1f} s, failed {h['failed']}, "
              f"cache {h['cache'] or '-'}; pip {mb(h['pip_bytes'])} in {len(h['pip_files'])} files "
              f"from {', '.join(h['pip_from']) or '-'}; apt {mb(h['apt_bytes'])}; "
              f"{h['retries']} step attempt(s) retried")
    stats = run_result.get("cache_stats")
    if stats:
        print(f"  the cache holds: apt-cacher-ng {mb(stats.get('apt-cacher-ng', 0))}, "
              f"devpi {mb(stats.get('devpi', 0))}")
        fetches = stats["devpi_upstream_file_fetches"]
        print(f"  devpi fetched {sum(fetches.values())} files ({len(fetches)} distinct, "
              f"{mb(stats['devpi_upstream_bytes'])}) from upstream: "
              + ", ".join(f"{n.split('-')[0]} x{c}" for n, c in fetches.items()))


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3, help="fleet size N (default 3)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds one provisioning may take (default 1800)")
    parser.add_argument("--one-first", action="store_true",
                        help="add run C: through the cache, one host first, then the others")
    parser.add_argument("--prefetch", action="store_true",
                        help="cache.yaml fetches the CUDA row's wheels before the fleet starts "
                             "(prefetch_cuda_wheels=true)")
    parser.add_argument("--torch", action="store_true",
                        help="torch and torchvision too, from PyPI (with --prefetch: prefetched)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("fleet_install: needs root (it starts sandbox hosts)", file=sys.stderr)
        return 2
    if not 1 <= args.hosts <= 50:
        parser.error("--hosts must be between 1 and 50")
    # SIGTERM ends the run as Ctrl-C does, so the hosts are stopped on the way out.
    signal.signal(signal.SIGTERM, _interrupted)
    variables = TORCH_VARS if args.torch else WHEELS_VARS
    result: dict = {"machine": machine(), "hosts": args.hosts, "recipe": "playbooks/cuda-wheels.yaml",
                    "vars": variables}
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}; "
          f"{m['date']}; load {m['loadavg_1m_at_start']} at start")
    print(f"command: {m['command']}")
    work = Path(tempfile.mkdtemp(prefix="gpuprov-fleet-bench-"))
    print(f"work folder: {work}")
    runs = [("no_cache", "run A, no cache", False, False),
            ("cache", f"run B, through the cache on {CACHE_HOST}", True, False)]
    if args.one_first:
        runs.append(("cache_one_first", f"run C, through the cache on {CACHE_HOST}, one host "
                     "first, then the others", True, True))
    try:
        for key, title, with_cache, one_first in runs:
            print(f"{title}: {args.hosts} hosts", flush=True)
            result[key] = run_fleet(work, key.replace("_", "-"), args.hosts, variables,
                                    args.timeout, with_cache, one_first, args.prefetch)
    except BenchError as exc:
        print(f"fleet_install: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fleet_install: interrupted (the hosts were stopped)", file=sys.stderr)
        return 130
    first, first_host = next(iter(result["no_cache"]["hosts"].items()))
    one_host = first_host["pip_bytes"] + first_host["apt_bytes"]
    result["one_host_bytes"] = one_host
    m["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print()
    print(f"one host's download (what {first}'s pip and apt fetched in run A): {mb(one_host)}")
    for key, title, _, _ in runs:
        print_run(f"{title}:", result[key], one_host, args.hosts)
    print(f"load {m['loadavg_1m_at_end']} at end ({m['cores']} cores shared with other work, "
          "which skews the times and adds its own downloads to the bytes from outside)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
