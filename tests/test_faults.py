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
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, forwarding_refused_server, write_yaml
from tests.procs import (
    SilentServer,
    alive,
    kill_pids,
    session_servers,
    sigint_as_in_a_terminal,
    wait_for_file,
    wait_gone,
    wait_until,
)
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
    assert result.rc == 4, result.out
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
    # reasons are one line each in the report; no library traceback reaches the terminal
    assert "Traceback" not in result.err + result.out, result.err
    print("detect times:", {n: result.host(n)["elapsed_s"] for n in expected})


@pytest.mark.parametrize("banner,connect", [(1, 10), (2, 0.5)])
def test_small_banner_timeout_is_honoured(farm, work, banner, connect):
    """Run as a user would (a subprocess, so whatever reaches the terminal is seen). A connect
    timeout shorter than the banner wait bounds only the TCP connect: it used to cut the
    negotiation short too, and the host's reason read "No existing session"."""
    from tests.conftest import invoke

    silent = SilentServer(SILENT_ADDRESS, farm.port)
    try:
        inv = write_yaml(work / "inventory.yaml", {
            "known_hosts": [str(farm.known_hosts)],
            "timeouts": {"banner": banner, "connect": connect},
            "hosts": {"silent": farm.host_entry(SILENT_ADDRESS)}})
        out_json = work / "out.json"
        result = invoke("provision", "--host", "all", "--inventory", str(inv), "--recipe",
                        str(recipe(work, [{"shell": "true"}])), "--no-validate", "--json",
                        str(out_json), timeout=30)
    finally:
        silent.close()
    assert result.rc == 4
    host = json.loads(out_json.read_text())["hosts"]["silent"]
    assert f"sent no SSH banner within {banner} s" in host["message"], host["message"]
    assert silent.accepted, "the client did reach the silent server"
    assert banner - 0.1 <= host["elapsed_s"] < banner + 2, host["elapsed_s"]
    # the reason is the report's one line; paramiko's own traceback must not reach the terminal
    assert "Traceback" not in result.err + result.out, result.err
    assert f"sent no SSH banner within {banner} s" in result.out


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
    from remote.commands import provision as provision_cmd

    inv = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "timeouts": {"keepalive": 2},
        "hosts": {"victim": farm.host_entry(farm.addresses[1], vars={"nap": 60}),
                  "fine": farm.host_entry(farm.addresses[0], vars={"nap": 0})}})
    rec = recipe(work, [{"name": "long", "shell": f"echo $$ > {work}/{{{{ host }}}}.pid; "
                                                  f"sleep {{{{ nap }}}}", "timeout": 120},
                        {"name": "after", "shell": f"touch {work}/{{{{ host }}}}.after"}])
    json_path = work / "out.json"
    thread, box = _run_in_thread(provision_cmd.run, host="all", recipe=str(rec), inventory=str(inv),
                                 json_path=str(json_path), logs_dir=str(work / "logs"),
                                 validate=False)
    pid_file = work / "victim.pid"
    leftovers = []
    try:
        assert wait_for_file(pid_file, 20), "the long step never started"
        # the other host is done first, so the run's end is the moment the victim is reported
        deadline = time.monotonic() + 20
        while not (work / "fine.after").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
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
    assert box["result"] == 4
    detect = box["ended"] - killed_at
    data = json.loads(json_path.read_text())["hosts"]
    assert data["victim"]["unreachable"] is True
    assert "lost" in data["victim"]["message"] or "closed" in data["victim"]["message"], \
        data["victim"]["message"]
    assert data["fine"]["unreachable"] is False and data["fine"]["changed"] == 2
    assert (work / "fine.after").exists() and not (work / "victim.after").exists()
    # seen at once (EOF on the socket), far from TCP's minutes
    assert detect < 3, f"took {detect:.1f}s after the kill"
    log = next((work / "logs" / "victim").iterdir()) / "provision.log"
    assert "connection lost" in log.read_text()
    print(f"session killed: victim reported {detect:.2f}s after the kill")


