"""Throwaway local Debian 12 hosts ("sandbox hosts") for trying recipes and for the tests.

Each sandbox host is a fresh Debian 12 (bookworm) machine on this computer, reachable over SSH on
a loopback address::

    from remote import sandbox
    inventory = sandbox.up(2)          # -> Path('.sandbox/inventory.yaml'), hosts sandbox1..2
    sandbox.status(Path('.sandbox'))   # [{'name': 'sandbox1', 'running': True, ...}, ...]
    sandbox.restart(Path('.sandbox'), 'sandbox1')   # same as `sudo reboot` inside it
    sandbox.down()                     # stops everything, removes every mount and overlay

Command line (the Invoke task `invoke sandbox up|down [--hosts N]` calls the same functions)::

    python3 -m remote.sandbox up [--hosts N] [--state DIR] [--user admin|root]
    python3 -m remote.sandbox down | status | restart NAME | stop NAME | start NAME   [--state DIR]

API: ``up(count=2, state_dir=Path('.sandbox'), progress=print, *, user='admin', cache_dir=None,
packages=DEFAULT_PACKAGES, base_port=2222, timeout=60) -> Path`` (the inventory),
``down(state_dir, progress=print, timeout=20)``, ``status(state_dir) -> list[dict]``,
``restart(state_dir, name, timeout=60) -> str`` (new boot_id), ``stop(state_dir, name)``,
``start(state_dir, name, timeout=60) -> str``, ``boot_id(state_dir, name)``,
``wait_rebooted(state_dir, name, old_boot_id, timeout=60) -> str``,
``ensure_rootfs(cache_dir=None, packages=DEFAULT_PACKAGES, progress=print) -> Path``.
Errors are `SandboxError`, with a message for the user. Everything but `status` and `boot_id`
needs root; without it they raise `NotRootError` (a `SandboxError`), and the command line
prints the message and exits with status 2.

How a host is made
------------------
* Root filesystem: ``debootstrap --variant=minbase --include=<DEFAULT_PACKAGES> bookworm``, built
  once and cached in ``~/.cache/gpuprov/rootfs-bookworm-<hash>`` (``$GPUPROV_SANDBOX_CACHE``
  overrides the folder; the hash covers the package list, architecture and build steps). It is
  built into a temporary folder and renamed when complete, so an interrupted build never leaves
  a half cache. The build itself runs in its own mount and PID namespace without CAP_SYS_BOOT.
  The mirror is the one this machine's apt uses for bookworm (``/etc/apt/sources.list*``),
  or ``$GPUPROV_SANDBOX_MIRROR``.
* Per host, under the state folder (default ``.sandbox/``): an overlay (lower = the cached
  rootfs, upper/work = ``hosts/<name>/upper``, ``work``), so every host starts fresh and keeps
  what recipes change across reboots until `down`. Written into the upper layer when the host
  is created: a generated ed25519 host key, an sshd drop-in config, the client key in
  ``/root/.ssh/authorized_keys`` and ``/home/admin/.ssh/authorized_keys``, hostname, /etc/hosts,
  machine-id, resolv.conf, this machine's apt sources and apt proxy settings, this machine's pip
  configuration (``/etc/pip.conf`` merged with ``PIP_*`` variables; folders it names outside
  /etc, such as ``/opt/wheels`` or ``file:///opt/pypi/simple``, are bind-mounted read-only at
  the same path), and the reboot/shutdown shims in ``/usr/local/sbin``.
* Users: ``root`` and ``admin`` (passwordless sudo, like Debian's cloud images) both accept the
  generated key; the inventory logs in as ``admin`` unless ``up(user='root')``.
* Process: ``unshare --mount --pid --uts --ipc --fork`` starts this file's init (``_run-init``) as
  PID 1 of a new PID namespace. The init mounts the overlay, a new /proc, a read-only sysfs, a
  minimal /dev (null, zero, full, random, urandom, tty, devpts, shm), tmpfs /run, all inside its
  own mount namespace (so they vanish with it), and starts ``/usr/sbin/sshd -D -e -f
  /etc/ssh/sshd_config -p PORT -o ListenAddress=127.0.0.N``. sshd is started in a nested mount
  namespace whose root is pivoted to the overlay (the machine's own root is detached: not a
  chroot that can be climbed out of), with a reduced capability bounding set: CAP_SYS_BOOT,
  CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_NET_ADMIN, CAP_MKNOD, CAP_SYS_TIME and the
  rest are gone (only ``KEEP_CAPS`` remain, much like a container's default set). Everything a
  login runs inherits that set. The network namespace is the machine's own: hosts listen on
  127.0.0.N (N = 2, 3, ...), port 2222 by default; no interface or route is ever created.
* Safety: inside, ``/proc/sys``, ``/proc/sysrq-trigger``, ``/proc/irq`` and ``/proc/fs`` are
  read-only, ``/proc/kcore`` and friends are masked, sysfs is read-only, and no block device
  exists in /dev. `reboot(2)` in a child PID namespace only ends that namespace, and without
  CAP_SYS_BOOT it is refused anyway. ``kill -9 -1`` reaches only the host's own processes.
  PCI devices are hidden (``lspci`` lists nothing), so a sandbox host never has a GPU, even on
  a machine that has one.
* boot_id and reboot: each (re)boot writes a fresh UUID to ``hosts/<name>/boot_id``, which is
  bind-mounted (read-only) over ``/proc/sys/kernel/random/boot_id`` inside. ``reboot``,
  ``shutdown -r``, ``poweroff``, ``halt`` inside are shims that signal the host's init (PID 1):
  SIGHUP reboots (every process of the host is ended, /run and /dev/shm are fresh, sshd comes
  back with a new boot_id after ``REBOOT_DOWN_S``), SIGINT powers the host off (`start` brings
  it back). The same signals are what the kernel sends when something calls reboot(2) in a
  PID namespace. An sshd that dies unexpectedly (``kill -9 -1``) is restarted after 1 s.

State folder layout: ``state.json`` (hosts, addresses, PIDs), ``inventory.yaml``,
``known_hosts`` (``[127.0.0.N]:PORT ssh-ed25519 ...``, written atomically), ``id_ed25519``
(+ ``.pub``), and ``hosts/<name>/`` (upper, work, root, boot_id, status.json, console.log).
`down` ends every process it started (found by PID and start time, and by its command line
naming this state folder, so an interrupted `up` is cleaned up too), waits until each host's
namespaces are gone, and removes the state folder. It is idempotent.

This module uses only the standard library, because it also runs as a script (the init).
"""
from __future__ import annotations

