"""Sandbox hosts, for real: debootstrap rootfs, overlays, namespaces, sshd, paramiko. No mocks.

Needs root (skipped otherwise, except the not-root test). The first run on a machine builds the
cached root filesystem (about a minute); later runs take seconds.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import paramiko
import pytest
import yaml

from remote import sandbox
from tests.sandbox_fixture import connect, run, sandbox_hosts  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def needs_root(test):
    return pytest.mark.root(pytest.mark.skipif(os.geteuid() != 0,
                                               reason="sandbox hosts need root")(test))


def _host_boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _all_mountinfo_mentioning(text: str) -> list:
    """Mount lines of every process on this machine that mention `text`."""
    hits = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/mountinfo") as f:
                    hits += [f"{pid}: {line.strip()}" for line in f if text in line]
            except OSError:
                pass
    return hits


def _run_when_back(box, name: str, command: str, timeout: float = 20.0):
    """Run `command` on a host that may be restarting its sshd, retrying until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return box.run(name, command)
        except (paramiko.SSHException, EOFError, OSError) as e:   # refused, reset, no banner
            assert time.monotonic() < deadline, f"{name} did not come back: {e!r}"
            time.sleep(0.2)


def _keep_logs(state_dir: Path, logs: Path) -> None:
    """Copy the hosts' console logs (init and sshd messages) where a failed run can read them."""
    for f in state_dir.glob("hosts/*/*"):
        if f.name in ("console.log", "status.json"):
            shutil.copy(f, logs / f"{f.parent.name}-{f.name}")


class Box:
    """One module's own sandbox (this module reboots, stops and finally removes its hosts)."""

    def __init__(self, state_dir: Path, inventory: Path):
        self.state_dir = state_dir
        self.inventory = inventory
        self.known_hosts = state_dir / "known_hosts"
        self.inv = yaml.safe_load(inventory.read_text())

    def host(self, name: str) -> dict:
        return self.inv["hosts"][name]

    def connect(self, name: str, user: str = None) -> paramiko.SSHClient:
        return connect(self.host(name), self.known_hosts, user)

    def run(self, name: str, command: str, user: str = None, timeout: float = 60.0):
        client = self.connect(name, user)
        try:
            return run(client, command, timeout)
        finally:
            client.close()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("sandbox hosts need root")
    state_dir = tmp_path_factory.mktemp("sbx")
    logs = tmp_path_factory.mktemp("sbx-logs")
    lines = []
    try:
        started = time.monotonic()
        inventory = sandbox.up(2, state_dir, progress=lines.append)
        print(f"sandbox up: {time.monotonic() - started:.1f} s", *lines, sep="\n")
        box = Box(state_dir, inventory)
        box.logs = logs
        yield box
    finally:
        _keep_logs(state_dir, logs)
        sandbox.down(state_dir, progress=lambda line: None)
        assert not state_dir.exists()


# ------------------------------------------------------------------------------------------------

@needs_root
def test_inventory_known_hosts_and_state_files(box):
    inv = box.inv
    assert inv["host_key_policy"] == "strict"
    assert inv["known_hosts"] == str(box.state_dir.resolve() / "known_hosts")
    assert set(inv["hosts"]) == {"sandbox1", "sandbox2"}
    assert inv["groups"] == {"sandbox": {"hosts": ["sandbox1", "sandbox2"]}}
    addresses = set()
    for h in inv["hosts"].values():
        assert h["user"] == "admin" and h["python"] == "/usr/bin/python3"
        assert h["address"].startswith("127.0.0.") and h["address"] != "127.0.0.1"
        assert Path(h["identity_file"]).is_file()
        assert oct(Path(h["identity_file"]).stat().st_mode & 0o777) == "0o600"
        addresses.add(h["address"])
    assert len(addresses) == 2
    lines = box.known_hosts.read_text().splitlines()
    assert len(lines) == 2
    assert {line.split()[0] for line in lines} == {
        f"[{h['address']}]:{h['port']}" for h in inv["hosts"].values()}
    assert len({line.split()[2] for line in lines}) == 2, "each host has its own key"


@needs_root
def test_ssh_to_each_host_with_strict_host_keys(box):
    for name in ("sandbox1", "sandbox2"):
        rc, out, err = box.run(name, "cat /etc/debian_version; python3 --version; id -u; hostname")
        assert rc == 0, err
        version, python, uid, hostname = out.split("\n")[:4]
        assert version.startswith("12."), out
        assert python.startswith("Python 3."), out
        assert uid == "1000"                      # admin, as on Debian's cloud images
        assert hostname == name
        rc, out, err = box.run(name, "sudo -n id -u")    # `become` works
        assert (rc, out.strip()) == (0, "0"), err
        rc, out, err = box.run(name, "id -u", user="root")
        assert (rc, out.strip()) == (0, "0"), err


