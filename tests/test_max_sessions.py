"""A host whose sshd allows one session at a time (`MaxSessions 1`), shows a banner before
login and runs a chatty ~/.ssh/rc before every command, reached while this machine is busy.

gpuprov runs each command on a channel of its own. sshd refuses a new session while it still
tears the previous one down (paramiko's ChannelException(2, 'Connect failed')), and a busy
machine widens that window. Real sshd, a real login user with a real rc file, CPU load from
busy-loop processes the test starts and stops by PID.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import invoke, write_yaml
from tests.sshd import SshdFarm, ensure_user

pytestmark = pytest.mark.root  # starts sshd for a login user of its own

RC_USER = "gpuprovrc"  # its own login user: the rc file would slow every other test's logins
RUNS = 20


class _OneSessionFarm(SshdFarm):
    """One sshd (127.0.0.72) with MaxSessions 1, a pre-login Banner, logins as RC_USER."""

    def __init__(self) -> None:
        ensure_user(RC_USER)
        home = Path(os.path.expanduser(f"~{RC_USER}"))
        (home / ".ssh").mkdir(exist_ok=True)
        # sshd runs ~/.ssh/rc with /bin/sh before every session's command (sshd(8), SSHRC);
        # what it prints goes to the client like the command's own output.
        (home / ".ssh" / "rc").write_text(
            "i=0; while [ $i -lt 40 ]; do echo \"rc: line $i of a chatty login\"; "
            "echo \"rc: stderr $i\" >&2; i=$((i+1)); done\n")
        super().__init__(1, first=72)

    def config_for(self, address: str) -> Path:
        path = super().config_for(address)
        banner = self.dir / "banner"
        banner.write_text("Authorized use only. Every session is logged.\n" * 5)
        text = path.read_text().replace("MaxSessions 100", "MaxSessions 1")
        text = text.replace(f"AllowUsers {self.user}", f"AllowUsers {RC_USER}")
        path.write_text(text + f"Banner {banner}\n")
        return path

    def host_entry(self, address: str, **extra) -> dict:
        return dict(super().host_entry(address, **extra), user=RC_USER)


@pytest.fixture
def one_session_farm():
    if os.geteuid() != 0:
        pytest.fail("the SSH tests start sshd for a dedicated user and must run as root")
    farm = _OneSessionFarm()
    yield farm
    farm.close()


class _CpuLoad:
    """Busy-loop processes, one per core plus one, each ended by `timeout` after 600 s at the
    latest; stopped by PID."""

    def __enter__(self) -> "_CpuLoad":
        self.procs = [subprocess.Popen(["timeout", "600", sys.executable, "-c",
                                        "while True: pass"]) for _ in range(os.cpu_count() + 1)]
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(10)


def test_a_one_session_host_is_never_lost_under_load(one_session_farm, work):
    farm = one_session_farm
    inv = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "hosts": {"h1": farm.host_entry(farm.addresses[0])}})
    rec = write_yaml(work / "r.yaml", {"name": "several commands", "steps": [
        {"name": f"step {n}", "shell": f"echo {n} > {work}/step{n}", "creates": f"{work}/step{n}"}
        for n in range(4)]})
    lost = []
    with _CpuLoad():
        for run in range(RUNS):
            for path in work.glob("step*"):
                path.unlink()
            facts = invoke("facts", "--host", "h1", "--inventory", str(inv), cwd=work)
            provision = invoke("provision", "--host", "h1", "--inventory", str(inv),
                               "--recipe", str(rec), "--no-validate", cwd=work)
            for what, result in (("facts", facts), ("provision", provision)):
                if result.rc != 0:
                    why = [line for line in (result.out + result.err).splitlines()
                           if "lost" in line or "refused" in line or "unreachable" in line]
                    lost.append(f"run {run} {what}: rc={result.rc} {why[:2]}")
    print(f"{len(lost)} of {2 * RUNS} commands lost the host: {lost}")
    assert not lost


def test_a_session_that_stays_refused_fails_the_host_with_the_reason(one_session_farm, work):
    """The retry is bounded: while one command holds the host's only session, a second one on
    the same connection is refused every time and fails with what happened, not a bare
    ChannelException."""
    from remote.config.inventory import load_inventory
    from remote.ground.errors import ConnectionLost
    from remote.transport.connection import connection_for
    from remote.transport.hostkeys import KnownHosts

    farm = one_session_farm
    inv = load_inventory(write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "hosts": {"h1": farm.host_entry(farm.addresses[0])}}))
    conn = connection_for(inv.hosts["h1"], inv.hosts, inv.timeouts,
                          KnownHosts(inv.known_hosts, inv.host_key_policy)).open()
    # The holder keeps the only session until the test has seen the refusals (at most 30 s),
    # not for a fixed time.
    holder = threading.Thread(target=conn.run, args=(
        f"touch {work}/held; i=0; while [ ! -e {work}/release ] && [ $i -lt 300 ]; do "
        "sleep 0.1; i=$((i+1)); done",))
    try:
        holder.start()
        deadline = time.monotonic() + 10
        while not (work / "held").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(ConnectionLost) as lost:
            conn.run("true")
    finally:
        (work / "release").touch()
        holder.join(15)
        conn.close()
    assert str(lost.value) == ("SSH session to h1 lost: the server refused a new session "
                               "(Connect failed) 8 times over 1.9 s (its MaxSessions?)")