@pytest.mark.slow
def test_link_cut_mid_step_in_private_namespace():
    """Traffic to one host is dropped (nftables, inside a namespace holding only lo) while its
    step is silent: the keepalive ping goes unanswered and the host is reported unreachable
    within the keepalive bound (timeouts.keepalive 2 s -> about 12 s), not after TCP's
    15 minutes. A host whose SYN is dropped is refused by the connect timeout (3 s)."""
    from tests.netns import have_tools, run_scenario

    missing = have_tools()
    if missing:
        pytest.skip(missing)
    started = time.monotonic()
    out = run_scenario("linkcut", timeout=120)
    hosts = out["results"]["hosts"]
    assert out["rc"] == 4, out["output"]
    assert hosts["cut"]["unreachable"] is True, out["output"]
    assert "stopped answering" in hosts["cut"]["message"]
    assert hosts["fine"]["changed"] == 2 and hosts["fine"]["unreachable"] is False
    assert hosts["blackholed"]["unreachable"] is True
    assert "within 3 s (connect timeout)" in hosts["blackholed"]["message"]
    assert 2.5 < hosts["blackholed"]["elapsed_s"] < 6, hosts["blackholed"]
    # interval 2 s of silence, then 10 s without an answer to the ping
    assert out["detect_s"] < 16, out
    assert time.monotonic() - started < 60
    print(f"link cut: detected {out['detect_s']}s after the cut; connect timeout "
          f"{hosts['blackholed']['elapsed_s']}s")


# ----------------------------------------------------------------------------- hangs and retries
def test_hanging_step_times_out_while_other_hosts_go_on(farm, work, inventory, provision):
    rec = recipe(work, [
        {"name": "maybe hang", "shell": f"echo $$ > {work}/{{{{ host }}}}.pid; "
                                        "if [ {{ host }} = h1 ]; then exec sleep 300; fi",
         "timeout": 3},
        {"name": "next", "shell": f"touch {work}/{{{{ host }}}}.next"},
        {"name": "last", "shell": f"touch {work}/{{{{ host }}}}.last"},
    ])
    started = time.monotonic()
    result = provision("h1,h2,h3", rec, inventory())
    assert time.monotonic() - started < 25
    assert result.rc == 1
    h1 = result.host("h1")
    assert [s["status"] for s in h1["steps"]] == ["failed"]
    assert h1["steps"][0]["message"] == "timed out after 3 s"
    assert not (work / "h1.next").exists()
    for name in ("h2", "h3"):
        assert result.statuses(name) == ["changed", "changed", "changed"]
        # the others did not wait for h1's timeout
        assert result.host(name)["elapsed_s"] < 3, result.host(name)
    pid = int((work / "h1.pid").read_text())
    assert wait_gone(pid, 10), "h1's remote sleep was left running"


def test_retries_back_off_exponentially(farm, work, inventory, provision):
    """Fails twice, then succeeds: waits `delay`, then twice `delay`, between attempts."""
    stamps = work / "stamps"
    script = (f"date +%s.%N >> {stamps}; n=$(wc -l < {stamps}); [ $n -ge 3 ]")
    rec = recipe(work, [{"name": "flaky", "shell": script, "retries": 4, "delay": 0.5}])
    result = provision("h1", rec, inventory())
    assert result.rc == 0 and result.statuses("h1") == ["changed"]
    times = [float(t) for t in stamps.read_text().split()]
    assert len(times) == 3
    gaps = [b - a for a, b in zip(times, times[1:])]
    # waits happened (lower bounds); their exact lengths are in the log lines below
    assert gaps[0] > 0.45 and gaps[1] > 0.95, gaps
    log = next((work / "logs" / "h1").iterdir()) / "provision.log"
    text = log.read_text()
    assert "attempt 1/5 failed (rc=1); retrying in 0.5s" in text
    assert "attempt 2/5 failed (rc=1); retrying in 1s" in text


# ----------------------------------------------------------------------------- interrupted runs
def _start_invoke(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "invoke", "--search-root", str(REPO), *args],
                            cwd=cwd or REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_as_in_a_terminal)


