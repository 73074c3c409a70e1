"""The sandbox host's init: PID 1 of the host's own PID namespace, and the spawner that starts
it detached. This file runs on its own as a script (``python3 -I init.py _spawn CFG UNSHARE``,
then ``... init.py _run-init CFG`` under unshare), so it uses only the standard library and
imports nothing of remote/; `hosts` imports the few helpers it shares with the init from here.

The init mounts the host's overlay, /proc, /sys and a minimal /dev in its own mount namespace,
starts sshd in a nested mount namespace pivoted into the overlay with a reduced capability
bounding set, restarts sshd when it dies, reboots on SIGHUP and powers off on SIGINT/SIGTERM
(see the package docstring for the whole picture). Its state goes to ``status.json``.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import platform
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, List, Optional

REBOOT_DOWN_S = 1.0     # how long a rebooting host stays unreachable
INIT_ARG = "_run-init"
SPAWN_ARG = "_spawn"
# An offline host's listening socket, made in the machine's network namespace by the spawner
# and inherited by the init (its number in this variable): see `Relay`.
LISTEN_FD_VAR = "GPUPROV_SANDBOX_LISTEN_FD"
# <linux/sockios.h>, <net/if.h>: read and set an interface's flags (struct ifreq: a 16-byte
# name, then a union of 24 bytes whose first member is the short ifr_flags).
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sh22x"


def loopback_up() -> None:
    """Bring `lo` up in this (new, empty) network namespace, as `ip link set lo up` does."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack(IFREQ, fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


class Relay:
    """An offline host's only link: its init runs in a network namespace of its own, holding
    nothing but `lo` (`unshare --net`), so no route leads out of it. The init inherits one
    listening socket made in the machine's namespace on the host's address and port; each
    connection to it is joined to the host's sshd, which listens on the same address inside.
    Nothing else crosses: from inside, every address but the host's own loopback is
    unreachable, the control machine's too."""

    def __init__(self, fd: int, address: str, port: int, log: Any):
        self.listener = socket.socket(fileno=fd)
        self.target = (address, port)
        self.log = log

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                outside, _ = self.listener.accept()
            except OSError as e:
                self.log(f"relay: accept failed: {e}")
                time.sleep(0.5)
                continue
            threading.Thread(target=self._join, args=(outside,), daemon=True).start()

    def _join(self, outside: socket.socket) -> None:
        try:
            inside = socket.create_connection(self.target, timeout=5)
        except OSError:
            outside.close()   # sshd is down (a reboot): the client sees the connection close
            return
        inside.settimeout(None)
        pump = threading.Thread(target=self._pump, args=(inside, outside), daemon=True)
        pump.start()
        self._pump(outside, inside)
        pump.join()
        outside.close()
        inside.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


# Capabilities a sandbox login keeps (bounding set). Everything else, CAP_SYS_BOOT (22) and
# CAP_SYS_ADMIN (21) among them, is dropped. Numbers from <linux/capability.h>.
KEEP_CAPS = {
    0: "chown", 1: "dac_override", 3: "fowner", 4: "fsetid", 5: "kill", 6: "setgid",
    7: "setuid", 8: "setpcap", 10: "net_bind_service", 18: "sys_chroot", 29: "audit_write",
    31: "setfcap",
}
CAP_SYS_BOOT = 22


def atomic_write(path: Path, data: str, mode: int = 0o644) -> None:
    """Write `path` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def proc_starttime(pid: int) -> Optional[int]:
    """Start time of `pid` in clock ticks since boot, or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])



def listening(address: str, port: int) -> bool:
    """True when a TCP socket listens on address:port in this network namespace.

    Read from /proc/net/tcp rather than by connecting, which sshd would log as a failed login.
    """
    want = "%08X:%04X" % (int.from_bytes(socket.inet_aton(address), "little"), port)
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            return any(line.split()[1] == want and line.split()[3] == "0A" for line in f)
    except OSError:
        return _ssh_banner(address, port)


