"""Host key checking that Fabric leaves out.

Fabric's `Connection` installs paramiko's AutoAddPolicy and never reads known_hosts, so on its own
it trusts any server. Here every connection loads `~/.ssh/known_hosts` plus the inventory's
`known_hosts` files; an unknown key is refused (policy `strict`) or recorded (policy
`accept-new`), and a changed key is always refused, naming the file, the line and the fix.
"""
from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import Optional, Sequence

import paramiko
from paramiko.hostkeys import HostKeyEntry, HostKeys

from ..ground.errors import HostKeyError
from ..ground.fileio import write_atomic


def default_known_hosts() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


def lookup_name(address: str, port: int) -> str:
    """The name OpenSSH and paramiko use for a host in known_hosts."""
    return address if port == 22 else f"[{address}]:{port}"


class KnownHosts:
    """The trusted keys of one run: read once, shared by every connection, appended atomically
    (also across processes)."""

    def __init__(self, extra_files: Sequence[str | Path], policy: str = "strict"):
        self.files = [default_known_hosts()] + [Path(p) for p in extra_files]
        self.policy = policy
        # accept-new writes to the inventory's own file when it names one, else the user's.
        self.record_file = self.files[-1]
        self._lock = threading.Lock()
        self.keys = HostKeys()
        for path in self.files:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            self.keys.load(str(path))
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError) as exc:
            raise HostKeyError(f"cannot read known_hosts file {path}: {exc}") from None

    def install(self, client: paramiko.SSHClient, host_label: str, name: str) -> None:
        """Make `client` check the keys of `name` (see `lookup_name`) against this store
        (replacing Fabric's AutoAddPolicy)."""
        # paramiko checks the server's key against the client's host keys (and the empty
        # system set); give them this host's keys, parsed once for the whole run. Only this
        # host's: copying every known host into every client cost each connection time in
        # proportion to the known_hosts files (with the bench's 8 entries, 0.48 ms of control
        # CPU per host; 0.11 ms now).
        trusted = client.get_host_keys()
        with self._lock:  # accept-new may be recording a key for another host right now
            for key_type, key in (self.keys.lookup(name) or {}).items():
                trusted.add(name, key_type, key)
        client.set_missing_host_key_policy(_Policy(self, host_label))

    def locate(self, name: str) -> tuple[Optional[Path], Optional[int]]:
        """(file, line) of the first entry for `name`, for messages; (None, None) if absent."""
        for path in self.files:
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for number, line in enumerate(lines, 1):
                entry = _parse(line)
                if entry and _matches(entry, name):
                    return path, number
        return None, None

    def record(self, name: str, key: paramiko.PKey) -> Path:
        """Append `name key` to the record file atomically (temp file + rename), holding a
        lock (FILE.lock beside it) so that concurrent gpuprov processes never lose each other's
        lines; refuse if another run recorded a different key for `name` meanwhile."""
        path = self.record_file
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            lock = self._lock_file(path)
            try:
                self._append(path, name, key)
            finally:
                if lock is not None:
                    os.close(lock)  # releases the lock
            self.keys.add(name, key.get_name(), key)
        return path

    @staticmethod
    def _lock_file(path: Path) -> Optional[int]:
        """An exclusive lock on FILE.lock (not on FILE, which the rename replaces); None
        where the file system cannot lock (the append is then atomic but not serialised)."""
        try:
            fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return None
        return fd

    def _append(self, path: Path, name: str, key: paramiko.PKey) -> None:
        try:
            old = path.read_text()
        except FileNotFoundError:
            old = ""
        for entry in filter(None, map(_parse, old.splitlines())):
            if _matches(entry, name) and entry.key.get_name() == key.get_name():
                if entry.key == key:
                    return  # another run recorded the same key meanwhile
                raise HostKeyError(
                    f"host key for {name} was just recorded in {path} by another run as "
                    f"{entry.key.fingerprint}, and this server offers {key.fingerprint}: refusing "
                    "both; check the host out of band")
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        if old and not old.endswith("\n"):
            old += "\n"
        write_atomic(path, old + line, mode=(path.stat().st_mode & 0o777) if path.exists() else 0o600)

    def changed_message(self, host_label: str, name: str, exc: paramiko.BadHostKeyException) -> str:
        path, line = self.locate(name)
        where = f"{path} line {line}" if path else "known_hosts"
        fix_file = f" -f {path}" if path else ""
        return (f"host key for {host_label} ({name}) CHANGED: it does not match {where} "
                f"(got {exc.key.get_name()} {exc.key.fingerprint}). Someone may be intercepting the "
                f"connection, or the host was rebuilt. If you know it was rebuilt, remove the old "
                f"key with: ssh-keygen -R '{name}'{fix_file}")


class _Policy(paramiko.MissingHostKeyPolicy):
    def __init__(self, store: KnownHosts, host_label: str):
        self.store = store
        self.host_label = host_label

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        if self.store.policy == "accept-new":
            self.store.record(hostname, key)
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        files = ", ".join(str(p) for p in self.store.files)
        address, _, port = hostname[1:].partition("]:") if hostname.startswith("[") else (
            hostname, "", "22")
        scan = f"ssh-keyscan {'' if port == '22' else f'-p {port} '}{address}"
        raise HostKeyError(
            f"host key for {self.host_label} ({hostname}) is unknown: {key.get_name()} "
            f"{key.fingerprint} is not in {files}. Check the fingerprint out of band, then add "
            f"it ({scan} >> {self.store.record_file}) or set "
            f"host_key_policy: accept-new in the inventory to record new keys on first contact")


def _parse(line: str) -> Optional[HostKeyEntry]:
    line = line.strip()
    if not line or line.startswith("#") or line.startswith("@"):
        return None
    try:
        return HostKeyEntry.from_line(line)
    except Exception:  # noqa: BLE001 - a malformed line is simply not a match
        return None


def _matches(entry: HostKeyEntry, name: str) -> bool:
    for pattern in entry.hostnames:
        if pattern.startswith("|1|"):
            salt = pattern.split("|")[2]
            if HostKeys.hash_host(name, salt) == pattern:
                return True
        elif pattern == name:
            return True
    return False