@needs_root
def test_unknown_or_swapped_host_key_is_refused(box, tmp_path):
    h1, h2 = box.host("sandbox1"), box.host("sandbox2")
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException):
        connect(h1, empty).close()
    # sandbox2's key written down for sandbox1's address: a changed key, refused.
    lines = dict(line.split(" ", 1) for line in box.known_hosts.read_text().splitlines())
    swapped = tmp_path / "swapped_known_hosts"
    key2 = lines["[%s]:%s" % (h2["address"], h2["port"])]
    swapped.write_text("[%s]:%s %s\n" % (h1["address"], h1["port"], key2))
    with pytest.raises(paramiko.BadHostKeyException):
        connect(h1, swapped).close()


@needs_root
def test_each_host_has_its_own_filesystem(box):
    marker = f"/root/gpuprov-marker-{uuid.uuid4().hex}"
    rc, _, err = box.run("sandbox1", f"echo one > {marker} && cat {marker}", user="root")
    assert rc == 0, err
    rc, out, _ = box.run("sandbox2", f"test -e {marker}; echo $?", user="root")
    assert out.strip() == "1", "sandbox2 sees sandbox1's file"
    assert not os.path.exists(marker), "the file reached the real machine"
    upper = box.state_dir / "hosts" / "sandbox1" / "upper" / marker.lstrip("/")
    assert upper.read_text() == "one\n"       # it lives in sandbox1's overlay
    rootfs = Path(json.loads((box.state_dir / "state.json").read_text())
                  ["hosts"]["sandbox1"]["rootfs"])
    assert not (rootfs / marker.lstrip("/")).exists(), "the shared rootfs was written"


@needs_root
def test_inside_a_host_nothing_can_reboot_the_machine(box):
    script = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
lines = open('/proc/self/status').read().splitlines()
status = dict(line.split(':\t') for line in lines if ':\t' in line)
print('CapBnd', status['CapBnd'].strip())
print('CapEff', status['CapEff'].strip())
print('pid1', open('/proc/1/cmdline').read().replace('\0', ' '))
rc = libc.reboot(0x01234567)   # LINUX_REBOOT_CMD_RESTART
print('reboot', rc, ctypes.get_errno())
try:
    open('/proc/sysrq-trigger', 'w').write('h')   # 'h' only prints help, even if it got through
    print('sysrq writable')
except OSError as e:
    print('sysrq refused', e.errno)
