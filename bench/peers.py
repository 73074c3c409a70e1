"""The three tools the side-by-side benchmark runs, each behind the same `Tool` face: gpuprov,
ansible-playbook and pyinfra (the peers in their own virtual environments, created once under
~/.cache/gpuprov-bench/), each checking that its re-run was a no-op.

May import: `bench.common`, `bench.noop_rerun`, `tests.sshd`.
"""
from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.sshd import SshdFarm

from .common import BENCH, REPO, BenchError, own_dir, proc_tail
from .noop_rerun import ten_step_recipe

CACHE = Path(os.environ.get("GPUPROV_BENCH_CACHE", "~/.cache/gpuprov-bench")).expanduser()
PEERS = {  # venv name -> (pip requirement, distribution whose version is reported)
    "ansible": ("ansible-core", "ansible-core"),
    "pyinfra": ("pyinfra", "pyinfra"),
}
REMOTE_PYTHON = "/usr/bin/python3"  # the login user's python3 on the sshd hosts
STEPS = 10


def ensure_venv(name: str) -> Path:
    """CACHE/venv-NAME with the peer tool installed (created once, then reused)."""
    requirement, _ = PEERS[name]
    venv = CACHE / f"venv-{name}"
    python = venv / "bin" / "python"
    if python.exists() and _version(python, PEERS[name][1]):
        return venv
    print(f"installing {requirement} into {venv} ...", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return venv


def _version(python: Path, dist: str) -> str:
    res = subprocess.run([str(python), "-c", "import importlib.metadata as m, sys; "
                          "print(m.version(sys.argv[1]))", dist], capture_output=True, text=True)
    return res.stdout.strip() if res.returncode == 0 else ""


class Tool:
    name = ""
    version = ""
    paramiko = ""

    def __init__(self, work: Path, hosts: dict, farm: SshdFarm):
        self.dir = own_dir(work / self.name)
        self.hosts = hosts  # inventory name -> address
        self.farm = farm

    def command(self) -> list:
        raise NotImplementedError

    def env(self) -> dict:
        return dict(os.environ)

    def run(self) -> tuple:
        """(seconds, CompletedProcess): one run as a subprocess, start-up included. Also keeps
        the CPU seconds it used (`self.cpu_s`) and the sshd servers used (`self.host_cpu_s`)."""
        cmd, env = self.command(), self.env()
        before, host_before = resource.getrusage(resource.RUSAGE_CHILDREN), sshd_cpu(self.farm)
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=self.dir, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.host_cpu_s = sshd_cpu(self.farm) - host_before
        return seconds, proc

    def converge(self) -> None:
        _, proc = self.run()
        if proc.returncode != 0:
            raise BenchError(f"{self.name}: converging run failed (exit {proc.returncode}):\n"
                             f"{proc_tail(proc)}")

    def check_noop(self, proc) -> None:
        raise NotImplementedError


def sshd_cpu(farm: SshdFarm) -> float:
    """CPU seconds the farm's sshd servers and their finished sessions (shells, probe
    commands) have used: utime+stime+cutime+cstime from /proc/PID/stat. The sessions of a
    connection still open are not in it yet, so take it after a run has ended."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for proc in farm.procs.values():
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / ticks


class Gpuprov(Tool):
    name = "gpuprov"

    def __init__(self, work, hosts, farm, forks=None):
        super().__init__(work, hosts, farm)
        self.forks = forks
        self.version = _version(Path(sys.executable), "gpuprov") or _git_version()
        self.paramiko = _version(Path(sys.executable), "paramiko")
        self.inventory = self.dir / "inventory.yaml"
        self.inventory.write_text(yaml.safe_dump({
            "known_hosts": [str(farm.known_hosts)],
            "hosts": {name: farm.host_entry(addr, python=REMOTE_PYTHON)
                      for name, addr in hosts.items()}}))
        self.recipe = self.dir / "recipe.yaml"
        self.recipe.write_text(yaml.safe_dump(ten_step_recipe(self.dir), sort_keys=False))
        self.json = self.dir / "out.json"

    def command(self) -> list:
        cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision",
               "--host", "all", "--inventory", str(self.inventory), "--recipe", str(self.recipe),
               "--json", str(self.json), "--no-validate"]
        if self.forks:
            cmd += ["--forks", str(self.forks)]
        return cmd

    def env(self) -> dict:
        return dict(os.environ, PYTHONPATH=str(REPO))

    def run(self):
        self.json.unlink(missing_ok=True)
        return super().run()

    def check_noop(self, proc) -> None:
        if proc.returncode != 0:
            raise BenchError(f"gpuprov exited {proc.returncode}:\n{proc_tail(proc)}")
        hosts = json.loads(self.json.read_text())["hosts"]
        if set(hosts) != set(self.hosts):
            raise BenchError(f"gpuprov reported {len(hosts)} of {len(self.hosts)} hosts")
        bad = {n: h for n, h in hosts.items()
               if h["changed"] or h["failed"] or h["unreachable"] or h["ok"] != STEPS}
        if bad:
            name, h = next(iter(bad.items()))
            raise BenchError(f"gpuprov: not a no-op on {len(bad)} host(s), e.g. {name}: "
                             f"ok={h['ok']} changed={h['changed']} failed={h['failed']} "
                             f"unreachable={h['unreachable']} {h.get('message', '')}")


def _git_version() -> str:
    res = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                         capture_output=True, text=True)
    return res.stdout.strip()


class Ansible(Tool):
    name = "ansible"
    RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+"
                       r"failed=(\d+)", re.M)

    def __init__(self, work, hosts, farm):
        super().__init__(work, hosts, farm)
        self.venv = ensure_venv("ansible")
        self.version = "ansible-core " + _version(self.venv / "bin/python", "ansible-core")
        self.paramiko = "(ssh)"  # the ssh connection plugin drives OpenSSH's client
        self.config = self.dir / "ansible.cfg"
        # Set through ANSIBLE_CONFIG: Ansible ignores an ansible.cfg in a world-writable folder.
        self.config.write_text(
            "[defaults]\n"
            "host_key_checking = True\n"
            f"interpreter_python = {REMOTE_PYTHON}\n"  # skip interpreter discovery (as gpuprov's inventory)
            "retry_files_enabled = False\n"
            "nocolor = True\n"
            "[ssh_connection]\n"
            "pipelining = True\n")  # ssh_args stay Ansible's default (ControlMaster/Persist 60s)
        self.inventory = self.dir / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {
            "hosts": {name: {"ansible_host": addr, "ansible_port": farm.port}
                      for name, addr in hosts.items()},
            "vars": {"ansible_user": farm.user,
                     "ansible_ssh_private_key_file": str(farm.key),
                     "ansible_ssh_common_args": f"-o UserKnownHostsFile={farm.known_hosts} "
                                                "-o StrictHostKeyChecking=yes",
                     "work": str(self.dir)}}}))

    def command(self) -> list:
        return [str(self.venv / "bin/ansible-playbook"), "-i", str(self.inventory),
                str(BENCH / "ansible/playbook.yml")]

    def env(self) -> dict:
        return dict(os.environ, ANSIBLE_CONFIG=str(self.config), ANSIBLE_NOCOLOR="1")

    def check_noop(self, proc) -> None:
        if proc.returncode != 0:
            raise BenchError(f"ansible-playbook exited {proc.returncode}:\n{proc_tail(proc)}")
        recap = {m.group(1): tuple(int(g) for g in m.groups()[1:])
                 for m in self.RECAP.finditer(proc.stdout)}
        if set(recap) != set(self.hosts):
            raise BenchError(f"ansible: recap has {sorted(recap)}, expected {sorted(self.hosts)}")
        bad = {n: r for n, r in recap.items() if r[1] or r[2] or r[3]}
        if bad:
            raise BenchError(f"ansible: not a no-op: {bad} (ok, changed, unreachable, failed)")


class Pyinfra(Tool):
    name = "pyinfra"
    # pyinfra 3 prints (on stderr) "[h1] Ready: deploy.py" per host, then per operation and host
    # "[h1] Success" (it changed something), "[h1] No changes" or an error, then a results
    # table ending in "Grand total  N  SUCCESS  ERROR  NO-CHANGE" ('-' for zero).
    READY = re.compile(r"^\s*\[(\S+)\] Ready: ", re.M)
    OUTCOME = re.compile(r"^\s*\[(\S+)\] (Success|No changes|Error.*)$", re.M)
    TOTAL = re.compile(r"Grand total\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)")

    def __init__(self, work, hosts, farm):
        super().__init__(work, hosts, farm)
        self.venv = ensure_venv("pyinfra")
        self.version = "pyinfra " + _version(self.venv / "bin/python", "pyinfra")
        self.paramiko = _version(self.venv / "bin/python", "paramiko")
        self.inventory = self.dir / "inventory.py"
        data = {"ssh_port": farm.port, "ssh_user": farm.user, "ssh_key": str(farm.key),
                "ssh_known_hosts_file": str(farm.known_hosts),
                "ssh_strict_host_key_checking": "yes",
                # The test sshd (tests/sshd.py) has no sftp subsystem; scp only moves files
                # while converging (a no-op re-run transfers nothing), so timings are unaffected.
                "ssh_file_transfer_protocol": "scp",
                "work": str(self.dir), "motd": str(BENCH / "pyinfra/motd.j2")}
        hosts_py = [(name, dict(data, ssh_hostname=addr)) for name, addr in hosts.items()]
        self.inventory.write_text(f"hosts = {hosts_py!r}\n")

    def command(self) -> list:
        # -y: run without the interactive confirmation (as the other two run)
        return [str(self.venv / "bin/pyinfra"), "-y", str(self.inventory),
                str(BENCH / "pyinfra/deploy.py")]

    def env(self) -> dict:
        return dict(os.environ, PYINFRA_PROGRESS="off", NO_COLOR="1", TERM="dumb")

    def check_noop(self, proc) -> None:
        if proc.returncode != 0:
            raise BenchError(f"pyinfra exited {proc.returncode}:\n{proc_tail(proc)}")
        text = proc.stdout + proc.stderr
        ready = set(self.READY.findall(text))
        outcomes = self.OUTCOME.findall(text)
        total = self.TOTAL.search(text)
        if ready != set(self.hosts) or {h for h, _ in outcomes} != set(self.hosts) or not total:
            raise BenchError(f"pyinfra: results for {sorted(ready)}, expected "
                             f"{sorted(self.hosts)}:\n{proc_tail(proc)}")
        changed = [(h, o) for h, o in outcomes if o != "No changes"]
        count = lambda v: 0 if v == "-" else int(v)  # noqa: E731
        if changed or count(total.group(2)) or count(total.group(3)) \
                or count(total.group(4)) != count(total.group(1)):
            raise BenchError(f"pyinfra: not a no-op: {changed[:4]} {total.group(0)}")
