"""Real OpenSSH servers on loopback for the tests (no mocked SSH).

`SshdFarm` generates a client key and one host key per server, makes sure a dedicated login user
exists (its /bin/sh runs no heavy rc files), writes an sshd_config and starts
`/usr/sbin/sshd -D -e` on 127.0.0.2, 127.0.0.3, ... all on one free port. It writes a
known_hosts file with every server's key and inventories pointing at them. Stopping it ends
exactly the sshd processes it started, by PID.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

SSHD = "/usr/sbin/sshd"
TEST_USER = "gpuprovtest"


def ensure_user(name: str = TEST_USER) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
    # A locked account ('!') cannot log in even by key when PAM is off; '*' means "no password".
    subprocess.run(["usermod", "-p", "*", name], check=True)


def free_port(addresses) -> int:
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if all(_bindable(a, port) for a in addresses):
            return port
    raise RuntimeError("no free port")


def _bindable(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
            return True
        except OSError:
            return False


def keygen(path: Path, kind: str = "ed25519") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "gpuprov-test", "-f",
                    str(path)], check=True)
    return Path(str(path) + ".pub").read_text().split()[:2]


class SshdFarm:
    def __init__(self, count: int, first: int = 2, max_startups: int = 100,
                 addresses=None, port=None, netns=None):
        """`addresses`, `port` and `netns` (address -> network namespace its sshd runs in,
        through `ip netns exec`) for servers in namespaces a test made (tests/fabric_net.py)."""
        self.dir = Path(tempfile.mkdtemp(prefix="gpuprov-sshd-"))
        os.chmod(self.dir, 0o755)
        ensure_user()
        self.user = TEST_USER
        self.key = self.dir / "id_ed25519"
        key_type, key_b64 = keygen(self.key)
        self.authorized = self.dir / "authorized_keys"
        self.authorized.write_text(f"{key_type} {key_b64}\n")
        os.chmod(self.authorized, 0o644)
        self.addresses = addresses or [f"127.0.0.{n}" for n in range(first, first + count)]
        self.netns = netns or {}
        self.port = port or free_port(self.addresses)
        self.known_hosts = self.dir / "known_hosts"
        self.procs: dict = {}
        self.host_keys: dict = {}
        self.options: dict = {}
        self.max_startups = max_startups
        lines = []
        for address in self.addresses:
            key_path = self.dir / f"host_{address}"
            kt, kb = keygen(key_path)
            self.host_keys[address] = key_path
            lines.append(f"[{address}]:{self.port} {kt} {kb}")
        self.known_hosts.write_text("\n".join(lines) + "\n")
        Path("/run/sshd").mkdir(exist_ok=True)
        for address in self.addresses:
            self.start(address)

    def add_server(self, address: str, **options) -> None:
        """Start one more server (own host key, in known_hosts) with extra sshd options."""
        key_path = self.dir / f"host_{address}"
        kt, kb = keygen(key_path)
        self.host_keys[address] = key_path
        with open(self.known_hosts, "a") as handle:
            handle.write(f"[{address}]:{self.port} {kt} {kb}\n")
        self.options[address] = options
        self.start(address)

    def config_for(self, address: str) -> Path:
        path = self.dir / f"sshd_config_{address}"
        forwarding = self.options.get(address, {}).get("AllowTcpForwarding", "yes")
        # The extra options come first: sshd keeps the first value it reads for a keyword
        # (sshd_config(5)), so `PasswordAuthentication yes` overrides the default below.
        path.write_text(
            "".join(f"{key} {value}\n" for key, value in self.options.get(address, {}).items()
                    if key != "AllowTcpForwarding") +
            f"HostKey {self.host_keys[address]}\n"
            f"AuthorizedKeysFile {self.authorized}\n"
            "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin no\n"
            f"AllowUsers {self.user}\nPidFile none\nLogLevel ERROR\n"
            f"MaxStartups {self.max_startups}\nMaxSessions 100\nAllowTcpForwarding {forwarding}\n"
            "PrintMotd no\nUseDNS no\n")
        return path

    def start(self, address: str) -> None:
        inside = ["ip", "netns", "exec", self.netns[address]] if address in self.netns else []
        proc = subprocess.Popen(
            inside + [SSHD, "-D", "-e", "-f", str(self.config_for(address)), "-p", str(self.port),
             "-o", f"ListenAddress={address}"],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / f"sshd_{address}.log", "ab"))
        self.procs[address] = proc
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd on {address} exited: "
                                   f"{(self.dir / f'sshd_{address}.log').read_text()}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex((address, self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"sshd on {address}:{self.port} did not listen within 10 s")

    def stop(self, address: str) -> None:
        proc = self.procs.pop(address, None)
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def host_entry(self, address: str, **extra) -> dict:
        entry = {"address": address, "port": self.port, "user": self.user,
                 "identity_file": str(self.key)}
        entry.update(extra)
        return entry

    def close(self) -> None:
        for address in list(self.procs):
            self.stop(address)
        shutil.rmtree(self.dir, ignore_errors=True)


def shared_tmp(prefix: str = "gpuprov-t-") -> Path:
    """A temporary folder the test login user can write to."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(path, 0o777)
    return path


@contextlib.contextmanager
def server_with_tools(farm: SshdFarm, address: str, tools: dict, prefix: str) -> Iterator[Path]:
    """A hostile host: an sshd on `address` whose login PATH starts with a folder of crafted
    tools (name -> sh script; `{tools}` in a script is that folder). Stopped and removed after."""
    folder = shared_tmp(prefix)
    for name, text in tools.items():
        (folder / name).write_text(text.format(tools=folder))
        os.chmod(folder / name, 0o755)
    farm.add_server(address, SetEnv=f"PATH={folder}:/usr/local/bin:/usr/bin:/bin")
    try:
        yield folder
    finally:
        farm.stop(address)
        shutil.rmtree(folder, ignore_errors=True)
