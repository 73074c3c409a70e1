"""`gpuprov validate --distributed` on 4 hosts in network namespaces (tests/fabric_net.py: each
host its own namespace and sshd, joined by a bridge), each scenario PID 1 of fresh namespaces
(tests/netns.py).

The hosts' python: the test login user cannot reach this machine's torch (it lives under
/root, mode 700), so the scenario bind-mounts torch's site-packages read-only onto a folder of
/tmp in its own mount namespace (before any sshd starts, so every host sees it) and gives each
host a `python:` that runs the distribution's /usr/bin/python3 (3.11, the same ABI as the
torch build) with that folder on PYTHONPATH: real torch, real gloo, on the CPU.

The host "with another torch": its `python:` puts first on PYTHONPATH a folder holding only
`torch-2.13.0.dist-info/METADATA`, so `importlib.metadata.version("torch")` (what pip and the
stack probe read) says 2.13.0 while the code imported is still 2.14.1: the installed
distribution's metadata is what differs, as after a pip install into another prefix.
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

from tests.fabric_net import FabricNet, address
from tests.procs import sigint_as_in_a_terminal

REPO = Path(__file__).resolve().parent.parent
PORT = 29431  # remote/distributed/plan.py PORT (the default, not set by the inventory)
# validate's own checks kept to the few that need no benchmark: the job is what is tested
CHECKS = "--checks torch_import"


def _torch_site() -> str:
    import torch

    return str(Path(torch.__file__).resolve().parent.parent)


def _python(folder: Path, name: str, path: str) -> str:
    script = folder / name
    script.write_text(f'#!/bin/sh\nPYTHONPATH={path} exec /usr/bin/python3 "$@"\n')
    os.chmod(script, 0o755)
    return str(script)


def setup(work: Path) -> dict[str, str]:
    """The torch site mounted where the login user reads it; the pythons: 'ok' and 'old'."""
    site = work / "site"
    site.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", _torch_site(), str(site)], check=True, timeout=10)
    fake = work / "fake" / "torch-2.13.0.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
    (work / "fake" / "torch-2.13.0.dist-info" / "RECORD").write_text("")
    return {"ok": _python(work, "python-ok", str(site)),
            "old": _python(work, "python-old", f"{work / 'fake'}:{site}")}


def start(work: Path, inv: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "validate", "--host", "all",
         "--inventory", str(inv), "--distributed", "--json", str(work / "out.json"),
         "--junit", str(work / "junit.xml"), "--prometheus", str(work / "dist.prom"),
         "--no-evidence", *extra],
        cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_as_in_a_terminal)


def live_torch() -> list[str]:
    """The command lines of the python processes of the job still running in the scenario
    (any host: they share this PID namespace)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = stat.read_bytes().replace(b"\0", b" ").decode()
            state = (stat.parent / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and ("torch.distributed.run" in cmd or "validate.dist_job" in cmd):
            live.append(cmd)
    return live


def finish(run: subprocess.Popen, work: Path, started: float) -> dict:
    try:
        output = run.communicate(timeout=400)[0]
    except subprocess.TimeoutExpired:
        run.kill()
        output = run.communicate()[0]
    records = {}
    for path in sorted((work / "logs").glob("*/*/distributed.json")):
        records[path.parent.parent.name] = json.loads(path.read_text())
    junit, prom = work / "junit.xml", work / "dist.prom"
    return {"rc": run.returncode, "output": output, "took_s": round(time.monotonic() - started, 2),
            "json": json.loads((work / "out.json").read_text()) if (work / "out.json").exists()
            else None, "records": records, "junit": junit.read_text() if junit.exists() else None,
            "prom": prom.read_text() if prom.exists() else None,
            "torch_left": live_torch()}


def _set_pythons(inv: Path, pythons: dict[str, str], python_of: dict[int, str]) -> None:
    """Each host's `python:` (module docstring): 'ok', or the one `python_of` names."""
    import yaml

    from tests.conftest import write_yaml

    data = yaml.safe_load(inv.read_text())
    for i in range(4):
        data["hosts"][f"n{i}"]["python"] = pythons[python_of.get(i, "ok")]
    write_yaml(inv, data)


def _scenario(vars_: dict, python_of=None, before=None) -> dict:
    from tests.sshd import shared_tmp

    work = shared_tmp()
    try:
        pythons = setup(work)
        net = FabricNet(4)
        try:
            inv = net.inventory(work, {"vars": {"validate_args": CHECKS, **vars_}})
            _set_pythons(inv, pythons, python_of or {})
            if before:
                before(net)
            started = time.monotonic()
            return finish(start(work, inv), work, started)
        finally:
            net.close()
    finally:
        subprocess.run(["umount", str(work / "site")], timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def scenario_dist_pass() -> dict:
    return _scenario({"distributed_timeout": 20})


def _block_port(host: int):
    def block(net: FabricNet) -> None:
        rules = ("table inet gpuprov_dist {\n  chain out {\n"
                 "    type filter hook output priority 0; policy accept;\n"
                 f"    tcp dport {PORT} drop\n  }}\n}}\n")
        subprocess.run(["ip", "netns", "exec", f"fab{host}", "nft", "-f", "-"], input=rules,
                       text=True, check=True, timeout=10)
    return block


def scenario_dist_blocked() -> dict:
    """n2 cannot reach the rendezvous port (nftables drops its packets to it in its namespace)."""
    result = _scenario({"distributed_timeout": 15, "distributed_collective_timeout": 20},
                       before=_block_port(2))
    result["limit_s"] = 15 + 2 * 20 + 30  # plan.Settings.limit_s for these vars
    return result


def scenario_dist_skew() -> dict:
    """n3's python sees torch 2.13.0's metadata (module docstring)."""
    return _scenario({}, python_of={3: "old"})


__all__ = ["address"]


def scenario_dist_interrupt() -> dict:
    """Ctrl-C once torchrun runs on the nodes (a rendezvous that cannot complete: n3's port is
    blocked, and the others wait up to 120 s): the run stops, and no torch process is left."""
    from tests.procs import wait_until
    from tests.sshd import shared_tmp

    work = shared_tmp()
    try:
        pythons = setup(work)
        net = FabricNet(4)
        try:
            inv = net.inventory(work, {"vars": {"validate_args": CHECKS,
                                                "distributed_timeout": 120}})
            _set_pythons(inv, pythons, {})
            _block_port(3)(net)
            started = time.monotonic()
            run = start(work, inv)
            running = wait_until(lambda: len(live_torch()) >= 3, 120)
            time.sleep(1)
            run.send_signal(signal.SIGINT)
            sent = time.monotonic()
            result = finish(run, work, started)
            result.update(running=running, stopped_s=round(time.monotonic() - sent, 2))
            return result
        finally:
            net.close()
    finally:
        subprocess.run(["umount", str(work / "site")], timeout=10)
        shutil.rmtree(work, ignore_errors=True)
