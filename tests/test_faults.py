"""Faults survived, against real OpenSSH servers: hosts that cannot be reached (each for its own
reason), sessions that die or links that go silent mid-step, steps that hang, flaky steps,
SIGTERM during a run, and many hosts through a bounded pool.

Every case is bounded in time and cleans up what it made (processes by PID, namespaces with the
processes in them). Traffic goes only to 127.0.0.0/8, or stays inside a private network
namespace made by the test (see tests/netns.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, write_yaml
from tests.procs import (SilentServer, alive, kill_pids, session_servers, wait_for_file,
                         wait_gone)
from tests.sshd import keygen

SILENT_ADDRESS = "127.0.0.60"
REFUSING_ADDRESS = "127.0.0.61"


def recipe(work: Path, steps, name="r.yaml", **top) -> Path:
    data = {"name": "fault recipe"}
    data.update(top)
    data["steps"] = steps
    return write_yaml(work / name, data)


def known_hosts_with_wrong_key(farm, work: Path, address: str) -> Path:
    """The farm's known_hosts with `address`'s key replaced by another, freshly made key."""
    kt, kb = keygen(work / "impostor")
    lines = []
    for line in farm.known_hosts.read_text().splitlines():
        if line.startswith(f"[{address}]:"):
            line = f"[{address}]:{farm.port} {kt} {kb}"
        lines.append(line)
    path = work / "known_hosts"
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------- unreachable hosts
def test_each_unreachable_host_has_its_reason_while_others_converge(farm, work, provision):
    """Refused port, TCP without SSH, wrong host key, failed login: all four reported
    unreachable with their reason within the configured timeouts; the good host converges."""
    stranger = work / "stranger_key"
    keygen(stranger)
    known = known_hosts_with_wrong_key(farm, work, farm.addresses[2])
    silent = SilentServer(SILENT_ADDRESS, farm.port)
    try:
        inv = write_yaml(work / "inventory.yaml", {
            "known_hosts": [str(known)],
            "timeouts": {"connect": 3, "banner": 2, "auth": 3},
            "hosts": {
                "good": farm.host_entry(farm.addresses[0]),
                "refused": farm.host_entry(REFUSING_ADDRESS),
                "silent": farm.host_entry(SILENT_ADDRESS),
                "wrongkey": farm.host_entry(farm.addresses[2]),
                "badlogin": farm.host_entry(farm.addresses[3], identity_file=str(stranger)),
            }})
        rec = recipe(work, [{"name": "touch", "shell": f"touch {work}/{{{{ host }}}}"}])
        started = time.monotonic()
        result = provision("all", rec, inv)
        total = time.monotonic() - started
    finally:
        silent.close()
    assert result.rc == 1, result.out
    assert result.host("good")["changed"] == 1 and (work / "good").exists()
    expected = {
        "refused": "refused",
        "silent": "accepted TCP but sent no SSH banner within 2 s",
        "wrongkey": "CHANGED",
        "badlogin": f"login as {farm.user} on {farm.addresses[3]}:{farm.port} failed",
    }
    for name, text in expected.items():
        host = result.host(name)
        assert host["unreachable"] is True, (name, host)
        assert text in host["message"], (name, host["message"])
        assert host["steps"] == []
        assert not (work / name).exists()
        # detection is bounded by the configured timeouts (banner 2 s), not by a default
        assert host["elapsed_s"] < 6, (name, host["elapsed_s"])
        assert f"{name}" in result.out and "unreachable" in result.out
    assert total < 15, f"whole run took {total:.1f}s"
    print("detect times:", {n: result.host(n)["elapsed_s"] for n in expected})


def test_small_banner_timeout_is_honoured(farm, work, provision):
    silent = SilentServer(SILENT_ADDRESS, farm.port)
    try:
        inv = write_yaml(work / "inventory.yaml", {
            "known_hosts": [str(farm.known_hosts)],
            "timeouts": {"banner": 1},
            "hosts": {"silent": farm.host_entry(SILENT_ADDRESS)}})
        started = time.monotonic()
        result = provision("all", recipe(work, [{"shell": "true"}]), inv)
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    assert result.rc == 1
    assert "sent no SSH banner within 1 s" in result.host("silent")["message"]
    assert silent.accepted, "the client did reach the silent server"
    assert 0.9 <= result.host("silent")["elapsed_s"] < 3, result.host("silent")["elapsed_s"]
    assert elapsed < 5


# ----------------------------------------------------------------------------- dead sessions
def _run_in_thread(provision_fn, *args, **kwargs):
    """Start `provision_fn` in a thread; return (thread, box) where box gets the result."""
    import threading

    box: dict = {}

    def target():
        started = time.monotonic()
        try:
            box["result"] = provision_fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            box["error"] = exc
        box["ended"] = time.monotonic()
        box["started"] = started

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def test_session_killed_mid_step(farm, work, inventory):
    """The sshd processes serving one host's session are killed (SIGKILL, by PID) while its
    step runs: that host is reported at once, the other host's step completes."""
    from remote import cli

    inv = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "timeouts": {"keepalive": 2},
        "hosts": {"victim": farm.host_entry(farm.addresses[1], vars={"nap": 60}),
                  "fine": farm.host_entry(farm.addresses[0], vars={"nap": 2})}})
    rec = recipe(work, [{"name": "long", "shell": f"echo $$ > {work}/{{{{ host }}}}.pid; "
                                                  f"sleep {{{{ nap }}}}", "timeout": 120},
                        {"name": "after", "shell": f"touch {work}/{{{{ host }}}}.after"}])
    json_path = work / "out.json"
    thread, box = _run_in_thread(cli.provision, host="all", recipe=str(rec), inventory=str(inv),
                                 json_path=str(json_path), logs_dir=str(work / "logs"),
                                 validate=False)
    pid_file = work / "victim.pid"
    leftovers = []
    try:
        assert wait_for_file(pid_file, 20), "the long step never started"
        shell_pid = int(pid_file.read_text())
        servers = session_servers(farm.procs[farm.addresses[1]].pid, shell_pid)
        assert servers, "found no sshd process serving the session"
        killed_at = time.monotonic()
        kill_pids(servers)
        thread.join(30)
        assert not thread.is_alive(), "the run did not finish after its session died"
    finally:
        # the orphaned remote shell and sleep (sshd no longer there to hang them up)
        if pid_file.exists():
            shell_pid = int(pid_file.read_text())
            from tests.procs import descendants_of
            leftovers = [shell_pid] + descendants_of(shell_pid)
            kill_pids(leftovers)
    assert "error" not in box, box.get("error")
    assert box["result"] == 1
    detect = box["ended"] - killed_at
    data = json.loads(json_path.read_text())["hosts"]
    assert data["victim"]["unreachable"] is True
    assert "lost" in data["victim"]["message"] or "closed" in data["victim"]["message"], \
        data["victim"]["message"]
    assert data["fine"]["unreachable"] is False and data["fine"]["changed"] == 2
    assert (work / "fine.after").exists() and not (work / "victim.after").exists()
    # the fine host's 2 s step bounds the run; the victim itself must be seen within the
    # keepalive bound, far from TCP's minutes
    assert detect < 10, f"took {detect:.1f}s after the kill"
    log = next((work / "logs" / "victim").iterdir()) / "provision.log"
    assert "connection lost" in log.read_text()
    victim_detect = box["started"] + data["victim"]["elapsed_s"] - killed_at
    assert victim_detect < 3, f"victim seen {victim_detect:.1f}s after the kill"
    print(f"session killed: victim reported {victim_detect:.2f}s after the kill")
