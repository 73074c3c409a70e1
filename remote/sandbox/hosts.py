"""Sandbox hosts' lifecycle: `up`, `down`, `status`, `restart`, `stop`, `start`, `boot_id`,
`wait_rebooted`, and the state folder they keep (state.json, inventory, known_hosts, keys).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from . import init
from .init import INIT_ARG, REBOOT_DOWN_S, SPAWN_ARG, atomic_write, listening, proc_starttime
from .machine import Progress, SandboxError, need_tool, require_root, safe_rmtree
from .rootfs import ADMIN_USER, DEFAULT_PACKAGES, create_host_files, ensure_rootfs

DEFAULT_STATE_DIR = Path(".sandbox")
DEFAULT_PORT = 2222


Host = Dict[str, Any]   # one host's record in state.json (also the init's init.json)
State = Dict[str, Any]  # state.json: {"hosts": {name: Host}}


def _read_json(path: Path) -> Optional[Dict[str, Any]]:
    """A JSON object from `path`; None when the file is missing, not JSON or not an object."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None



def _proc_cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


def alive(pid: Optional[int], starttime: Optional[int] = None) -> bool:
    if not pid:
        return False
    st = proc_starttime(pid)
    return st is not None and (starttime is None or st == starttime)


def _reap_if_child(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _wait_gone(pids: Iterable[int], timeout: float) -> List[int]:
    """Wait until every pid is gone (or a zombie); return those still alive."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left:
        for pid in left:
            _reap_if_child(pid)
        left = [p for p in left if proc_starttime(p) is not None]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return left


def port_free(address: str, port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# ----------------------------------------------------------------------------------------------
# state

class StatePaths:
    """The files of a state folder."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir).resolve()
        self.state = self.dir / "state.json"
        self.inventory = self.dir / "inventory.yaml"
        self.known_hosts = self.dir / "known_hosts"
        self.key = self.dir / "id_ed25519"
        self.hosts = self.dir / "hosts"
        self.lock = self.dir / ".lock"


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[StatePaths]:
    paths = StatePaths(state_dir)
    paths.dir.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield paths


def _load_state(paths: StatePaths) -> State:
    return _read_json(paths.state) or {"hosts": {}}


def _save_state(paths: StatePaths, state: State) -> None:
    atomic_write(paths.state, json.dumps(state, indent=1) + "\n")


def _host(state: State, name: str) -> Host:
    try:
        host: Host = state["hosts"][name]
        return host
    except KeyError:
        raise SandboxError(f"no sandbox host named {name!r} (have: "
                           f"{', '.join(state['hosts']) or 'none'})") from None


def _host_status(h: Host) -> Dict[str, Any]:
    return _read_json(Path(h["dir"]) / "status.json") or {}


def _host_running(h: Host) -> bool:
    return alive(h.get("unshare_pid"), h.get("unshare_start"))


def _our_processes(state_dir: Path) -> List[int]:
    """PIDs of inits/unshares of this state folder, found by command line (interrupted ups)."""
    needle = str(StatePaths(state_dir).hosts).encode() + b"/"
    mine = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            cmd = _proc_cmdline(int(entry))
            if INIT_ARG.encode() + b"\0" in cmd and needle in cmd:
                mine.append(int(entry))
    return mine


def _spawn(h: Host) -> None:
    """Start the host's init in new namespaces, detached from this process."""
    cfg = Path(h["dir"]) / "init.json"
    atomic_write(cfg, json.dumps(h, indent=1) + "\n")
    with contextlib.suppress(FileNotFoundError):
        (Path(h["dir"]) / "status.json").unlink()
    # The init runs as a script of its own (`python -I`: nothing from this environment), so a
    # host outlives this process and never imports gpuprov's code.
    r = subprocess.run([sys.executable, "-I", os.path.abspath(init.__file__), SPAWN_ARG, str(cfg),
                        need_tool("unshare", "util-linux")],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip().isdigit():
        raise SandboxError(f"could not start sandbox host {h['name']}: {r.stderr.strip()}")
    pid = int(r.stdout.strip())
    h["unshare_pid"], h["unshare_start"] = pid, proc_starttime(pid)


def _wait_ready(h: Host, old_boot: Optional[str], deadline: float) -> str:
    """Wait until the host's sshd answers with a boot_id other than `old_boot`."""
    console = Path(h["dir"]) / "console.log"
    while True:
        st = _host_status(h)
        if (st.get("state") == "running" and st.get("boot_id") != old_boot
                and listening(h["address"], h["port"])):
            return str(st["boot_id"])
        if not _host_running(h) or st.get("state") == "failed":
            text = console.read_text(errors="replace") if console.exists() else ""
            tail = text.splitlines()[-15:]
            raise SandboxError(f"sandbox host {h['name']} did not start; console:\n  "
                               + "\n  ".join(tail))
        if time.monotonic() > deadline:
            raise SandboxError(f"sandbox host {h['name']} did not answer on "
                               f"{h['address']}:{h['port']} in time (console: {console})")
        time.sleep(0.05)


def _write_access_files(paths: StatePaths, state: State) -> None:
    hosts = state["hosts"]
    atomic_write(paths.known_hosts, "".join(
        f"[{h['address']}]:{h['port']} {h['host_key']}\n" for h in hosts.values()))
    q = json.dumps   # a JSON string is a valid YAML scalar
    lines = ["# Written by `invoke sandbox up` (remote/sandbox/); removed by `sandbox down`.",
             "host_key_policy: strict", f"known_hosts: {q(str(paths.known_hosts))}", "hosts:"]
    for name, h in hosts.items():
        lines.append(f"  {name}: {{address: {h['address']}, port: {h['port']}, user: {h['user']}, "
                     f"identity_file: {q(str(paths.key))}, python: /usr/bin/python3}}")
    lines += ["groups:", f"  sandbox: {{hosts: [{', '.join(hosts)}]}}", ""]
    atomic_write(paths.inventory, "\n".join(lines))


def _stop_host(h: Host, timeout: float) -> None:
    """Power the host off: SIGTERM to its init (which ends every process), SIGKILL if needed."""
    init_pid, init_start = h.get("init_pid"), h.get("init_start")
    st = _host_status(h)
    if not init_pid and st.get("init_pid"):
        init_pid, init_start = st["init_pid"], st.get("init_start")
    pids: List[int] = []
    if init_pid and alive(init_pid, init_start):
        os.kill(init_pid, signal.SIGTERM)
        pids.append(init_pid)
    if alive(h.get("unshare_pid"), h.get("unshare_start")):
        pids.append(h["unshare_pid"])
    left = _wait_gone(pids, timeout)
    for pid in left:   # SIGKILL to a namespace's init ends every process in it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    left = _wait_gone(left, 10)
    if left:
        raise SandboxError(f"sandbox host {h['name']}: processes {left} did not exit")
    h["unshare_pid"] = h["init_pid"] = None


# ----------------------------------------------------------------------------------------------
# public API

def up(count: int = 2, state_dir: Path = DEFAULT_STATE_DIR, progress: Progress = print, *,
       user: str = ADMIN_USER, cache_dir: Optional[Path] = None,
       packages: Iterable[str] = DEFAULT_PACKAGES, base_port: int = DEFAULT_PORT,
       timeout: float = 60.0, offline: bool = False) -> Path:
    """Start `count` sandbox hosts (sandbox1..N); return the path of their inventory. With
    `offline`, each host has a network namespace of its own with no route out: it reaches
    nothing, and only its sshd is reached (init.py `Relay`).

    When this state folder's hosts are already up (the same count, all running), they are
    reused and said so; a different count, or a half-started set, is an error naming `down`.
    """
    require_root("up")
    if not 1 <= count <= 250:
        raise SandboxError(f"--hosts must be between 1 and 250, not {count}")
    if user not in ("root", ADMIN_USER):
        raise SandboxError(f"user must be root or {ADMIN_USER}, not {user!r}")
    need_tool("unshare", "util-linux")
    ssh_keygen = need_tool("ssh-keygen", "openssh-client")
    paths = StatePaths(state_dir)
    if re.search(r"[,:\s]", str(paths.dir)):
        raise SandboxError(f"the state folder path {paths.dir} may not contain ',', ':' or "
                           "spaces (overlayfs options cannot carry them)")
    with _locked(state_dir) as paths:
        state = _load_state(paths)
        running = [n for n, h in state["hosts"].items() if _host_running(h)]
        if running or _our_processes(paths.dir):
            if (len(state["hosts"]) == count and len(running) == count
                    and paths.inventory.exists()):
                progress(f"sandbox: {count} hosts already up ({', '.join(running)}); "
                         f"inventory {paths.inventory}")
                return paths.inventory
            raise SandboxError(
                f"a sandbox is already up in {paths.dir} ({len(state['hosts'])} hosts, "
                f"{len(running)} running); run `invoke sandbox down` first")
        if state["hosts"] or paths.hosts.exists():
            progress(f"sandbox: removing the stopped sandbox left in {paths.dir}")
            _down_locked(paths, progress, 20.0)
            state = {"hosts": {}}
        rootfs = ensure_rootfs(cache_dir, packages, progress)
        started = time.monotonic()
        if not paths.key.exists():
            for p in (paths.key, paths.key.with_suffix(".pub")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            subprocess.run([ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", "gpuprov-sandbox",
                            "-f", str(paths.key)], check=True, capture_output=True)
        client_pub = paths.key.with_suffix(".pub").read_text()
        try:
            return _start_hosts(paths, state, count, user, rootfs, client_pub, ssh_keygen,
                                base_port, timeout, progress, started, offline)
        except BaseException:
            progress("sandbox: start failed; stopping what was started")
            with contextlib.suppress(Exception):
                _down_locked(paths, progress, 10.0)
            raise


def _start_hosts(paths: StatePaths, state: State, count: int, user: str, rootfs: Path, client_pub: str,
                 ssh_keygen: str, base_port: int, timeout: float, progress: Progress,
                 started: float, offline: bool = False) -> Path:
    # One `up` at a time on this machine picks loopback addresses, until its sshds listen.
    with open(Path(tempfile.gettempdir()) / "gpuprov-sandbox-ports.lock", "w") as ports_lock:
        fcntl.flock(ports_lock, fcntl.LOCK_EX)
        taken: Set[str] = set()
        for i in range(1, count + 1):
            name = f"sandbox{i}"
            address, port = _pick_address(base_port, taken)
            taken.add(address)
            hdir = paths.hosts / name
            if hdir.exists():
                safe_rmtree(hdir)
            h = {"name": name, "address": address, "port": port, "user": user,
                 "dir": str(hdir), "rootfs": str(rootfs), "upper": str(hdir / "upper"),
                 "work": str(hdir / "work"), "merged": str(hdir / "root"),
                 "boot_id_file": str(hdir / "boot_id"), "reboot_down_s": REBOOT_DOWN_S,
                 "offline": offline}
            for d in ("upper", "work", "root"):
                (hdir / d).mkdir(parents=True)
            state["hosts"][name] = h
            _save_state(paths, state)      # recorded before anything runs, for `down`
            create_host_files(h, rootfs, client_pub, ssh_keygen)
            _spawn(h)
            _save_state(paths, state)
        deadline = time.monotonic() + timeout
        for h in state["hosts"].values():
            h["boot_id"] = _wait_ready(h, None, deadline)
            st = _host_status(h)
            h["init_pid"], h["init_start"] = st.get("init_pid"), st.get("init_start")
    _save_state(paths, state)
    _write_access_files(paths, state)
    progress(f"sandbox: {count} {'offline ' if offline else ''}hosts up in {time.monotonic() - started:.1f} s: "
             + ", ".join(f"{n} {h['user']}@{h['address']}:{h['port']}"
                         for n, h in state["hosts"].items()))
    progress(f"sandbox: inventory {paths.inventory}")
    return paths.inventory


def _pick_address(port: int, taken: Set[str]) -> Tuple[str, int]:
    for n in range(2, 255):
        address = f"127.0.0.{n}"
        if address in taken:
            continue
        for p in range(port, port + 20):
            if port_free(address, p):
                return address, p
    raise SandboxError(f"no free loopback address/port near {port}")


def down(state_dir: Path = DEFAULT_STATE_DIR, progress: Progress = print,
         timeout: float = 20.0) -> None:
    """Stop every sandbox host of this state folder and remove all it made. Idempotent."""
    require_root("down")
    paths = StatePaths(state_dir)
    if not paths.dir.exists():
        progress(f"sandbox: nothing to stop in {paths.dir}")
        return
    with _locked(state_dir) as paths:
        n = _down_locked(paths, progress, timeout)
        progress(f"sandbox: stopped {n} hosts, removed {paths.dir}")
    with contextlib.suppress(FileNotFoundError):
        paths.lock.unlink()
    with contextlib.suppress(OSError):
        paths.dir.rmdir()


def _down_locked(paths: StatePaths, progress: Progress, timeout: float) -> int:
    state = _load_state(paths)
    for h in state["hosts"].values():
        _stop_host(h, timeout)
    strays = _our_processes(paths.dir)   # e.g. an `up` interrupted before it saved a PID
    for pid in strays:
        progress(f"sandbox: stopping process {pid} that no state file recorded")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    left = _wait_gone(strays, timeout)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if _wait_gone(left, 10):
        raise SandboxError(f"sandbox processes {left} did not exit")
    safe_rmtree(paths.hosts)
    for path in (paths.inventory, paths.known_hosts, paths.key, paths.state):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    with contextlib.suppress(FileNotFoundError):
        paths.key.with_suffix(".pub").unlink()
    return len(state["hosts"])


def status(state_dir: Path = DEFAULT_STATE_DIR) -> List[Dict[str, Any]]:
    """One dict per host: name, address, port, user, running, state, boot_id, boots."""
    state = _load_state(StatePaths(state_dir))
    out = []
    for name, h in state["hosts"].items():
        st = _host_status(h)
        running = _host_running(h)
        out.append({"name": name, "address": h["address"], "port": h["port"], "user": h["user"],
                    "running": running, "state": st.get("state") if running else "stopped",
                    "boot_id": st.get("boot_id") if running else None,
                    "boots": st.get("boots", 0), "init_pid": st.get("init_pid")})
    return out


def boot_id(state_dir: Path, name: str) -> Optional[str]:
    """The host's current boot_id (what it reads at /proc/sys/kernel/random/boot_id)."""
    h = _host(_load_state(StatePaths(state_dir)), name)
    try:
        return Path(h["boot_id_file"]).read_text().strip()
    except FileNotFoundError:
        return None


def restart(state_dir: Path, name: str, timeout: float = 60.0) -> str:
    """Reboot one host (as `reboot` inside it does); return its new boot_id once sshd answers."""
    require_root("restart")
    with _locked(state_dir) as paths:
        h = _host(_load_state(paths), name)
        st = _host_status(h)
        if not _host_running(h) or not alive(st.get("init_pid"), st.get("init_start")):
            raise SandboxError(f"sandbox host {name} is not running (use start)")
        os.kill(st["init_pid"], signal.SIGHUP)
        return _wait_ready(h, st.get("boot_id"), time.monotonic() + timeout)


def wait_rebooted(state_dir: Path, name: str, old_boot_id: str, timeout: float = 60.0) -> str:
    """Wait until a host rebooted from inside answers again with a new boot_id; return it."""
    h = _host(_load_state(StatePaths(state_dir)), name)
    return _wait_ready(h, old_boot_id, time.monotonic() + timeout)


def stop(state_dir: Path, name: str, timeout: float = 20.0) -> None:
    """Power one host off (its disk, the overlay, is kept)."""
    require_root("stop")
    with _locked(state_dir) as paths:
        state = _load_state(paths)
        _stop_host(_host(state, name), timeout)
        _save_state(paths, state)


def start(state_dir: Path, name: str, timeout: float = 60.0) -> str:
    """Power a stopped host on again (same disk, new boot_id); return the new boot_id."""
    require_root("start")
    with _locked(state_dir) as paths:
        state = _load_state(paths)
        h = _host(state, name)
        if _host_running(h):
            raise SandboxError(f"sandbox host {name} is already running")
        if not port_free(h["address"], h["port"]):
            raise SandboxError(f"cannot start {name}: {h['address']}:{h['port']} is in use")
        old = h.get("boot_id")
        _spawn(h)
        _save_state(paths, state)
        h["boot_id"] = _wait_ready(h, old, time.monotonic() + timeout)
        st = _host_status(h)
        h["init_pid"], h["init_start"] = st.get("init_pid"), st.get("init_start")
        _save_state(paths, state)
        return str(h["boot_id"])


