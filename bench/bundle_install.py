"""Installing offline hosts from a bundle against installing online hosts through the fleet cache
(issue 35: "Installing 2 offline hosts from it takes at most the time of the online install
through the fleet cache").

    python3 -m bench.bundle_install [--hosts 2] [--bundle PATH] [--direct] [--timeout 1800]
                                    [--json PATH]

The recipe is playbooks/cuda-wheels.yaml with the real CUDA 13.0 row, no torch
(`--var cuda_version=13.0 --var with_torch=false`): apt python3-venv and g++, then the row's lock
(playbooks/locks/cuda-13.0-wheels.txt, 1.15 GB of wheels) with uv. Every side provisions N
fresh sandbox hosts at once (`--forks N`, `--no-validate`); a wall time is `gpuprov provision`'s
alone (the hosts' start is not in it).

0. build: `build_bundle` (remote/bundle/build.py) of the row, its defaults (the row's lock,
   uv's lock, cuda-wheels.yaml's .debs), pip's cache off; timed apart. `--bundle PATH` takes a
   bundle built before instead (then no build time).
1. offline: N OFFLINE sandbox hosts (`sandbox up --offline`), the bundle named by the
   inventory's `bundle:` on their group: the push over SSH and the install from it.
   Then where the push's time goes, part by part: the control machine's check of the archive
   (`read_bundle`, which also takes its sha256), the archive over a Paramiko SSH session (the
   transport's library, paramiko's default cipher order) into a file on one host, then on all N
   at once from one process (as `provision` sends it), its `tar -x` on the host alone, and the
   push's host command (`unpack_command`: `tar -x` with the sha256 of the same bytes beside
   it) from that file, and that file's sha256 by coreutils' sha256sum and by openssl.
2. cache, cold: 2N+1 fresh online hosts; playbooks/cache.yaml on sandbox1 (apt-cacher-ng and
   devpi-server; timed apart, no prefetch) and the inventory's `cache: {host: sandbox1}`; then N
   hosts provisioned through it: each file goes origin -> cache -> host.
3. cache, warm: the other N hosts, through the same cache, which now holds every file.
4. `--direct`: N fresh online hosts straight from PyPI and the Debian mirror, no cache (one more
   download of the row).
Each side also gives what each host spent in the bundle push, the apt step and the wheels step
(its --json), and the bytes this machine received from outside meanwhile (bench/fleet_install:
the online hosts share its network namespace). The online hosts' pip.conf is PyPI only, as in
bench/fleet_install.py (this machine's points at local wheel copies); uv does not read it.

This replaces bench/bundle_build.py's `--install` (a stand-in lock of two small wheels, against
online hosts with no cache). Downloads of the full row: the build (unless --bundle), the cold
cache, and --direct. Needs
root (sandbox hosts), PyPI and the Debian mirror. The hosts are stopped at the end, also on a
failure or Ctrl-C; the work folder (the bundle, 1.25 GB) is removed.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from remote import sandbox
from remote.bundle.archive import read_bundle
from remote.bundle.build import BundleOptions, build_bundle
from remote.bundle.push import unpack_command
from remote.ground.fileio import sha256_file
from remote.ground.paths import VALIDATE_DIR
from tests.sandbox_fixture import SandboxHosts, connect

from .common import REPO, BenchError, machine
from .fleet_install import (
    CACHE_HOST,
    WHEELS_VARS,
    Fleet,
    _interrupted,
    cache_stats,
    free_port,
    mb,
    provision,
    start_fleet,
)

RECIPE = str(REPO / "playbooks" / "cuda-wheels.yaml")
CACHE_RECIPE = str(REPO / "playbooks" / "cache.yaml")
# The step names of cuda-wheels.yaml with WHEELS_VARS, and the bundle job's (remote/bundle/push.py)
STEPS = {"push_s": "bundle ", "apt_s": "python3-venv and a C++ compiler",
         "wheels_s": "CUDA 13.0 compiler, runtime and cuDNN wheels (locked)"}


def _say(line: str) -> None:
    print(f"  {line}", flush=True)


def step_times(hosts: dict) -> dict:
    """Per host of a provision's --json: its time, and the time of each step of STEPS."""
    out = {}
    for name, host in hosts.items():
        row = {"elapsed_s": round(host["elapsed_s"], 1)}
        for key, prefix in STEPS.items():
            row[key] = round(sum(s["elapsed_s"] for s in host["steps"]
                                 if s["name"].startswith(prefix)), 1)
        out[name] = row
    return out


