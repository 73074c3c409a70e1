"""The sandbox hosts' root filesystem: the shared Debian bookworm tree (debootstrap, built once
and cached) and what each host's overlay upper layer gets on top of it (host key, sshd
settings, the client key, this machine's apt sources, proxy and pip configuration, the
reboot shims).
"""
from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .machine import Progress, SandboxError, dpkg_arch, need_tool, require_root, safe_rmtree

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
ADMIN_USER = "admin"
BUILD_TIMEOUT_S = 1800


# ----------------------------------------------------------------------------------------------
# this machine's apt and pip configuration

def host_apt_sources() -> Dict[str, str]:
    """The bookworm mirror and security mirror this machine's apt uses (or Debian's defaults):
    the first source of each suite in apt's order (sources.list, then sources.list.d by name).

    ``$GPUPROV_SANDBOX_MIRROR`` overrides the main mirror.
    """
    main = sec = None
    paths = [Path("/etc/apt/sources.list")] + sorted(Path("/etc/apt/sources.list.d").glob("*"))
    for uri, suites in _source_entries(paths):
        if sec is None and f"{SUITE}-security" in suites:
            sec = uri
        if main is None and SUITE in suites:
            main = uri
    return {
        "mirror": os.environ.get("GPUPROV_SANDBOX_MIRROR") or main or DEFAULT_MIRROR,
        "security": sec or DEFAULT_SECURITY_MIRROR,
    }


def _source_entries(paths: List[Path]) -> List[Tuple[str, List[str]]]:
    """(uri, suites) of every enabled `deb` source in `paths`, in order; a file that cannot
    be read is skipped."""
    entries: List[Tuple[str, List[str]]] = []
    for p in paths:
        try:
            text = p.read_text()
        except OSError:
            continue
        if p.suffix == ".sources":
            entries += _deb822_entries(text)
        elif p.suffix == ".list" or p.name == "sources.list":
            entries += _one_line_entries(text)
    return entries


def _deb822_entries(text: str) -> List[Tuple[str, List[str]]]:
    """The deb822 form (sources.list(5), "DEB822-STYLE FORMAT"): a stanza per source, its
    URIs and Suites; Enabled: no or Types without `deb` skip it."""
    entries = []
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
    return entries


def _one_line_entries(text: str) -> List[Tuple[str, List[str]]]:
    """The one-line form (sources.list(5), "ONE-LINE-STYLE FORMAT"): `deb [options] uri
    suite ...`, comments and options dropped."""
    entries = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            entries.append((words[1], [words[2]]))
    return entries


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
            "arch": arch or dpkg_arch(), "recipe": ROOTFS_RECIPE_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def _safe_wrapper() -> List[str]:
    """Run a build command in its own mount and PID namespace, without CAP_SYS_BOOT."""
    return [need_tool("unshare", "util-linux"), "--mount", "--propagation", "private", "--pid",
            "--fork", "--mount-proc", "--kill-child",
            need_tool("setpriv", "util-linux"), "--bounding-set", "-sys_boot,-sys_module", "--"]


def ensure_rootfs(cache_dir: Optional[Path] = None, packages: Iterable[str] = DEFAULT_PACKAGES,
                  progress: Progress = print) -> Path:
    """The cached bookworm root filesystem, built with debootstrap on first use (~1 minute)."""
    require_root("rootfs build")
    packages = sorted(set(packages))
    cache_dir = Path(cache_dir or cache_root()).resolve()
    arch = dpkg_arch()
    final = cache_dir / f"rootfs-{SUITE}-{rootfs_key(packages, arch)}"
    if final.is_dir():
        return final
    debootstrap = need_tool("debootstrap", "debootstrap")
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
            safe_rmtree(stale)
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
                safe_rmtree(tmp)
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
    chroot = need_tool("chroot", "coreutils")
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


def _put(upper: Path, lower: Path, rel: str, data: str, mode: int = 0o644,
         owner: Tuple[int, int] = (0, 0)) -> None:
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


def create_host_files(h: Dict[str, Any], lower: Path, client_pub: str, ssh_keygen: str) -> None:
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
    binds: List[str] = []
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

