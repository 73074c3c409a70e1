"""A session-scoped pytest fixture that gives tests real sandbox hosts (see remote/sandbox/).

Use it from a test module by importing the fixture by name (pytest then finds it)::

    from tests.sandbox_fixture import sandbox_hosts  # noqa: F401

    def test_something(sandbox_hosts):
        sandbox_hosts.inventory          # Path of the inventory (hosts sandbox1..N, group sandbox)
        sandbox_hosts.state_dir          # the state folder (for sandbox.restart/stop/start)
        sandbox_hosts.names              # ['sandbox1', 'sandbox2']
        rc, out, err = sandbox_hosts.run("sandbox1", "sudo -n id -u")

The hosts are started once per pytest session, even when several modules import the fixture,
and stopped (every process, mount and overlay removed) at the end of the session, also when a
test or the start itself fails. GPUPROV_SANDBOX_HOSTS sets how many (default 2). The first run
on a machine builds the cached root filesystem (about a minute). Without root the tests that use
the fixture are skipped; a missing tool (debootstrap, ssh-keygen) is an error that says what to
install.

Hosts are shared by every test in the session: a test that reboots or changes one should leave
it running.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import paramiko
import pytest

from remote import sandbox


def _inventory_hosts(state_dir: Path) -> Dict[str, dict]:
    key = str(Path(state_dir).resolve() / "id_ed25519")
    return {s["name"]: {"address": s["address"], "port": s["port"], "user": s["user"],
                        "identity_file": key} for s in sandbox.status(state_dir)}


def connect(host: dict, known_hosts: Path, user: Optional[str] = None,
            timeout: float = 10.0) -> paramiko.SSHClient:
    """An SSH connection trusting only the keys in `known_hosts` (unknown or changed: refused)."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(host["address"], port=host["port"], username=user or host["user"],
                   key_filename=host["identity_file"], look_for_keys=False, allow_agent=False,
                   timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)
    return client


def run(client: paramiko.SSHClient, command: str, timeout: float = 60.0) -> Tuple[int, str, str]:
    """Run `command`; return (exit status, stdout, stderr). Bounded by `timeout` seconds."""
    _stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    out = stdout.read().decode(errors="replace")
    err = stderr.read().decode(errors="replace")
    return stdout.channel.recv_exit_status(), out, err


class SandboxHosts:
    """What the fixture yields."""

    def __init__(self, inventory: Path, state_dir: Path):
        self.inventory = inventory
        self.state_dir = state_dir
        self.known_hosts = state_dir / "known_hosts"
        self.hosts = _inventory_hosts(state_dir)
        self.names: List[str] = list(self.hosts)

    def connect(self, name: str, user: Optional[str] = None) -> paramiko.SSHClient:
        return connect(self.hosts[name], self.known_hosts, user)

    def run(self, name: str, command: str, user: Optional[str] = None,
            timeout: float = 60.0) -> Tuple[int, str, str]:
        client = self.connect(name, user)
        try:
            return run(client, command, timeout)
        finally:
            client.close()


@contextlib.contextmanager
def own_hosts(count: int, offline: bool = False) -> Iterator[SandboxHosts]:
    """`count` sandbox hosts of a module's own (`offline`: `sandbox up --offline`, each in a
    network namespace with nothing but `lo`), stopped and removed on the way out."""
    state = Path(tempfile.mkdtemp(prefix="gpuprov-sandbox-"))
    try:
        inventory = sandbox.up(count, state, progress=lambda line: print(line, flush=True),
                               offline=offline)
        yield SandboxHosts(inventory, state)
    finally:
        sandbox.down(state, progress=lambda line: None)


_shared: dict = {"hosts": None, "users": 0, "error": None}


@pytest.fixture(scope="session")
def sandbox_hosts():
    """Sandbox hosts for the whole session (see the module docstring)."""
    if os.geteuid() != 0:
        pytest.skip("sandbox hosts need root")
    if _shared["error"] is not None:
        pytest.fail(f"sandbox hosts could not start: {_shared['error']}")
    if _shared["hosts"] is None:
        state_dir = Path(tempfile.mkdtemp(prefix="gpuprov-sandbox-"))
        count = int(os.environ.get("GPUPROV_SANDBOX_HOSTS", "2"))
        try:
            inventory = sandbox.up(count, state_dir, progress=lambda line: print(line, flush=True))
            _shared["hosts"] = SandboxHosts(inventory, state_dir)
        except BaseException as e:
            _shared["error"] = e
            sandbox.down(state_dir, progress=lambda line: None)
            raise
    _shared["users"] += 1
    try:
        yield _shared["hosts"]
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            hosts, _shared["hosts"] = _shared["hosts"], None
            sandbox.down(hosts.state_dir, progress=lambda line: None)