def side(label: str, part, extra: dict | None = None) -> dict:
    result = {"wall_s": round(part.wall_s, 1), "outside_bytes": part.outside_bytes,
              "hosts": step_times(part.hosts), **(extra or {})}
    print(f"{label}: {result['wall_s']} s, {mb(part.outside_bytes)} from outside; "
          + "; ".join(f"{n} {h}" for n, h in result["hosts"].items()), flush=True)
    return result


def build(out: Path) -> dict:
    os.environ["PIP_NO_CACHE_DIR"] = "1"
    report = build_bundle(BundleOptions("13.0", str(out)), progress=_say)
    return {"total_s": round(report.total_s, 1), "wheel_s": round(report.wheel_s, 1),
            "deb_s": round(report.deb_s, 1), "bytes": out.stat().st_size,
            "wheels": report.wheels, "debs": report.debs}


def _timed_root(hosts: SandboxHosts, name: str, command: str, timeout: float = 600) -> float:
    started = time.monotonic()
    rc, out, err = hosts.run(name, command, user="root", timeout=timeout)
    if rc != 0:
        raise BenchError(f"{name}: `{command}` exited {rc}: {(out + err).strip()[-400:]}")
    return round(time.monotonic() - started, 1)


def _send(hosts: SandboxHosts, name: str, data: bytes, target: str, took: dict) -> None:
    """`data` over a Paramiko SSH session (the transport's library) into file `target` on the
    host; the seconds it took go into took[name]."""
    client = connect(hosts.hosts[name], hosts.known_hosts, user="root")
    try:
        started = time.monotonic()
        channel = client.get_transport().open_session()   # type: ignore[union-attr]
        channel.exec_command(f"cat > {target}")
        view = memoryview(data)
        for at in range(0, len(view), 1 << 20):
            channel.sendall(view[at:at + (1 << 20)])
        channel.shutdown_write()
        if channel.recv_exit_status() == 0:
            took[name] = round(time.monotonic() - started, 1)
    finally:
        client.close()


def push_anatomy(hosts: SandboxHosts, bundle: Path) -> dict:
    """Where a push goes, part by part as remote/bundle/push.py does them: the control
    machine's check, the archive over SSH into a file on one host, then on every host at once
    (one process, as `provision` sends it), its `tar -x` on the host, and the push's host
    command (tar -x and a sha256 beside it) from that file, and the two hashers alone."""
    scratch = "/var/tmp/gpuprov-bench-push"
    started = time.monotonic()
    checked = read_bundle(bundle, locks_dir=REPO / "playbooks" / "locks", validate_dir=VALIDATE_DIR)
    check_s = round(time.monotonic() - started, 1)
    data = bundle.read_bytes()
    one = hosts.names[0]
    alone: dict = {}
    together: dict = {}
    try:
        _send(hosts, one, data, f"{scratch}.tar", alone)
        threads = [threading.Thread(target=_send, args=(hosts, n, data, f"{scratch}.tar", together))
                   for n in hosts.names]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        all_s = round(time.monotonic() - started, 1)
        if one not in alone or len(together) != len(hosts.names):
            raise BenchError(f"could not send the archive to {scratch}.tar on every host")
        tar_s = _timed_root(hosts, one, f"mkdir -p {scratch} && tar -x -f {scratch}.tar -C {scratch} "
                            "--no-same-owner --no-same-permissions")
        unpack_s = _timed_root(hosts, one, f"rm -rf {scratch} && /bin/sh -c "
                               f"{shlex.quote(unpack_command(scratch, checked.sha256))} < {scratch}.tar")
        hashers = {key: _timed_root(hosts, one, f"{tool} < {scratch}.tar > /dev/null")
                   for key, tool in (("host_sha256sum_s", "sha256sum"),
                                     ("host_openssl_sha256_s", "openssl dgst -sha256 -r"))}
    finally:
        del data
        for name in hosts.names:
            hosts.run(name, f"rm -rf {scratch} {scratch}.tar", user="root")
    size = bundle.stat().st_size / 1e6
    return {"control_check_s": check_s, "ssh_one_host_s": alone[one],
            "ssh_one_host_mb_per_s": round(size / alone[one], 1),
            f"ssh_{len(hosts.names)}_hosts_at_once_s": all_s, "host_untar_s": tar_s,
            "host_untar_with_sha256_s": unpack_s, **hashers}