def _ssh_banner(address: str, port: int, timeout: float = 1.0) -> bool:
    """True when an SSH server answers on address:port."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False



MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
CLONE_NEWNS = 0x00020000
PR_CAPBSET_DROP = 24
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217,
                  "armv7l": 218, "i686": 217}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _b(s: Optional[str]) -> Optional[bytes]:
    return s.encode() if s is not None else None


def _mount(src: Optional[str], target: str, fstype: Optional[str], flags: int = 0,
           data: Optional[str] = None) -> None:
    _check(_libc.mount(_b(src), _b(target), _b(fstype), flags, _b(data)),
           f"mount {src or fstype} on {target}")


def _umount(target: str) -> None:
    _check(_libc.umount2(_b(target), MNT_DETACH), f"umount {target}")


def _ro_bind(src: str, target: str, extra: int = MS_NOSUID | MS_NODEV) -> None:
    _mount(src, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | extra)


def _ro_tmpfs(target: str, subdirs: Iterable[str] = ()) -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=64k")
    for d in subdirs:
        os.mkdir(os.path.join(target, d))
    _mount(None, target, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
           "mode=755,size=64k")


class Init:
    """PID 1 of one host: mounts, boots sshd, then waits for signals (see the module docstring).
    `cfg_path` is the host's init.json, written by `hosts`."""

    def __init__(self, cfg_path: str):
        self.cfg = json.loads(Path(cfg_path).read_text())
        self.dir = Path(self.cfg["dir"])
        self.m = self.cfg["merged"]
        self.sshd: Optional[int] = None
        self.boots = 0
        self.sshd_restarts: List[float] = []
        # Our PID as the machine sees it: /proc here is still the machine's procfs.
        self.host_pid = int(os.readlink("/proc/self"))
        self.host_start = proc_starttime(self.host_pid)
        self.status("starting")

    def log(self, msg: str) -> None:
        print(f"[init {self.cfg['name']} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr,
              flush=True)

    def status(self, state: str, **extra: Any) -> None:
        data = {"state": state, "init_pid": self.host_pid, "init_start": self.host_start,
                "boots": self.boots, "boot_id": self._boot_id(), "time": time.time(), **extra}
        atomic_write(self.dir / "status.json", json.dumps(data) + "\n")

    def _boot_id(self) -> Optional[str]:
        try:
            return Path(self.cfg["boot_id_file"]).read_text().strip()
        except FileNotFoundError:
            return None

    def p(self, rel: str) -> str:
        return os.path.join(self.m, rel.lstrip("/"))

    def mount_all(self) -> None:  # noqa: C901  one straight sequence of mounts, in the order the host needs them; the branches only skip paths a kernel lacks
        c, m = self.cfg, self.m
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        try:
            _mount("overlay", m, "overlay", 0,
                   f"lowerdir={c['rootfs']},upperdir={c['upper']},workdir={c['work']}")
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror} (overlayfs needs an upper folder on a local "
                          "filesystem such as ext4 or xfs, not on overlayfs, tmpfs may work)") from e
        socket.sethostname(c["name"])
        # /proc: this PID namespace's own, with the dangerous parts read-only or masked.
        _mount("proc", self.p("proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for rel in ("proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/fs"):
            if os.path.exists(self.p(rel)):
                _ro_bind(self.p(rel), self.p(rel), MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for rel in ("proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug",
                    "proc/latency_stats", "proc/kmsg"):
            if os.path.exists(self.p(rel)):
                _ro_bind("/dev/null", self.p(rel))
        for rel in ("proc/bus", "proc/acpi", "proc/scsi", "proc/asound", "proc/driver"):
            if os.path.isdir(self.p(rel)):
                _ro_tmpfs(self.p(rel))
        bid = c["boot_id_file"]
        Path(bid).write_text(str(uuid.uuid4()) + "\n")
        _ro_bind(bid, self.p("proc/sys/kernel/random/boot_id"))
        # /sys: read-only, no PCI devices (no GPU), no firmware interfaces.
        _mount("sysfs", self.p("sys"), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if os.path.isdir(self.p("sys/bus/pci")):
            _ro_tmpfs(self.p("sys/bus/pci"), ("devices", "drivers", "slots"))
        for rel in ("sys/firmware", "sys/devices/virtual/powercap", "sys/kernel/security",
                    "sys/kernel/debug"):
            if os.path.isdir(self.p(rel)):
                _ro_tmpfs(self.p(rel))
        # /dev: only harmless character devices; no disks.
        dev = self.p("dev")
        _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=1m")
        for node, (major, minor) in {"null": (1, 3), "zero": (1, 5), "full": (1, 7),
                                     "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}.items():
            path = os.path.join(dev, node)
            try:
                os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))
                os.chmod(path, 0o666)
            except PermissionError:
                Path(path).touch()
                _mount(f"/dev/{node}", path, None, MS_BIND)
        for d in ("pts", "shm"):
            os.mkdir(os.path.join(dev, d))
        _mount("devpts", os.path.join(dev, "pts"), "devpts", MS_NOSUID | MS_NOEXEC,
               "newinstance,ptmxmode=0666,mode=0620,gid=5")
        os.symlink("pts/ptmx", os.path.join(dev, "ptmx"))
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
            os.symlink(target, os.path.join(dev, name))
        # The machine's package folders that pip's configuration names, read-only.
        for src in c.get("ro_binds", []):
            dst = self.p(src)
            if os.path.isdir(src):
                os.makedirs(dst, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                Path(dst).touch()
            _ro_bind(src, dst)

    def boot(self) -> None:
        """Fresh /run and /dev/shm, a new boot_id, sshd."""
        self.boots += 1
        for rel, opts in (("run", "mode=755,size=64m"), ("dev/shm", "mode=1777")):
            with contextlib.suppress(OSError):
                while True:   # previous boot's mount, if any
                    _umount(self.p(rel))
            _mount("tmpfs", self.p(rel), "tmpfs", MS_NOSUID | MS_NODEV, opts)
        os.mkdir(self.p("run/sshd"), 0o755)
        os.mkdir(self.p("run/lock"), 0o1777)
        os.chmod(self.p("run/lock"), 0o1777)
        if self.boots > 1:   # the first boot_id was written before it was bind-mounted
            with open(self.cfg["boot_id_file"], "w") as f:   # in place: the bind follows the inode
                f.write(str(uuid.uuid4()) + "\n")
        self.start_sshd()
        deadline = time.monotonic() + 10
        while not listening(self.cfg["address"], self.cfg["port"]):
            if time.monotonic() > deadline or self.reap_sshd_exited():
                self.log("sshd did not start listening")
                break
            time.sleep(0.02)
        self.log(f"boot {self.boots}: boot_id {self._boot_id()}, sshd pid {self.sshd}")
        self.status("running")

    def start_sshd(self) -> None:
        merged = self.m
        arch = platform.machine()
        last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())

        def enter_root() -> None:   # runs in the child, between fork and exec
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                _check(_libc.unshare(CLONE_NEWNS), "unshare")
                _mount(None, "/", None, MS_REC | MS_PRIVATE)
                os.chdir(merged)
                if arch in SYS_PIVOT_ROOT:
                    # The overlay becomes "/" and the machine's root is detached entirely.
                    _check(_libc.syscall(SYS_PIVOT_ROOT[arch], b".", b"."), "pivot_root")
                    _umount(".")
                else:
                    os.chroot(".")
                os.chdir("/")
                for cap in range(last_cap + 1):
                    if cap not in KEEP_CAPS:
                        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop cap {cap}")
            except BaseException as e:
                os.write(2, f"sandbox init: cannot enter the host's root: {e}\n".encode())
                raise

        argv = ["/usr/sbin/sshd", "-D", "-e", "-f", "/etc/ssh/sshd_config", "-p",
                str(self.cfg["port"]), "-o", f"ListenAddress={self.cfg['address']}"]
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "LANG": "C.UTF-8"}
        proc = subprocess.Popen(argv, env=env, preexec_fn=enter_root, stdin=subprocess.DEVNULL,
                                close_fds=True)
        self.sshd = proc.pid
        proc.returncode = 0   # we reap it ourselves (waitpid(-1)); keep Popen from trying
        self.sshd_alive = True

    def reap(self) -> bool:
        """Reap every exited child; return True when sshd was among them."""
        sshd_died = False
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == self.sshd:
                sshd_died = True
                self.sshd_alive = False
        return sshd_died

    def reap_sshd_exited(self) -> bool:
        self.reap()
        return not self.sshd_alive

    def kill_all(self, grace: float = 2.0) -> None:
        """End every other process in this PID namespace: SIGTERM, then SIGKILL."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    self.sshd_alive = False
                    return
                if pid == 0:
                    time.sleep(0.02)
        self.sshd_alive = False

    def run(self) -> int:
        fd = os.environ.pop(LISTEN_FD_VAR, "")
        if fd.isdigit():   # an offline host: see `Relay`
            loopback_up()
        watched = {signal.SIGCHLD, signal.SIGHUP, signal.SIGINT, signal.SIGTERM}
        for s in watched:   # a handler (not SIG_DFL), so signals from inside reach PID 1
            signal.signal(s, lambda *_: None)
        signal.pthread_sigmask(signal.SIG_BLOCK, watched)   # threads started now inherit it
        if fd.isdigit():
            Relay(int(fd), self.cfg["address"], self.cfg["port"], self.log).start()
        try:
            self.mount_all()
            self.boot()
        except Exception as e:
            self.log(f"failed: {e}")
            self.status("failed", error=str(e))
            self.kill_all(0.5)
            return 1
        while True:
            info = signal.sigtimedwait(watched, 1.0)
            sig = info.si_signo if info else None
            if self.reap() and sig not in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
                now = time.monotonic()
                self.sshd_restarts = [t for t in self.sshd_restarts if now - t < 60] + [now]
                if len(self.sshd_restarts) > 10:
                    self.log("sshd keeps dying; giving up")
                    self.status("failed", error="sshd keeps dying")
                    self.kill_all()
                    return 1
                self.log("sshd exited; restarting it in 1 s")
                self.status("restarting-sshd")
                time.sleep(1)
                self.start_sshd()
                self.status("running")
            if sig == signal.SIGHUP:
                self.log("reboot requested")
                self.status("rebooting")
                time.sleep(0.3)   # let the command that asked for it return, as a real one does
                self.kill_all()
                time.sleep(self.cfg.get("reboot_down_s", REBOOT_DOWN_S))
                try:
                    self.boot()
                except Exception as e:
                    self.log(f"reboot failed: {e}")
                    self.status("failed", error=str(e))
                    return 1
            elif sig in (signal.SIGINT, signal.SIGTERM):
                self.log("power off" if sig == signal.SIGINT else "stop requested")
                self.status("stopping")
                self.kill_all()
                self.status("stopped")
                return 0


def spawn(cfg: str, unshare: str) -> int:
    """Start `unshare ... <this file> _run-init CFG` in its own session; print its PID."""
    h = json.loads(Path(cfg).read_text())
    log = open(Path(h["dir"]) / "console.log", "a")
    net: List[str] = []
    env = dict(os.environ)
    keep: "tuple[int, ...]" = ()
    if h.get("offline"):
        # the host's one way in, made here in the machine's namespace (see `Relay`)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((h["address"], h["port"]))
        listener.listen(64)
        net, keep = ["--net"], (listener.fileno(),)
        env[LISTEN_FD_VAR] = str(listener.fileno())
    cmd = [unshare, "--mount", "--propagation", "private", "--pid", *net,
           "--uts", "--ipc", "--fork", "--kill-child", "--",
           sys.executable, "-I", os.path.abspath(__file__), INIT_ARG, cfg]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                         start_new_session=True, close_fds=True, pass_fds=keep, cwd="/")
    print(p.pid)
    return 0



def main(argv: Optional[List[str]] = None) -> int:
    """The script's entry: ``_spawn CFG UNSHARE`` or ``_run-init CFG``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == SPAWN_ARG:
        return spawn(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == INIT_ARG:
        return Init(argv[1]).run()
    print(f"usage: {sys.argv[0]} {SPAWN_ARG} CFG UNSHARE | {INIT_ARG} CFG "
          "(started by remote.sandbox, not by hand)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
