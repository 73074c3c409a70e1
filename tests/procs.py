"""Test helpers for faults: processes seen through /proc, a TCP server that never speaks SSH,
and a child process's peak memory.

Everything here acts on processes by PID, and only on processes a test started or that serve a
session the test opened.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path


def sigint_as_in_a_terminal() -> None:
    """`preexec_fn` for a process a test will stop with SIGINT: SIGINT's default disposition, as
    a terminal's foreground job has. A shell without job control starts `cmd &` with SIGINT
    ignored (https://www.gnu.org/software/bash/manual/html_node/Signals.html), children inherit
    that, and Python then installs no KeyboardInterrupt handler
    (https://docs.python.org/3/library/signal.html, "if the parent process has not changed it"):
    without this, the suite run as a background job sends a SIGINT that nobody sees. gpuprov
    itself keeps an ignored SIGINT, as Unix programs do: whoever started it that way shielded it
    from Ctrl-C on purpose (SIGTERM still stops it the same way)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def parent_of(pid: int) -> int | None:
    """The parent PID of `pid`, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'
    return int(stat.rsplit(")", 1)[1].split()[1])


def comm_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children_of(pid: int) -> list:
    """Direct children of `pid`, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and parent_of(int(entry)) == pid:
            out.append(int(entry))
    return out


def descendants_of(pid: int) -> list:
    found, todo = [], [pid]
    while todo:
        for child in children_of(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def session_servers(listener_pid: int, command_pid: int) -> list:
    """The sshd processes between a farm's listening sshd and a command it runs for a session.

    Walks up from the command to the listener: those are the processes serving that one session
    (OpenSSH's per-connection monitor and the user's unprivileged child), nothing else.
    """
    chain, pid = [], parent_of(command_pid)
    while pid and pid != listener_pid:
        if comm_of(pid).startswith("sshd"):
            chain.append(pid)
        pid = parent_of(pid)
    if pid != listener_pid:
        raise RuntimeError(f"process {command_pid} is not served by sshd {listener_pid}")
    return chain


def kill_pids(pids, sig=signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def wait_until(predicate, within: float) -> bool:
    """True as soon as `predicate()` is, False when `within` seconds pass first."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def wait_for_file(path: Path, within: float) -> bool:
    return wait_until(lambda: path.exists() and path.stat().st_size > 0, within)


class SilentServer:
    """Accepts TCP connections on ADDRESS:PORT and never sends a byte (no SSH banner)."""

    def __init__(self, address: str, port: int):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.accepted: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted.append(conn)  # held open, silent, until close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


# Runs argv[2:] and writes "<peak RSS in KiB> <exit status>" to argv[1]. A small process of its
# own between the test and the command: a child's ru_maxrss includes the memory of the process
# it was forked from, counted at exec (Linux's exec_mmap keeps the old mm's high-water mark), so a
# command forked from a large pytest process would report pytest's size (2.6 GiB late in the
# suite), not its own. The command dies with the launcher (PR_SET_PDEATHSIG, prctl(2)).
_LAUNCHER = """
import ctypes, os, signal, subprocess, sys
def die_with_launcher():
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
proc = subprocess.Popen(sys.argv[2:], preexec_fn=die_with_launcher)
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], 'w') as handle:
    handle.write('%d %d' % (usage.ru_maxrss, os.waitstatus_to_exitcode(status)))
"""


def run_measured(argv, env=None, cwd=None, timeout: float = 60.0) -> tuple:
    """Run `argv`; return (rc, stdout, stderr, seconds, peak RSS in MiB) of that one command
    (and the children it waited for), measured by a small launcher (_LAUNCHER)."""
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="gpuprov-measured-", delete=False) as handle:
        measured = Path(handle.name)
    try:
        rc, out, err, elapsed = _run_launched([sys.executable, "-c", _LAUNCHER, str(measured), *argv],
                                              env, cwd, timeout)
        fields = measured.read_text().split()
    finally:
        measured.unlink(missing_ok=True)
    if len(fields) != 2:  # the launcher was killed (the timeout): no figure
        return rc, out, err, elapsed, float("inf")
    return int(fields[1]), out, err, elapsed, int(fields[0]) / 1024


def _run_launched(argv, env, cwd, timeout: float) -> tuple:
    """Run `argv` with its output drained; (rc, stdout, stderr, seconds), killed by PID past
    `timeout`."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=out_w, stderr=err_w, env=env, cwd=cwd)
    os.close(out_w)
    os.close(err_w)
    chunks = {out_r: [], err_r: []}

    def drain(fd):
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            chunks[fd].append(data)
        os.close(fd)

    readers = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in chunks]
    for reader in readers:
        reader.start()
    timer = threading.Timer(timeout, lambda: kill_pids([proc.pid]))
    timer.start()
    try:
        proc.wait()
    finally:
        timer.cancel()
    elapsed = time.monotonic() - started
    for reader in readers:
        reader.join(5)
    text = {fd: b"".join(parts).decode("utf-8", "replace") for fd, parts in chunks.items()}
    return proc.returncode, text[out_r], text[err_r], elapsed


_HWM_WRAPPER = """
import atexit, runpy, sys
out = sys.argv[1]
def report():
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith('VmHWM:'):
                with open(out, 'w') as handle:
                    handle.write(line.split()[1])
atexit.register(report)
sys.argv = sys.argv[2:]
runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
"""


def run_python_module_measured(module: str, args, hwm_file: Path, **kwargs) -> tuple:
    """`python -m MODULE ARGS` through `run_measured`, but with the peak RSS of the Python
    program itself (VmHWM at exit, which starts afresh at exec) instead of wait4's ru_maxrss,
    which also counts the pre-exec copy of this (large) test process."""
    import sys

    rc, out, err, seconds, _ = run_measured(
        [sys.executable, "-c", _HWM_WRAPPER, str(hwm_file), module, *args], **kwargs)
    peak = int(hwm_file.read_text()) / 1024 if hwm_file.exists() else float("inf")
    return rc, out, err, seconds, peak