import argparse
import configparser
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
# What a recipe can expect on a fresh sandbox host, on top of debootstrap's minbase.
DEFAULT_PACKAGES = (
    "openssh-server", "python3", "python3-venv", "python3-pip", "sudo", "ca-certificates",
    "iproute2", "procps", "pciutils", "kmod", "gnupg", "curl", "wget", "xz-utils",
)
# Bump when the build steps change, so an old cache is not reused.
ROOTFS_RECIPE_VERSION = 1
DEFAULT_STATE_DIR = Path(".sandbox")
DEFAULT_PORT = 2222
ADMIN_USER = "admin"
REBOOT_DOWN_S = 1.0     # how long a rebooting host stays unreachable
BUILD_TIMEOUT_S = 1800
INIT_ARG = "_run-init"
SPAWN_ARG = "_spawn"

# Capabilities a sandbox login keeps (bounding set). Everything else, CAP_SYS_BOOT (22) and
# CAP_SYS_ADMIN (21) among them, is dropped. Numbers from <linux/capability.h>.
KEEP_CAPS = {
    0: "chown", 1: "dac_override", 3: "fowner", 4: "fsetid", 5: "kill", 6: "setgid",
    7: "setuid", 8: "setpcap", 10: "net_bind_service", 18: "sys_chroot", 29: "audit_write",
    31: "setfcap",
}
CAP_SYS_BOOT = 22

Progress = Callable[[str], None]


class SandboxError(Exception):
    """Something the sandbox cannot do, with a message meant for the user."""


class NotRootError(SandboxError):
    """The sandbox was asked to do something that needs root, and this process is not root."""


# ----------------------------------------------------------------------------------------------
# small helpers

def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NotRootError(
            f"sandbox {what} needs root (it mounts overlay filesystems and creates namespaces); "
            f"run it as root, e.g. `sudo invoke sandbox {what}`")


def _atomic_write(path: Path, data: str, mode: int = 0o644) -> None:
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


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _proc_starttime(pid: int) -> Optional[int]:
    """Start time of `pid` in clock ticks since boot, or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _proc_cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


def _alive(pid: Optional[int], starttime: Optional[int] = None) -> bool:
    if not pid:
        return False
    st = _proc_starttime(pid)
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
        left = [p for p in left if _proc_starttime(p) is not None]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return left


def _port_free(address: str, port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _listening(address: str, port: int) -> bool:
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


def _mounts_under(path: Path) -> List[str]:
    """Mount points at or below `path` in this process's mount namespace."""
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == prefix or mnt.startswith(prefix + "/"):
                found.append(mnt)
    return found


def _safe_rmtree(path: Path) -> None:
    """Remove a folder this module made, refusing when something is mounted inside it."""
    if not path.exists() and not path.is_symlink():
        return
    mounted = _mounts_under(path)
    if mounted:
        raise SandboxError(f"refusing to remove {path}: still mounted there: {', '.join(mounted)}")
    shutil.rmtree(path)


def _dpkg_arch() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                              text=True).stdout.strip()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "ppc64le": "ppc64el",
            "s390x": "s390x", "riscv64": "riscv64"}.get(platform.machine(), platform.machine())


def _need_tool(name: str, package: str) -> str:
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None)
    if not path:
        raise SandboxError(f"`{name}` not found: install it with `apt-get install -y {package}`")
    return path


# ----------------------------------------------------------------------------------------------
# this machine's apt and pip configuration