print('nprocs', sum(p.isdigit() for p in os.listdir('/proc')))
print('blockdevs', sum(os.path.exists('/dev/' + d) for d in ('vda', 'sda', 'nvme0n1', 'xvda')))
"""
    rc, out, err = box.run("sandbox1", "sudo -n python3 -c " + shlex.quote(script))
    assert rc == 0, err
    got = dict(line.split(" ", 1) for line in out.splitlines())
    for field in ("CapBnd", "CapEff"):
        assert not int(got[field], 16) & (1 << sandbox.CAP_SYS_BOOT), f"{field} has CAP_SYS_BOOT"
        assert not int(got[field], 16) & (1 << 21), f"{field} has CAP_SYS_ADMIN"
    assert int(got["CapEff"], 16) != 0          # it is root, with the kept capabilities
    assert sandbox.INIT_ARG in got["pid1"] and str(box.state_dir.resolve()) in got["pid1"], \
        "PID 1 inside is not the sandbox's own init"
    assert got["reboot"] == "-1 1"              # EPERM
    assert got["sysrq"].startswith("refused")
    assert int(got["nprocs"]) < 20              # only this host's processes are visible
    assert got["blockdevs"] == "0"
    rc, out, _ = box.run("sandbox1", "sudo -n mount -o remount,rw /sys; echo $?; "
                         "sudo -n ip link set lo down; echo $?; lspci | wc -l")
    assert out.split() == ["32", "2", "0"], out   # mount refused, ip refused, no PCI devices
    assert Path("/sys/class/net/lo/operstate").exists()


@needs_root
def test_reboot_inside_restarts_only_that_host(box):
    machine_boot = _host_boot_id()
    other_before = box.run("sandbox2", "cat /proc/sys/kernel/random/boot_id")[1].strip()
    rc, out, err = box.run("sandbox1", "cat /proc/sys/kernel/random/boot_id; "
                           "echo keep | sudo -n tee /root/kept >/dev/null; sudo -n touch /run/gone")
    assert rc == 0, err
    old = out.strip()
    assert old == sandbox.boot_id(box.state_dir, "sandbox1")
    assert old != machine_boot
    started = time.monotonic()
    client = box.connect("sandbox1")
    try:
        try:
            run(client, "sudo -n reboot", timeout=15)
        except (paramiko.SSHException, EOFError, OSError):
            pass      # the connection may drop, as with a real reboot
    finally:
        client.close()
    new = sandbox.wait_rebooted(box.state_dir, "sandbox1", old, timeout=30)
    elapsed = time.monotonic() - started
    assert new != old
    assert elapsed < 15
    rc, out, err = box.run("sandbox1", "cat /proc/sys/kernel/random/boot_id; "
                           "sudo -n cat /root/kept; test -e /run/gone; echo $?")
    assert rc == 0, err
    assert out.split() == [new, "keep", "1"]        # new boot, same disk, fresh /run
    assert _host_boot_id() == machine_boot           # this machine did not reboot
    assert box.run("sandbox2", "cat /proc/sys/kernel/random/boot_id")[1].strip() == other_before
    print(f"reboot inside sandbox1: back with a new boot_id in {elapsed:.1f} s")


@needs_root
def test_kill_everything_inside_leaves_the_machine_alone(box):
    canary = subprocess.Popen(["sleep", "120"])     # a process of the real machine
    try:
        old = sandbox.boot_id(box.state_dir, "sandbox2")
        client = box.connect("sandbox2", user="root")
        try:
            try:
                run(client, "kill -9 -1", timeout=10)
            except (paramiko.SSHException, EOFError, OSError):
                pass
        finally:
            client.close()
        # sshd was killed too; the host's init restarts it after 1 s.
        rc, out, _ = _run_when_back(box, "sandbox2", "cat /proc/sys/kernel/random/boot_id")
        assert (rc, out.strip()) == (0, old)         # not a reboot: same boot
        assert canary.poll() is None, "a process outside the sandbox was killed"
    finally:
        canary.kill()
        canary.wait()


@needs_root
def test_stop_and_start_gives_a_new_boot_id_and_keeps_the_disk(box):
    h = box.host("sandbox2")
    _run_when_back(box, "sandbox2", "echo disk | sudo -n tee /root/disk >/dev/null")
    old = sandbox.boot_id(box.state_dir, "sandbox2")
    sandbox.stop(box.state_dir, "sandbox2")
    st = {s["name"]: s for s in sandbox.status(box.state_dir)}
    assert not st["sandbox2"]["running"] and st["sandbox1"]["running"]
    with pytest.raises((paramiko.SSHException, OSError)):
        connect(h, box.known_hosts, timeout=3).close()
    new = sandbox.start(box.state_dir, "sandbox2", timeout=30)
    assert new != old
    rc, out, _ = box.run("sandbox2", "cat /proc/sys/kernel/random/boot_id; sudo -n cat /root/disk")
    assert out.split() == [new, "disk"]
    # restart() from outside: the same as a reboot inside.
    newer = sandbox.restart(box.state_dir, "sandbox2", timeout=30)
    assert newer not in (old, new)


@needs_root
def test_pip_inside_uses_this_machines_configuration(box):
    rc, out, err = box.run("sandbox1", "python3 -m venv /tmp/venv && /tmp/venv/bin/pip --version "
                           "&& /tmp/venv/bin/pip config list", timeout=120)
    assert rc == 0, err
    assert "pip " in out
    cfg = sandbox.host_pip_config()
    for section in cfg.sections():
        for key, value in cfg.items(section):
            assert f"{section}.{key}='{value}'" in out, (key, out)
    h = json.loads((box.state_dir / "state.json").read_text())["hosts"]["sandbox1"]
    for path in h["ro_binds"]:      # e.g. /opt/wheels: visible inside, read-only
        rc, out, _ = box.run("sandbox1", f"test -e {path} && echo seen; "
                             f"touch {path}/x 2>/dev/null || echo read-only", user="root")
        assert out.split() == ["seen", "read-only"], path
    wheels = [p for p in h["ro_binds"] if os.path.isdir(p) and any(Path(p).glob("*.whl"))]
    if wheels:    # install from the machine's own wheel folder with no index at all
        wheel = min(Path(wheels[0]).glob("*.whl"), key=lambda p: p.stat().st_size)
        rc, out, err = box.run("sandbox1", f"/tmp/venv/bin/pip download --no-deps --no-index "
                               f"-d /tmp/dl {wheel} && ls /tmp/dl", timeout=120)
        assert rc == 0 and wheel.name in out, err


@needs_root
def test_up_again_reuses_or_refuses(box):
    lines = []
    assert sandbox.up(2, box.state_dir, progress=lines.append) == box.inventory
    assert any("already up" in line for line in lines)
    with pytest.raises(sandbox.SandboxError, match="down"):
        sandbox.up(3, box.state_dir, progress=lines.append)


@needs_root
def test_down_removes_every_mount_and_process(box):
    state = json.loads((box.state_dir / "state.json").read_text())
    statuses = sandbox.status(box.state_dir)
    pids = [s["init_pid"] for s in statuses] + [h["unshare_pid"] for h in state["hosts"].values()]
    assert all(sandbox.hosts.alive(p) for p in pids)
    state_path = str(box.state_dir.resolve())
    assert _all_mountinfo_mentioning(state_path), "expected the hosts' overlay mounts"
    assert _all_mountinfo_mentioning(state_path) and not [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if state_path in line], "mounts leaked into the machine's own mount namespace"
    _keep_logs(box.state_dir, box.logs)
    started = time.monotonic()
    sandbox.down(box.state_dir, progress=lambda line: None)
    took = time.monotonic() - started
    assert not [p for p in pids if sandbox.hosts.alive(p)]
    assert _all_mountinfo_mentioning(state_path) == []
    assert not box.state_dir.exists()
    for h in box.inv["hosts"].values():
        assert sandbox.hosts.port_free(h["address"], h["port"])
    sandbox.down(box.state_dir, progress=lambda line: None)     # idempotent
    print(f"sandbox down (2 hosts): {took:.2f} s")


@needs_root
def test_down_cleans_up_after_an_interrupted_up(tmp_path):
    state_dir = tmp_path / "interrupted"
    sandbox.up(1, state_dir, progress=lambda line: None)
    # As if `up` had been interrupted right after starting the host, before recording its PIDs.
    state_file = state_dir / "state.json"
    state = json.loads(state_file.read_text())
    pids = [state["hosts"]["sandbox1"]["unshare_pid"], sandbox.status(state_dir)[0]["init_pid"]]
    for h in state["hosts"].values():
        h["unshare_pid"] = h["init_pid"] = None
    (state_dir / "hosts/sandbox1/status.json").unlink()
    state_file.write_text(json.dumps(state))
    try:
        sandbox.down(state_dir, progress=lambda line: None)
        assert not [p for p in pids if sandbox.hosts.alive(p)]
        assert _all_mountinfo_mentioning(str(state_dir.resolve())) == []
        assert not state_dir.exists()
    finally:
        for pid in pids:
            if sandbox.hosts.alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_not_root_is_a_clear_error(tmp_path):
    """Without root: exit status 2 and a one-line message that says root is needed."""
    # The command line as users run it, with this checkout's code first on the path.
    cmd_tail = ["-m", "remote.sandbox", "up", "--hosts", "1", "--state", str(tmp_path / "state")]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    if os.geteuid() == 0:
        tmp_path.chmod(0o777)
        setpriv = shutil.which("setpriv")
        if not setpriv:
            pytest.skip("setpriv (util-linux) is needed to drop root")
        drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        # This machine's python may live under /root, which user 65534 cannot read.
        pythons = [p for p in (sys.executable, "/usr/bin/python3") if p and os.path.exists(p)]
        python = next((p for p in pythons if subprocess.run(
            drop + [p, "-c", "pass"], capture_output=True, timeout=30).returncode == 0), None)
        if python is None:
            pytest.skip("no python that user 65534 can run")
        cmd = drop + [python] + cmd_tail
    else:
        cmd = [sys.executable] + cmd_tail
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "needs root" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state").exists()


@needs_root
def test_shared_fixture_gives_working_hosts(sandbox_hosts):  # noqa: F811
    assert sandbox_hosts.inventory.is_file()
    assert sandbox_hosts.names == [f"sandbox{i + 1}" for i in range(len(sandbox_hosts.names))]
    for name in sandbox_hosts.names:
        rc, out, err = sandbox_hosts.run(name, "sudo -n cat /etc/hostname")
        assert (rc, out.strip()) == (0, name), err