def _stop_run(proc: subprocess.Popen, sig) -> tuple:
    """Send `sig` to a running invoke; (stdout, stderr, seconds until it exited)."""
    sent_at = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    return out, err, time.monotonic() - sent_at


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupt_stops_remote_commands_keeps_recap_and_logs(farm, work, inventory, sig):
    """SIGTERM (or Ctrl-C's SIGINT) while 2 hosts run a long step: exit 130, the recap and
    provision.log kept, the remote commands stopped within seconds; a re-run continues."""
    from tests.procs import descendants_of

    rec = recipe(work, [
        {"name": "first", "file": {"path": f"{work}/{{{{ host }}}}.first", "content": "1\n"}},
        {"name": "long", "shell": f"echo $$ > {work}/{{{{ host }}}}.pid; sleep {{{{ nap }}}}; "
                                  f"touch {work}/{{{{ host }}}}.done",
         "creates": f"{work}/{{{{ host }}}}.done"},
    ], vars={"nap": 300})
    inv = inventory()
    out_json = work / "out.json"
    logs = work / "logs"
    proc = _start_invoke("provision", "--host", "h1,h2", "--inventory", str(inv), "--recipe",
                         str(rec), "--no-validate", "--json", str(out_json), cwd=work)
    remote = []
    try:
        for name in ("h1", "h2"):
            assert wait_for_file(work / f"{name}.pid", 30), "the long step never started"
        time.sleep(0.3)
        for name in ("h1", "h2"):
            pid = int((work / f"{name}.pid").read_text())
            remote += [pid] + descendants_of(pid)
        assert all(alive(p) for p in remote)
        out, err, stopped_in = _stop_run(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        gone = [wait_gone(pid, 8) for pid in remote]
        leftovers = [p for p, g in zip(remote, gone) if not g]
        kill_pids(leftovers)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "Traceback" not in err, err
    assert "interrupted" in out and "RECAP" in out, out
    assert not leftovers, f"remote processes left running: {leftovers}"
    assert stopped_in < 10, stopped_in
    data = json.loads(out_json.read_text())["hosts"]
    for name in ("h1", "h2"):
        assert data[name]["interrupted"] is True
        assert data[name]["changed"] == 1  # the first step, done before the interrupt
        log = next((logs / name).iterdir()) / "provision.log"
        text = log.read_text()
        assert "first" in text and "interrupted" in text, text
        assert not (work / f"{name}.done").exists()
    # a re-run continues from where the hosts are: the first step is already there
    rerun = _start_invoke("provision", "--host", "h1,h2", "--inventory", str(inv), "--recipe",
                          str(rec), "--no-validate", "--json", str(out_json), "--var", "nap=0",
                          cwd=work)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, (out, err)
    data = json.loads(out_json.read_text())["hosts"]
    for name in ("h1", "h2"):
        assert [s["status"] for s in data[name]["steps"]] == ["ok", "changed"]
        assert (work / f"{name}.done").exists()
    print(f"{sig.name}: run stopped {stopped_in:.2f}s after the signal")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupting_validate_leaves_no_unpacked_package_on_the_host(farm, work, sig):
    """Ctrl-C (or SIGTERM) while a host validates: exit 130, the validation stopped, and the
    package it unpacked (~/.gpuprov/<host>/pkg-<run>/) removed; it stayed behind, as the
    command's `rm` was stopped with the rest of it. The run's output folder is kept."""
    name = f"v-{secrets.token_hex(3)}"
    python = work / "python"  # the host's `validate_python`: says it started, then runs long
    python.write_text(f"#!/bin/sh\necho $$ > {work}/started\nexec sleep 300\n")
    os.chmod(python, 0o755)
    inv = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)], "hosts": {name: farm.host_entry(farm.addresses[0])}})
    folder = Path(pwd.getpwnam(farm.user).pw_dir) / ".gpuprov" / name
    proc = _start_invoke("validate", "--host", name, "--inventory", str(inv), "--var",
                         f"validate_python={python}", cwd=work)
    try:
        assert wait_for_file(work / "started", 60), "the validation never started"
        started = int((work / "started").read_text())
        assert [p.name for p in folder.glob("pkg-*")], "the package is unpacked while it runs"
        out, err, _ = _stop_run(proc, sig)
        gone = wait_gone(started, 8)
        left = sorted(p.name for p in folder.iterdir())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if (work / "started").exists():
            kill_pids([int((work / "started").read_text())])
        shutil.rmtree(folder, ignore_errors=True)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "Traceback" not in err and gone, err
    assert not [n for n in left if n.startswith("pkg-")], left
    assert "runs" in left, left