def host_apt_sources() -> Dict[str, str]:
    """The bookworm mirror and security mirror this machine's apt uses (or Debian's defaults).

    ``$GPUPROV_SANDBOX_MIRROR`` overrides the main mirror.
    """
    main = sec = None
    entries = []  # (uri, suites)
    paths = [Path("/etc/apt/sources.list")] + sorted(Path("/etc/apt/sources.list.d").glob("*"))
    for p in paths:
        try:
            text = p.read_text()
        except OSError:
            continue
        if p.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = {}
                for line in stanza.splitlines():
                    if ":" in line and not line.lstrip().startswith("#"):
                        k, v = line.split(":", 1)
                        fields[k.strip().lower()] = v.strip()
                if (fields.get("enabled", "yes").lower() == "no"
                        or "deb" not in fields.get("types", "").split()):
                    continue
                for uri in fields.get("uris", "").split():
                    entries.append((uri, fields.get("suites", "").split()))
        elif p.suffix == ".list" or p.name == "sources.list":
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb":
                    entries.append((words[1], [words[2]]))
    for uri, suites in entries:
        if sec is None and f"{SUITE}-security" in suites:
            sec = uri
        if main is None and SUITE in suites:
            main = uri
    return {
        "mirror": os.environ.get("GPUPROV_SANDBOX_MIRROR") or main or DEFAULT_MIRROR,
        "security": sec or DEFAULT_SECURITY_MIRROR,
    }


def _apt_proxy_files() -> Dict[str, str]:
    """apt configuration files of this machine that set a proxy: {path inside: content}."""
    out = {}
    candidates = [Path("/etc/apt/apt.conf")] + sorted(Path("/etc/apt/apt.conf.d").glob("*"))
    for p in candidates:
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if re.search(r"::proxy", text, re.IGNORECASE):
            out[str(p)] = text
    return out


def host_pip_config() -> configparser.ConfigParser:
    """This machine's pip configuration (its files, then PIP_* variables), merged."""
    cfg = configparser.ConfigParser(interpolation=None)
    files = ["/etc/xdg/pip/pip.conf", "/etc/pip.conf",
             os.path.expanduser("~/.pip/pip.conf"), os.path.expanduser("~/.config/pip/pip.conf")]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    for f in files:
        with contextlib.suppress(configparser.Error, OSError, UnicodeDecodeError):
            cfg.read(f)
    for key, value in os.environ.items():
        if key.startswith("PIP_") and key != "PIP_CONFIG_FILE":
            if not cfg.has_section("global"):
                cfg.add_section("global")
            cfg.set("global", key[4:].lower().replace("_", "-"), value)
    return cfg


def _pip_paths(cfg: configparser.ConfigParser) -> List[str]:
    """Local paths named by pip options (find-links, index URLs, constraint, cert ...)."""
    paths = []
    for section in cfg.sections():
        for _key, value in cfg.items(section):
            for word in value.split():
                if word.startswith("file://"):
                    word = word[len("file://"):]
                if word.startswith("/") and os.path.exists(word):
                    word = os.path.normpath(word)
                    if os.path.basename(word) == "simple":   # its pages link to ../../files/...
                        word = os.path.dirname(word)
                    paths.append(word)
    return sorted(set(paths))


# ----------------------------------------------------------------------------------------------
# the cached root filesystem