def offline(work: Path, bundle: Path, count: int, timeout: float) -> dict:
    run_dir = work / "offline"
    run_dir.mkdir()
    state = run_dir / "sandbox"
    inventory = sandbox.up(count, state, progress=_say, offline=True)
    try:
        hosts = SandboxHosts(inventory, state)
        data = yaml.safe_load(inventory.read_text())
        data["groups"]["sandbox"]["bundle"] = str(bundle)
        # its trust anchor, as a site gives it out of band (remote/bundle/trust.py)
        data["bundle_sha256"] = sha256_file(bundle)
        with_bundle = run_dir / "inventory.yaml"
        with_bundle.write_text(yaml.safe_dump(data, sort_keys=False))
        part = provision(run_dir, with_bundle, hosts.names, RECIPE, WHEELS_VARS, timeout, "offline")
        result = side("offline, from the bundle", part)
        result["push_anatomy"] = push_anatomy(hosts, bundle)
        print(f"  push of {mb(bundle.stat().st_size)}, by part: "
              f"{result['push_anatomy']}", flush=True)
        return result
    finally:
        sandbox.down(state, progress=_say)


def _cache_inventory(fleet: Fleet, run_dir: Path) -> Path:
    taken: set[int] = set()
    data = yaml.safe_load(fleet.inventory.read_text())
    data["cache"] = {"host": CACHE_HOST, "apt_port": free_port(taken), "pypi_port": free_port(taken)}
    path = run_dir / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def through_cache(work: Path, count: int, timeout: float) -> dict:
    """Cache setup, then N hosts on the cold cache, then N more on the warm one."""
    run_dir = work / "cache"
    run_dir.mkdir()
    state = run_dir / "sandbox"
    fleet = start_fleet(state, 2 * count + 1, _say)
    try:
        inventory = _cache_inventory(fleet, run_dir)
        setup = provision(run_dir, inventory, [CACHE_HOST], CACHE_RECIPE,
                          [*WHEELS_VARS, "prefetch_cuda_wheels=false"], timeout, "cache-setup")
        out: dict = {"setup": {"wall_s": round(setup.wall_s, 1), "outside_bytes": setup.outside_bytes}}
        print(f"cache setup on {CACHE_HOST}: {out['setup']['wall_s']} s", flush=True)
        for key, wave in (("cold", fleet.targets[:count]), ("warm", fleet.targets[count:])):
            part = provision(run_dir, inventory, wave, RECIPE, WHEELS_VARS, timeout, key)
            routes = {n: part.hosts[n].get("cache", "") for n in wave}
            if set(routes.values()) != {"direct"}:
                raise BenchError(f"{key}: hosts did not all reach the cache directly: {routes}")
            fetches = cache_stats(fleet, run_dir, {})["devpi_upstream_file_fetches"]
            out[key] = side(f"through the {key} cache", part,
                            {"devpi_upstream_fetches_so_far": sum(fetches.values())})
        return out
    finally:
        sandbox.down(state, progress=_say)


def direct(work: Path, count: int, timeout: float) -> dict:
    run_dir = work / "direct"
    run_dir.mkdir()
    state = run_dir / "sandbox"
    fleet = start_fleet(state, count, _say)
    try:
        part = provision(run_dir, fleet.inventory, list(fleet.hosts), RECIPE, WHEELS_VARS,
                         timeout, "direct")
        return side("online, direct (no cache)", part)
    finally:
        sandbox.down(state, progress=_say)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=2, help="hosts per side (default 2)")
    ap.add_argument("--bundle", type=Path, help="a bundle of the 13.0 row built before (no build)")
    ap.add_argument("--direct", action="store_true", help="also N online hosts with no cache")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds one provisioning may take (default 1800)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bundle_install: needs root (sandbox hosts)", file=sys.stderr)
        return 2
    if not 1 <= args.hosts <= 8:
        ap.error("--hosts must be between 1 and 8")
    signal.signal(signal.SIGTERM, _interrupted)
    result: dict = {"machine": machine(), "hosts": args.hosts, "recipe": RECIPE, "vars": WHEELS_VARS}
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['date']}; "
          f"load {m['loadavg_1m_at_start']} at start", flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpuprov-bench-bundle-install-"))
    os.chmod(work, 0o755)
    try:
        bundle = args.bundle.resolve() if args.bundle else work / "site.bundle.tar"
        if not args.bundle:
            result["build"] = build(bundle)
            print(f"build: {result['build']}", flush=True)
        result["offline"] = offline(work, bundle, args.hosts, args.timeout)
        result["cache"] = through_cache(work, args.hosts, args.timeout)
        if args.direct:
            result["direct"] = direct(work, args.hosts, args.timeout)
    except BenchError as exc:
        print(f"bundle_install: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bundle_install: interrupted (the hosts were stopped)", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    off = result["offline"]["wall_s"]
    for key in ("cold", "warm"):
        online = result["cache"][key]["wall_s"]
        result[f"offline_over_{key}_cache"] = round(off / online, 3)
        print(f"offline {off} s / through the {key} cache {online} s = "
              f"{result[f'offline_over_{key}_cache']} (target <= 1)")
    m["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