@pytest.mark.slow  # waits out timeouts.idle (3 s) on a real sshd
def test_a_stalled_validation_leaves_no_unpacked_package_on_the_host(farm, work):
    """A validation that stalls past timeouts.idle is stopped (its whole process group, the
    `rm` of the package with it): the host is "not validated", and the package it unpacked
    (~/.gpuprov/<host>/pkg-<run>/) is removed as after Ctrl-C; it stayed behind."""
    name = f"v-{secrets.token_hex(3)}"
    python = work / "python"  # the host's `validate_python`: says it started, then is silent
    python.write_text(f"#!/bin/sh\necho $$ > {work}/started\nexec sleep 300\n")
    os.chmod(python, 0o755)
    inv = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)], "timeouts": {"idle": 3},
        "hosts": {name: farm.host_entry(farm.addresses[0])}})
    folder = Path(pwd.getpwnam(farm.user).pw_dir) / ".gpuprov" / name
    try:
        proc = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO),
                               "validate", "--host", name, "--inventory", str(inv), "--var",
                               f"validate_python={python}"], cwd=work, capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
        gone = wait_gone(int((work / "started").read_text()), 8)
        left = sorted(p.name for p in folder.iterdir())
    finally:
        if (work / "started").exists():
            kill_pids([int((work / "started").read_text())])
        shutil.rmtree(folder, ignore_errors=True)
    assert proc.returncode == 3 and "no output line for 3 s" in proc.stdout, \
        (proc.returncode, proc.stdout, proc.stderr)
    assert gone, "the stalled validation was left running"
    assert not [n for n in left if n.startswith("pkg-")], left


def _signalled_while_a_host_waits_for_its_banner(farm, work, sig, task_args):
    """Run `invoke TASK_ARGS(inventory)` against one host that accepts TCP and never sends an
    SSH banner (banner wait 60 s), send `sig` once the host is reached; (rc, out, err, seconds
    from the signal to the end)."""
    silent = SilentServer(SILENT_ADDRESS, farm.port)
    try:
        inv = write_yaml(work / "inventory.yaml", {
            "known_hosts": [str(farm.known_hosts)], "timeouts": {"banner": 60},
            "hosts": {"silent": farm.host_entry(SILENT_ADDRESS)}})
        proc = _start_invoke(*task_args(inv), cwd=work)
        try:
            assert wait_until(lambda: silent.accepted, 30), "the run never reached the server"
            time.sleep(0.5)  # paramiko is waiting for the banner
            out, err, stopped_in = _stop_run(proc, sig)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        silent.close()
    return proc.returncode, out, err, stopped_in


def test_interrupt_while_a_host_waits_for_its_banner(farm, work):
    """Ctrl-C while a host accepted TCP but sends no banner (banner wait 60 s): the run stops
    at once, exit 130, and the host is reported interrupted, not unreachable. Before, the run
    sat out the banner wait and then called the host unreachable."""
    out_json = work / "out.json"
    rc, out, err, stopped_in = _signalled_while_a_host_waits_for_its_banner(
        farm, work, signal.SIGINT, lambda inv: [
            "provision", "--host", "all", "--inventory", str(inv), "--recipe",
            str(recipe(work, [{"shell": "true"}])), "--no-validate", "--json", str(out_json)])
    assert rc == 130, (out, err)
    assert "Traceback" not in err, err
    host = json.loads(out_json.read_text())["hosts"]["silent"]
    assert host.get("interrupted") is True and host["unreachable"] is False, host
    assert stopped_in < 10, f"stopped {stopped_in:.1f}s after SIGINT (banner wait 60 s)"


@pytest.mark.slow
def test_interrupt_while_a_tcp_connect_is_unanswered_in_private_namespace():
    """Ctrl-C while a host's SYN goes unanswered (dropped inside a namespace holding only lo,
    connect timeout 60 s): the run stops at once and reports the host interrupted."""
    from tests.netns import have_tools, run_scenario

    missing = have_tools()
    if missing:
        pytest.skip(missing)
    out = run_scenario("interrupt_connect", timeout=120)
    assert out["rc"] == 130, out["output"]
    host = out["results"]["hosts"]["blackholed"]
    assert host.get("interrupted") is True and host["unreachable"] is False, out
    assert out["stopped_s"] < 10, out
    print(f"interrupted a pending TCP connect in {out['stopped_s']}s")


# ----------------------------------------------------------------------------- many hosts
def _many_hosts(farm, count: int) -> dict:
    """`count` inventory names spread over the farm's 4 servers."""
    return {f"n{i:02d}": farm.host_entry(farm.addresses[i % len(farm.addresses)])
            for i in range(count)}


def _counting_recipe(work: Path) -> Path:
    running = work / "running"
    running.mkdir()
    os.chmod(running, 0o777)
    step = (f"touch {running}/{{{{ host }}}}; ls {running} | wc -l >> {work}/counts; "
            f"sleep 0.4; rm {running}/{{{{ host }}}}")
    return recipe(work, [{"name": "count", "shell": step},
                         {"name": "after", "shell": "true", "changed_when": False}])