def cache_root() -> Path:
    if os.environ.get("GPUPROV_SANDBOX_CACHE"):
        return Path(os.environ["GPUPROV_SANDBOX_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "gpuprov"


def rootfs_key(packages: Iterable[str] = DEFAULT_PACKAGES, arch: Optional[str] = None) -> str:
    spec = {"suite": SUITE, "variant": "minbase", "packages": sorted(set(packages)),
            "arch": arch or _dpkg_arch(), "recipe": ROOTFS_RECIPE_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def _safe_wrapper() -> List[str]:
    """Run a build command in its own mount and PID namespace, without CAP_SYS_BOOT."""
    return [_need_tool("unshare", "util-linux"), "--mount", "--propagation", "private", "--pid",
            "--fork", "--mount-proc", "--kill-child",
            _need_tool("setpriv", "util-linux"), "--bounding-set", "-sys_boot,-sys_module", "--"]


def ensure_rootfs(cache_dir: Optional[Path] = None, packages: Iterable[str] = DEFAULT_PACKAGES,
                  progress: Progress = print) -> Path:
    """The cached bookworm root filesystem, built with debootstrap on first use (~1 minute)."""
    _require_root("rootfs build")
    packages = sorted(set(packages))
    cache_dir = Path(cache_dir or cache_root()).resolve()
    arch = _dpkg_arch()
    final = cache_dir / f"rootfs-{SUITE}-{rootfs_key(packages, arch)}"
    if final.is_dir():
        return final
    debootstrap = _need_tool("debootstrap", "debootstrap")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"sandbox: waiting for another rootfs build in {cache_dir}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        # Folders left by interrupted builds (their builder is gone: we hold the lock).
        for stale in cache_dir.glob(".build-*"):
            progress(f"sandbox: removing an interrupted build {stale}")
            _safe_rmtree(stale)
        tmp = cache_dir / f".build-{final.name}-{os.getpid()}"
        log_path = cache_dir / f"{final.name}.log"
        mirror = host_apt_sources()["mirror"]
        progress(f"sandbox: building the Debian {SUITE} root filesystem into {final} "
                 f"(once; about a minute; mirror {mirror})")
        started = time.monotonic()
        cmd = _safe_wrapper() + [debootstrap, "--variant=minbase", f"--arch={arch}",
                                 "--include=" + ",".join(packages), SUITE, str(tmp), mirror]
        try:
            _run_build(cmd, log_path, progress, started, lock.fileno())
            _finish_rootfs(tmp, packages, mirror, arch, time.monotonic() - started)
            os.rename(tmp, final)
        except BaseException:
            with contextlib.suppress(Exception):
                _safe_rmtree(tmp)
            raise
        progress(f"sandbox: root filesystem ready in {time.monotonic() - started:.0f} s "
                 f"({_du(final) / 1e6:.0f} MB)")
        return final


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


_PHASES = {"Retrieving": "downloading", "Validating": "downloading", "Checking": "downloading",
           "Resolving": "downloading", "Found": "downloading", "Extracting": "extracting",
           "Installing": "installing", "Unpacking": "installing", "Configuring": "configuring"}


def _run_build(cmd: List[str], log_path: Path, progress: Progress, started: float,
               lock_fd: int) -> None:
    """Run debootstrap, logging everything and reporting phases and a heartbeat.

    debootstrap holds the cache lock too, so that if this process is killed outright, another
    build waits for it to end before removing its folder.
    """
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace",
                             pass_fds=(lock_fd,))
        phase, count, last_report = None, 0, time.monotonic()
        tail: List[str] = []
        assert p.stdout is not None
        try:
            for line in p.stdout:
                log.write(line)
                tail = (tail + [line.rstrip()])[-20:]
                words = line.split()
                if len(words) >= 2 and words[0] == "I:":
                    now_phase = _PHASES.get(words[1], phase)
                    count += words[1] in ("Retrieving", "Extracting", "Unpacking", "Configuring")
                    if now_phase != phase or time.monotonic() - last_report > 10:
                        phase, last_report = now_phase, time.monotonic()
                        progress(f"sandbox: rootfs {phase} ({count} steps, "
                                 f"{time.monotonic() - started:.0f} s)")
                if time.monotonic() - started > BUILD_TIMEOUT_S:
                    p.kill()
                    raise SandboxError(
                        f"debootstrap took over {BUILD_TIMEOUT_S} s; log: {log_path}")
            rc = p.wait()
        except BaseException:
            p.kill()
            p.wait()
            raise
    if rc != 0:
        raise SandboxError(f"debootstrap failed (exit {rc}); last lines:\n  " + "\n  ".join(tail)
                           + f"\nfull log: {log_path}")


def _finish_rootfs(root: Path, packages: List[str], mirror: str, arch: str, seconds: float) -> None:
    """Steps after debootstrap: the admin user, no shared host keys, no package caches."""
    chroot = _need_tool("chroot", "coreutils")
    script = (f"useradd --create-home --shell /bin/bash --groups sudo {ADMIN_USER} && "
              f"usermod --password '*' {ADMIN_USER}")
    r = subprocess.run(_safe_wrapper() + [chroot, str(root), "/bin/sh", "-c", script],
                       capture_output=True, text=True,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    if r.returncode != 0:
        raise SandboxError(
            f"creating the {ADMIN_USER} user in the rootfs failed: {r.stderr.strip()}")
    sudoers = root / "etc/sudoers.d/90-gpuprov-admin"
    sudoers.write_text(f"{ADMIN_USER} ALL=(ALL:ALL) NOPASSWD:ALL\n")
    os.chmod(sudoers, 0o440)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()   # every host gets its own
    with contextlib.suppress(FileNotFoundError):
        (root / "etc/apt/sources.list").unlink()   # each host gets debian.sources
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    for f in (root / "var/lib/apt/lists").iterdir():
        if f.is_file() and f.name != "lock":
            f.unlink()   # like a fresh cloud image: recipes run apt-get update first
    (root / "etc/gpuprov-sandbox-rootfs").write_text(json.dumps({
        "suite": SUITE, "variant": "minbase", "arch": arch, "packages": packages,
        "mirror": mirror, "build_seconds": round(seconds, 1),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------
# per-host files, written into the overlay's upper layer before it is mounted

def _ensure_upper_dir(upper: Path, lower: Path, rel: str) -> Path:
    """Create `rel` (a folder) in the upper layer, each level with the lower layer's owner/mode."""
    cur_u, cur_l = upper, lower
    for part in Path(rel).parts:
        cur_u, cur_l = cur_u / part, cur_l / part
        if cur_l.is_symlink():
            raise SandboxError(f"internal: {rel} crosses a symlink in the rootfs ({cur_l})")
        if not cur_u.exists():
            cur_u.mkdir()
            if cur_l.is_dir():
                st = cur_l.stat()
                os.chown(cur_u, st.st_uid, st.st_gid)
                os.chmod(cur_u, st.st_mode & 0o7777)
            else:
                os.chmod(cur_u, 0o755)
    return cur_u


def _put(upper: Path, lower: Path, rel: str, data: str, mode: int = 0o644, owner=(0, 0)) -> None:
    rel = rel.lstrip("/")
    folder = os.path.dirname(rel)
    parent = _ensure_upper_dir(upper, lower, folder) if folder else upper
    path = parent / os.path.basename(rel)
    if path.is_symlink():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(data)
        os.fchown(f.fileno(), *owner)
        os.fchmod(f.fileno(), mode)


SHIM = r"""#!/bin/sh
# gpuprov sandbox host: reboot/shutdown/poweroff/halt act on THIS sandbox host only.
# They signal the host's init (PID 1 of its own PID namespace): SIGHUP restarts the host
# (new boot_id), SIGINT powers it off. The real machine is not touched.
name=$(basename "$0")
action=reboot
case "$name" in
  poweroff|halt) action=poweroff ;;
  shutdown)
    action=poweroff
    for a in "$@"; do
      case "$a" in
        -c|--cancel) exit 0 ;;
        -r|--reboot|-*r*) action=reboot ;;
        -h|-P|--poweroff|-H|--halt) action=poweroff ;;
      esac
    done ;;
esac
if [ "$(id -u)" != 0 ]; then
  echo "$name: must be superuser." >&2
  exit 1
fi
if [ "$action" = reboot ]; then sig=HUP; else sig=INT; fi
echo "sandbox host $(hostname): $action" >&2
kill -s "$sig" 1
"""

SSHD_DROPIN = """# gpuprov sandbox host (this file comes first, so these values win)
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
MaxStartups 64:30:128
MaxSessions 64
"""


def _create_host_files(h: dict, lower: Path, client_pub: str, ssh_keygen: str) -> None:
    upper = Path(h["upper"])
    name, address = h["name"], h["address"]
    keydir = Path(h["dir"]) / "hostkey"
    keydir.mkdir(exist_ok=True)
    subprocess.run([ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}",
                    "-f", str(keydir / "key")], check=True, capture_output=True)
    _put(upper, lower, "etc/ssh/ssh_host_ed25519_key", (keydir / "key").read_text(), 0o600)
    _put(upper, lower, "etc/ssh/ssh_host_ed25519_key.pub", (keydir / "key.pub").read_text())
    h["host_key"] = " ".join((keydir / "key.pub").read_text().split()[:2])
    shutil.rmtree(keydir)
    _put(upper, lower, "etc/ssh/sshd_config.d/00-gpuprov-sandbox.conf", SSHD_DROPIN)
    _put(upper, lower, "root/.ssh/authorized_keys", client_pub, 0o600)
    admin = lower / "home" / ADMIN_USER
    st = admin.stat()
    _ensure_upper_dir(upper, lower, f"home/{ADMIN_USER}")
    ssh_dir = upper / "home" / ADMIN_USER / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    os.chown(ssh_dir, st.st_uid, st.st_gid)
    _put(upper, lower, f"home/{ADMIN_USER}/.ssh/authorized_keys", client_pub, 0o600,
         (st.st_uid, st.st_gid))
    _put(upper, lower, "etc/hostname", name + "\n")
    _put(upper, lower, "etc/hosts", f"127.0.0.1\tlocalhost\n{address}\t{name}\n"
         "::1\tlocalhost ip6-localhost ip6-loopback\n")
    _put(upper, lower, "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    try:
        resolv = Path("/etc/resolv.conf").read_text()
    except OSError:
        resolv = "nameserver 127.0.0.53\n"
    _put(upper, lower, "etc/resolv.conf", resolv)
    apt = host_apt_sources()
    _put(upper, lower, "etc/apt/sources.list.d/debian.sources",
         f"Types: deb\nURIs: {apt['mirror']}\nSuites: {SUITE} {SUITE}-updates\nComponents: main\n"
         "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
         f"Types: deb\nURIs: {apt['security']}\nSuites: {SUITE}-security\nComponents: main\n"
         "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    for path, text in _apt_proxy_files().items():
        _put(upper, lower, path, text)
    pip_cfg = host_pip_config()
    if pip_cfg.sections():
        lines = []
        for section in pip_cfg.sections():
            lines.append(f"[{section}]")
            lines += [f"{k} = {v}" for k, v in pip_cfg.items(section)]
            lines.append("")
        _put(upper, lower, "etc/pip.conf", "# this machine's pip configuration, for the sandbox\n"
             + "\n".join(lines))
    binds = []
    for p in _pip_paths(pip_cfg):
        if p.startswith("/etc/"):
            if os.path.isfile(p):
                _put(upper, lower, p, Path(p).read_text(errors="replace"))
        elif not any(p == b or p.startswith(b + "/") for b in binds):
            binds.append(p)
    h["ro_binds"] = binds
    for tool in ("reboot", "shutdown", "poweroff", "halt"):
        _put(upper, lower, f"usr/local/sbin/{tool}", SHIM, 0o755)
        if not (lower / "usr/sbin" / tool).exists():   # /sbin/reboot, as on a real machine
            _put(upper, lower, f"usr/sbin/{tool}", SHIM, 0o755)


# ----------------------------------------------------------------------------------------------
# state

def _state_paths(state_dir: Path) -> dict:
    s = Path(state_dir).resolve()
    return {"dir": s, "state": s / "state.json", "inventory": s / "inventory.yaml",
            "known_hosts": s / "known_hosts", "key": s / "id_ed25519", "hosts": s / "hosts",
            "lock": s / ".lock"}


@contextlib.contextmanager
def _locked(state_dir: Path):
    paths = _state_paths(state_dir)
    paths["dir"].mkdir(parents=True, exist_ok=True)
    with open(paths["lock"], "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield paths


def _load_state(paths: dict) -> dict:
    return _read_json(paths["state"]) or {"hosts": {}}


def _save_state(paths: dict, state: dict) -> None:
    _atomic_write(paths["state"], json.dumps(state, indent=1) + "\n")


def _host(state: dict, name: str) -> dict:
    try:
        return state["hosts"][name]
    except KeyError:
        raise SandboxError(f"no sandbox host named {name!r} (have: "
                           f"{', '.join(state['hosts']) or 'none'})") from None


def _host_status(h: dict) -> dict:
    return _read_json(Path(h["dir"]) / "status.json") or {}


def _host_running(h: dict) -> bool:
    return _alive(h.get("unshare_pid"), h.get("unshare_start"))


def _our_processes(state_dir: Path) -> List[int]:
    """PIDs of inits/unshares of this state folder, found by command line (interrupted ups)."""
    needle = str(_state_paths(state_dir)["hosts"]).encode() + b"/"
    mine = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            cmd = _proc_cmdline(int(entry))
            if INIT_ARG.encode() + b"\0" in cmd and needle in cmd:
                mine.append(int(entry))
    return mine


def _spawn(h: dict) -> None:
    """Start the host's init in new namespaces, detached from this process."""
    cfg = Path(h["dir"]) / "init.json"
    _atomic_write(cfg, json.dumps(h, indent=1) + "\n")
    with contextlib.suppress(FileNotFoundError):
        (Path(h["dir"]) / "status.json").unlink()
    r = subprocess.run([sys.executable, "-I", os.path.abspath(__file__), SPAWN_ARG, str(cfg)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip().isdigit():
        raise SandboxError(f"could not start sandbox host {h['name']}: {r.stderr.strip()}")
    pid = int(r.stdout.strip())
    h["unshare_pid"], h["unshare_start"] = pid, _proc_starttime(pid)


def _wait_ready(h: dict, old_boot: Optional[str], deadline: float) -> str:
    """Wait until the host's sshd answers with a boot_id other than `old_boot`."""
    console = Path(h["dir"]) / "console.log"
    while True:
        st = _host_status(h)
        if (st.get("state") == "running" and st.get("boot_id") != old_boot
                and _listening(h["address"], h["port"])):
            return st["boot_id"]
        if not _host_running(h) or st.get("state") == "failed":
            text = console.read_text(errors="replace") if console.exists() else ""
            tail = text.splitlines()[-15:]
            raise SandboxError(f"sandbox host {h['name']} did not start; console:\n  "
                               + "\n  ".join(tail))
        if time.monotonic() > deadline:
            raise SandboxError(f"sandbox host {h['name']} did not answer on "
                               f"{h['address']}:{h['port']} in time (console: {console})")
        time.sleep(0.05)


def _write_access_files(paths: dict, state: dict) -> None:
    hosts = state["hosts"]
    _atomic_write(paths["known_hosts"], "".join(
        f"[{h['address']}]:{h['port']} {h['host_key']}\n" for h in hosts.values()))
    q = json.dumps   # a JSON string is a valid YAML scalar
    lines = ["# Written by `invoke sandbox up` (remote/sandbox/); removed by `sandbox down`.",
             "host_key_policy: strict", f"known_hosts: {q(str(paths['known_hosts']))}", "hosts:"]
    for name, h in hosts.items():
        lines.append(f"  {name}: {{address: {h['address']}, port: {h['port']}, user: {h['user']}, "
                     f"identity_file: {q(str(paths['key']))}, python: /usr/bin/python3}}")
    lines += ["groups:", f"  sandbox: {{hosts: [{', '.join(hosts)}]}}", ""]
    _atomic_write(paths["inventory"], "\n".join(lines))


def _stop_host(h: dict, timeout: float) -> None:
    """Power the host off: SIGTERM to its init (which ends every process), SIGKILL if needed."""
    init_pid, init_start = h.get("init_pid"), h.get("init_start")
    st = _host_status(h)
    if not init_pid and st.get("init_pid"):
        init_pid, init_start = st["init_pid"], st.get("init_start")
    pids = []
    if _alive(init_pid, init_start):
        os.kill(init_pid, signal.SIGTERM)
        pids.append(init_pid)
    if _alive(h.get("unshare_pid"), h.get("unshare_start")):
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
       timeout: float = 60.0) -> Path:
    """Start `count` sandbox hosts (sandbox1..N); return the path of their inventory.

    When this state folder's hosts are already up (the same count, all running), they are
    reused and said so; a different count, or a half-started set, is an error naming `down`.
    """
    _require_root("up")
    if not 1 <= count <= 250:
        raise SandboxError(f"--hosts must be between 1 and 250, not {count}")
    if user not in ("root", ADMIN_USER):
        raise SandboxError(f"user must be root or {ADMIN_USER}, not {user!r}")
    _need_tool("unshare", "util-linux")
    ssh_keygen = _need_tool("ssh-keygen", "openssh-client")
    paths = _state_paths(state_dir)
    if re.search(r"[,:\s]", str(paths["dir"])):
        raise SandboxError(f"the state folder path {paths['dir']} may not contain ',', ':' or "
                           "spaces (overlayfs options cannot carry them)")
    with _locked(state_dir) as paths:
        state = _load_state(paths)
        running = [n for n, h in state["hosts"].items() if _host_running(h)]
        if running or _our_processes(paths["dir"]):
            if (len(state["hosts"]) == count and len(running) == count
                    and paths["inventory"].exists()):
                progress(f"sandbox: {count} hosts already up ({', '.join(running)}); "
                         f"inventory {paths['inventory']}")
                return paths["inventory"]
            raise SandboxError(
                f"a sandbox is already up in {paths['dir']} ({len(state['hosts'])} hosts, "
                f"{len(running)} running); run `invoke sandbox down` first")
        if state["hosts"] or paths["hosts"].exists():
            progress(f"sandbox: removing the stopped sandbox left in {paths['dir']}")
            _down_locked(paths, progress, 20.0)
            state = {"hosts": {}}
        rootfs = ensure_rootfs(cache_dir, packages, progress)
        started = time.monotonic()
        if not paths["key"].exists():
            for p in (paths["key"], paths["key"].with_suffix(".pub")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            subprocess.run([ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", "gpuprov-sandbox",
                            "-f", str(paths["key"])], check=True, capture_output=True)
        client_pub = paths["key"].with_suffix(".pub").read_text()
        try:
            return _start_hosts(paths, state, count, user, rootfs, client_pub, ssh_keygen,
                                base_port, timeout, progress, started)
        except BaseException:
            progress("sandbox: start failed; stopping what was started")
            with contextlib.suppress(Exception):
                _down_locked(paths, progress, 10.0)
            raise


def _start_hosts(paths: dict, state: dict, count: int, user: str, rootfs: Path, client_pub: str,
                 ssh_keygen: str, base_port: int, timeout: float, progress: Progress,
                 started: float) -> Path:
    # One `up` at a time on this machine picks loopback addresses, until its sshds listen.
    with open(Path(tempfile.gettempdir()) / "gpuprov-sandbox-ports.lock", "w") as ports_lock:
        fcntl.flock(ports_lock, fcntl.LOCK_EX)
        taken: set = set()
        for i in range(1, count + 1):
            name = f"sandbox{i}"
            address, port = _pick_address(base_port, taken)
            taken.add(address)
            hdir = paths["hosts"] / name
            if hdir.exists():
                _safe_rmtree(hdir)
            h = {"name": name, "address": address, "port": port, "user": user,
                 "dir": str(hdir), "rootfs": str(rootfs), "upper": str(hdir / "upper"),
                 "work": str(hdir / "work"), "merged": str(hdir / "root"),
                 "boot_id_file": str(hdir / "boot_id"), "reboot_down_s": REBOOT_DOWN_S}
            for d in ("upper", "work", "root"):
                (hdir / d).mkdir(parents=True)
            state["hosts"][name] = h
            _save_state(paths, state)      # recorded before anything runs, for `down`
            _create_host_files(h, rootfs, client_pub, ssh_keygen)
            _spawn(h)
            _save_state(paths, state)
        deadline = time.monotonic() + timeout
        for h in state["hosts"].values():
            h["boot_id"] = _wait_ready(h, None, deadline)
            st = _host_status(h)
            h["init_pid"], h["init_start"] = st.get("init_pid"), st.get("init_start")
    _save_state(paths, state)
    _write_access_files(paths, state)
    progress(f"sandbox: {count} hosts up in {time.monotonic() - started:.1f} s: "
             + ", ".join(f"{n} {h['user']}@{h['address']}:{h['port']}"
                         for n, h in state["hosts"].items()))
    progress(f"sandbox: inventory {paths['inventory']}")
    return paths["inventory"]


def _pick_address(port: int, taken: set) -> tuple:
    for n in range(2, 255):
        address = f"127.0.0.{n}"
        if address in taken:
            continue
        for p in range(port, port + 20):
            if _port_free(address, p):
                return address, p
    raise SandboxError(f"no free loopback address/port near {port}")


def down(state_dir: Path = DEFAULT_STATE_DIR, progress: Progress = print,
         timeout: float = 20.0) -> None:
    """Stop every sandbox host of this state folder and remove all it made. Idempotent."""
    _require_root("down")
    paths = _state_paths(state_dir)
    if not paths["dir"].exists():
        progress(f"sandbox: nothing to stop in {paths['dir']}")
        return
    with _locked(state_dir) as paths:
        n = _down_locked(paths, progress, timeout)
        progress(f"sandbox: stopped {n} hosts, removed {paths['dir']}")
    with contextlib.suppress(FileNotFoundError):
        paths["lock"].unlink()
    with contextlib.suppress(OSError):
        paths["dir"].rmdir()


def _down_locked(paths: dict, progress: Progress, timeout: float) -> int:
    state = _load_state(paths)
    for h in state["hosts"].values():
        _stop_host(h, timeout)
    strays = _our_processes(paths["dir"])   # e.g. an `up` interrupted before it saved a PID
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
    _safe_rmtree(paths["hosts"])
    for name in ("inventory", "known_hosts", "key", "state"):
        with contextlib.suppress(FileNotFoundError):
            paths[name].unlink()
    with contextlib.suppress(FileNotFoundError):
        paths["key"].with_suffix(".pub").unlink()
    return len(state["hosts"])


def status(state_dir: Path = DEFAULT_STATE_DIR) -> List[dict]:
    """One dict per host: name, address, port, user, running, state, boot_id, boots."""
    state = _load_state(_state_paths(state_dir))
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
    h = _host(_load_state(_state_paths(state_dir)), name)
    try:
        return Path(h["boot_id_file"]).read_text().strip()
    except FileNotFoundError:
        return None


def restart(state_dir: Path, name: str, timeout: float = 60.0) -> str:
    """Reboot one host (as `reboot` inside it does); return its new boot_id once sshd answers."""
    _require_root("restart")
    with _locked(state_dir) as paths:
        h = _host(_load_state(paths), name)
        st = _host_status(h)
        if not _host_running(h) or not _alive(st.get("init_pid"), st.get("init_start")):
            raise SandboxError(f"sandbox host {name} is not running (use start)")
        os.kill(st["init_pid"], signal.SIGHUP)
        return _wait_ready(h, st.get("boot_id"), time.monotonic() + timeout)


def wait_rebooted(state_dir: Path, name: str, old_boot_id: str, timeout: float = 60.0) -> str:
    """Wait until a host rebooted from inside answers again with a new boot_id; return it."""
    h = _host(_load_state(_state_paths(state_dir)), name)
    return _wait_ready(h, old_boot_id, time.monotonic() + timeout)


def stop(state_dir: Path, name: str, timeout: float = 20.0) -> None:
    """Power one host off (its disk, the overlay, is kept)."""
    _require_root("stop")
    with _locked(state_dir) as paths:
        state = _load_state(paths)
        _stop_host(_host(state, name), timeout)
        _save_state(paths, state)


def start(state_dir: Path, name: str, timeout: float = 60.0) -> str:
    """Power a stopped host on again (same disk, new boot_id); return the new boot_id."""
    _require_root("start")
    with _locked(state_dir) as paths:
        state = _load_state(paths)
        h = _host(state, name)
        if _host_running(h):
            raise SandboxError(f"sandbox host {name} is already running")
        if not _port_free(h["address"], h["port"]):
            raise SandboxError(f"cannot start {name}: {h['address']}:{h['port']} is in use")
        old = h.get("boot_id")
        _spawn(h)
        _save_state(paths, state)
        h["boot_id"] = _wait_ready(h, old, time.monotonic() + timeout)
        st = _host_status(h)
        h["init_pid"], h["init_start"] = st.get("init_pid"), st.get("init_start")
        _save_state(paths, state)
        return h["boot_id"]


# ----------------------------------------------------------------------------------------------
# the host's init: PID 1 of the host's PID namespace (runs this file as a script)

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


class _Init:
    def __init__(self, cfg_path: str):
        self.cfg = json.loads(Path(cfg_path).read_text())
        self.dir = Path(self.cfg["dir"])
        self.m = self.cfg["merged"]
        self.sshd: Optional[int] = None
        self.boots = 0
        self.sshd_restarts: List[float] = []
        # Our PID as the machine sees it: /proc here is still the machine's procfs.
        self.host_pid = int(os.readlink("/proc/self"))
        self.host_start = _proc_starttime(self.host_pid)
        self.status("starting")

    def log(self, msg: str) -> None:
        print(f"[init {self.cfg['name']} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr,
              flush=True)

    def status(self, state: str, **extra) -> None:
        data = {"state": state, "init_pid": self.host_pid, "init_start": self.host_start,
                "boots": self.boots, "boot_id": self._boot_id(), "time": time.time(), **extra}
        _atomic_write(self.dir / "status.json", json.dumps(data) + "\n")

    def _boot_id(self) -> Optional[str]:
        try:
            return Path(self.cfg["boot_id_file"]).read_text().strip()
        except FileNotFoundError:
            return None

    def p(self, rel: str) -> str:
        return os.path.join(self.m, rel.lstrip("/"))

    def mount_all(self) -> None:
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
        while not _listening(self.cfg["address"], self.cfg["port"]):
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
        watched = {signal.SIGCHLD, signal.SIGHUP, signal.SIGINT, signal.SIGTERM}
        for s in watched:   # a handler (not SIG_DFL), so signals from inside reach PID 1
            signal.signal(s, lambda *_: None)
        signal.pthread_sigmask(signal.SIG_BLOCK, watched)
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


def _spawn_main(cfg: str) -> int:
    """Start `unshare ... <this file> _run-init CFG` in its own session; print its PID."""
    h = json.loads(Path(cfg).read_text())
    log = open(Path(h["dir"]) / "console.log", "a")
    cmd = [_need_tool("unshare", "util-linux"), "--mount", "--propagation", "private", "--pid",
           "--uts", "--ipc", "--fork", "--kill-child", "--",
           sys.executable, "-I", os.path.abspath(__file__), INIT_ARG, cfg]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, close_fds=True, cwd="/")
    print(p.pid)
    return 0


# ----------------------------------------------------------------------------------------------
# command line

def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == INIT_ARG:
        return _Init(argv[1]).run()
    if argv and argv[0] == SPAWN_ARG:
        return _spawn_main(argv[1])
    ap = argparse.ArgumentParser(prog="python3 -m remote.sandbox",
                                 description="Throwaway local Debian 12 hosts over SSH.")
    ap.add_argument("action", choices=["up", "down", "status", "restart", "stop", "start"])
    ap.add_argument("name", nargs="?", help="host name, for restart/stop/start")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--state", type=Path, default=DEFAULT_STATE_DIR)
    ap.add_argument("--user", default=ADMIN_USER, choices=["root", ADMIN_USER])
    args = ap.parse_args(argv)
    try:
        if args.action == "up":
            print(up(args.hosts, args.state, user=args.user))
        elif args.action == "down":
            down(args.state)
        elif args.action == "status":
            for s in status(args.state):
                print(f"{s['name']}\t{s['address']}:{s['port']}\t{s['state']}\t"
                      f"boot_id={s['boot_id']}\tboots={s['boots']}")
        else:
            if not args.name:
                ap.error(f"{args.action} needs a host name")
            fn = {"restart": restart, "stop": stop, "start": start}[args.action]
            result = fn(args.state, args.name)
            if result:
                print(result)
    except SandboxError as e:
        print(f"sandbox: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sandbox: interrupted (`down` removes whatever was started)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
