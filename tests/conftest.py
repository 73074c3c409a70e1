"""Shared fixtures: real sshd servers on loopback, scratch folders, and a way to run commands."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.sshd import SshdFarm, shared_tmp

REPO = Path(__file__).resolve().parent.parent

# What makes a test slow, found from what it uses rather than written on every test, so that
# `pytest -m "not slow"` is a fast layer that runs without root. Slow: a test that needs root
# (marked `root`, or using a fixture that starts real sshd servers or sandbox hosts) ...
HOST_FIXTURES = {"farm", "sudo_farm", "sandbox_hosts"}
# ... one using a fixture that runs a whole validation (torch) or a browser ...
SLOW_FIXTURES = {"full_run", "rendered"}
# ... and every test of a module whose tests each run a program in a subprocess (the CLI
# through Invoke, `python -m validate`, a C++ compiler): one to several seconds each.
SLOW_MODULES = {"test_input_errors", "test_validate_run", "test_validate_cudnn", "test_cli",
                "test_ansible_inventory"}


def pytest_collection_modifyitems(items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))  # with the fixtures fixtures use
        if used & HOST_FIXTURES:
            item.add_marker(pytest.mark.root)
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        if item.get_closest_marker("root") or used & SLOW_FIXTURES or module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def farm():
    """Four real sshd servers on 127.0.0.2-5 (one port), a login user, keys and known_hosts."""
    if os.geteuid() != 0:
        pytest.fail("the SSH tests start sshd for a dedicated user and must run as root")
    farm = SshdFarm(4)
    yield farm
    farm.close()


@pytest.fixture
def work():
    """A scratch folder that both the tests and the SSH login user can write to."""
    path = shared_tmp()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def forwarding_refused_server(farm, address: str = "127.0.0.30") -> str:
    """A farm server that refuses TCP forwarding (own host key, in known_hosts): a jump host
    nothing gets through, which proves that a connection really goes through its jump."""
    if address not in farm.procs:
        farm.add_server(address, AllowTcpForwarding="no")
    return address


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def inventory(farm, work):
    """Writes an inventory of the farm's hosts (h1..h4) plus `extra` top-level keys."""
    def make(hosts=None, **top) -> Path:
        data = {"known_hosts": [str(farm.known_hosts)]}
        data.update(top)
        if hosts is None:
            hosts = {f"h{i + 1}": farm.host_entry(a) for i, a in enumerate(farm.addresses)}
        data["hosts"] = hosts
        return write_yaml(work / "inventory.yaml", data)
    return make


class Result:
    def __init__(self, rc, out, err, json_data=None):
        self.rc, self.out, self.err, self.json = rc, out, err, json_data

    def host(self, name):
        return self.json["hosts"][name]

    def statuses(self, name):
        return [s["status"] for s in self.host(name)["steps"]]


def invoke(*args, cwd=None, env=None, timeout=300, input_text=None) -> Result:
    """Run `invoke ARGS` as a user would, in a subprocess, from the repository."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
                          cwd=cwd or REPO, env=full_env, capture_output=True, text=True,
                          timeout=timeout, input=input_text)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def provision(work, capsys):
    """Run `provision_cmd.run` in this process and return its exit code, output and JSON."""
    from remote.commands import provision as provision_cmd

    def run(host="all", recipe=None, inventory=None, **kwargs) -> Result:
        json_path = work / "result.json"
        if json_path.exists():
            json_path.unlink()
        kwargs.setdefault("logs_dir", str(work / "logs"))
        kwargs.setdefault("validate", False)
        rc = provision_cmd.run(host=host, recipe=str(recipe), inventory=str(inventory),
                           json_path=str(json_path), **kwargs)
        captured = capsys.readouterr()
        data = json.loads(json_path.read_text()) if json_path.exists() else None
        return Result(rc, captured.out, captured.err, data)
    return run