@pytest.mark.slow
@pytest.mark.parametrize("forks", [8, 64])
def test_forks_bound_concurrency_with_64_hosts(farm, work, inventory, provision, forks):
    """64 hosts on the 4 servers: with --forks 8 no more than 8 run a step at once; with
    --forks 64 they all go at once. Nothing deadlocks and every host gets a result."""
    rec = _counting_recipe(work)
    inv = inventory(hosts=_many_hosts(farm, 64))
    started = time.monotonic()
    result = provision("all", rec, inv, forks=forks)
    elapsed = time.monotonic() - started
    failures = {name: [s["message"] for s in host["steps"] if s["status"] == "failed"]
                or host.get("message") for name, host in result.json["hosts"].items()
                if host["failed"] or host["unreachable"]}
    assert result.rc == 0 and not failures, failures
    assert len(result.json["hosts"]) == 64
    for name, host in result.json["hosts"].items():
        assert host["unreachable"] is False and host["changed"] == 1 and host["ok"] == 1, name
    counts = [int(n) for n in (work / "counts").read_text().split()]
    assert len(counts) == 64
    assert max(counts) <= forks, counts
    assert max(counts) >= min(forks, 4), f"hosts did not run in parallel: {counts}"
    assert elapsed < 90
    print(f"--forks {forks}: 64 hosts in {elapsed:.1f}s, at most {max(counts)} at once")


# ----------------------------------------------------------------------------- jump chains
def test_jump_host_of_a_jump_host_is_followed(farm, work, inventory, provision):
    """inner -> b2 -> b1: each hop goes through the one before. Behind a first bastion that
    refuses forwarding the chain is unreachable (before, the second hop's own jump was ignored
    and it was reached directly)."""
    closed = forwarding_refused_server(farm)
    hosts = {"b1": farm.host_entry(farm.addresses[2]),
             "b2": farm.host_entry(farm.addresses[0], jump="b1"),
             "inner": farm.host_entry(farm.addresses[1], jump="b2"),
             "closed-b1": farm.host_entry(closed),
             "closed-b2": farm.host_entry(farm.addresses[0], jump="closed-b1"),
             "closed-inner": farm.host_entry(farm.addresses[1], jump="closed-b2")}
    rec = recipe(work, [{"shell": f"echo ok > {work}/{{{{ host }}}}"}])
    result = provision("inner,closed-inner", rec, inventory(hosts=hosts))
    assert result.host("inner")["changed"] == 1 and (work / "inner").exists()
    assert result.host("closed-inner")["unreachable"] is True
    assert not (work / "closed-inner").exists()
    assert result.rc == 4


def test_cancel_stops_a_local_command(work):
    """The local connection stops a cancelled command the same way (its process group)."""
    import threading

    from remote.config.inventory import Host, Timeouts
    from remote.ground.errors import Where
    from remote.transport.connection import Interrupted, LocalConnection
    from tests.procs import descendants_of

    conn = LocalConnection(Host("localhost", "localhost", Where("inv", 1), connection="local"),
                           Timeouts()).open()
    conn.cancel = threading.Event()
    pid_file = work / "pid"
    box = {}

    def run():
        try:
            conn.run(f"echo $$ > {pid_file}; sleep 60; touch {work}/done", timeout=120)
        except Interrupted as exc:
            box["raised"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert wait_for_file(pid_file, 10)
    pid = int(pid_file.read_text())
    group = [pid] + descendants_of(pid)
    started = time.monotonic()
    conn.cancel.set()
    thread.join(10)
    try:
        assert "raised" in box and not thread.is_alive()
        assert time.monotonic() - started < 3
        assert all(wait_gone(p, 5) for p in group)
    finally:
        kill_pids(group)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_gpuprov_facts_exits_130_without_a_traceback(farm, work, sig):
    """Ctrl-C (or SIGTERM) while `facts` waits for a host's banner: the run stops at once with
    exit 130 and the hosts that answered are still shown. facts ran its hosts outside the
    interrupt handling the other commands have, and a signal ended it in a traceback."""
    rc, out, err, stopped_in = _signalled_while_a_host_waits_for_its_banner(
        farm, work, sig, lambda inv: ["facts", "--host", "all", "--inventory", str(inv)])
    assert rc == 130, (out, err)
    assert "Traceback" not in err + out, err
    assert stopped_in < 10, f"stopped {stopped_in:.1f}s after the signal (banner wait 60 s)"
