"""Connections to hosts: one per host, reused for the whole run.

`SSHConnection` opens a Fabric `Connection` (jump hosts, ssh_config) with host keys checked by
`hostkeys.KnownHosts`, connect/banner/auth timeouts and keepalives, then runs each command on its
own channel of the one transport. `LocalConnection` runs the same commands with /bin/sh here.

Every command is POSIX sh, wrapped the same way for both:
  exec [sudo -H -S -p TOKEN --] /bin/sh -c 'printf READY$$ >&2; exec [timeout -k 5 N] /bin/sh -c SCRIPT'
The remote `timeout` kills the command's whole process group when a step overruns; the client
side has its own deadline too, so a dead link cannot hang the run. A sudo password is sent on
stdin only when sudo prints our prompt token, and never appears in a command line or a log.

The READY line on stderr (stripped from the output) carries the PID that becomes the `timeout`
process, which leads the command's process group. When the run is cancelled (Ctrl-C, SIGTERM:
the runner sets `cancel`), the command is stopped on the host with `kill -TERM -- -PGID` sent on
a fresh channel (through sudo when the command used it); `timeout -k` follows with SIGKILL if
the group outlives the grace period. Then `Interrupted` is raised.
"""
from __future__ import annotations

import functools
import logging
import os
import secrets
import select
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

import paramiko

from ..errors import BecomeError, CommandTimeout, ConnectionLost, Interrupted, Unreachable
from .hostkeys import HostKeyError, KnownHosts, lookup_name
from ..config.inventory import Host, Timeouts

# paramiko logs failures (a missing banner, a reset) with tracebacks; with no handler configured,
# Python's last-resort handler would print them on the user's terminal. Each failure reaches the
# user once, as the host's one-line reason (Unreachable, ConnectionLost).
logging.getLogger("paramiko").addHandler(logging.NullHandler())

OutputCallback = Callable[[str, str], None]  # (stream name "stdout"|"stderr", text)

KILL_GRACE_S = 5  # after SIGTERM, `timeout -k` sends SIGKILL this much later
CLIENT_GRACE_S = KILL_GRACE_S + 5  # the client waits this long past the remote timeout
STOP_TIMEOUT_S = 3  # for the `kill` that stops a cancelled command
CANCEL_PID_WAIT_S = 2  # a command cancelled before its PID line arrived waits this long for it
KEX_GRACE_S = 10  # after the banner came, the key exchange has this much longer
# What coreutils `timeout` exits with when it stopped the command (TERM, then KILL after grace).
TIMEOUT_EXIT_CODES = (124, 137)


@dataclass
class CommandResult:
    rc: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def wrap_command(script: str, *, become: bool, is_root: bool, timeout: Optional[float],
                 prompt: str, ready: str, password: Optional[str],
                 shell: str = "/bin/sh") -> str:
    """The command line that runs `script`, with sudo and a remote timeout as asked."""
    inner = f"{shell} -c {shlex.quote(script)}"
    if timeout:
        inner = f"timeout -k {KILL_GRACE_S} {max(1, int(round(timeout)))} {inner}"
    # The ready marker carries the PID of the process that execs `timeout` (its process group
    # leader), so a cancelled run can stop the command; under sudo it also tells the client
    # that sudo is satisfied, so stdin now belongs to the command.
    announce = f"printf '%s%s\\n' {shlex.quote(ready)} \"$$\" >&2; exec {inner}"
    # `exec`: the login shell sshd starts becomes our /bin/sh instead of forking it (any login
    # shell, sh to fish, knows `exec`); one process less per command.
    if not become or is_root:
        return f"exec /bin/sh -c {shlex.quote(announce)}"
    mode = f"-S -p {shlex.quote(prompt)}" if password is not None else "-n"
    return f"exec sudo -H {mode} -- /bin/sh -c {shlex.quote(announce)}"


class _Exchange:
    """Collects a command's output and handles the sudo prompt / ready markers on stderr."""

    def __init__(self, prompt: str, ready: str, password: Optional[str], stdin: Optional[bytes],
                 wait_ready: bool, on_output: Optional[OutputCallback]):
        self.prompt = prompt.encode()
        self.ready = ready.encode()  # followed by the PID and a newline
        self.pid: Optional[int] = None  # from the ready line: the command's process group
        self.announced = False
        self.password = password
        self.stdin = stdin
        self.waiting = wait_ready
        self.on_output = on_output
        self.stdout = bytearray()
        self.stderr = bytearray()
        self._pending_err = bytearray()
        self.to_send: list = []
        self.close_stdin = False
        self.wrong_password = False
        self.prompts = 0
        if not wait_ready:
            self._release_stdin()

    def _release_stdin(self) -> None:
        if self.stdin:
            self.to_send.append(self.stdin)
        self.close_stdin = True

    def feed_stdout(self, data: bytes) -> None:
        self.stdout += data
        if self.on_output:
            self.on_output("stdout", data.decode("utf-8", "replace"))

    def feed_stderr(self, data: bytes) -> None:
        if self.announced:
            self._emit_err(data)
            return
        self._pending_err += data
        if self.waiting and self.prompt in self._pending_err:
            self.prompts += 1
            self._pending_err = self._pending_err.replace(self.prompt, b"", 1)
            if self.prompts > 1 or self.password is None:
                self.wrong_password = True
                self.close_stdin = True
            else:
                self.to_send.append(self.password.encode() + b"\n")
        found = self._ready_line()
        if found:
            pending = bytes(self._pending_err)
            start, end, self.pid = found
            before, after = pending[:start], pending[end:]
            self._pending_err = bytearray()
            self.announced = True
            if self.waiting:
                self.waiting = False
                self._release_stdin()
            if before.strip():
                self._emit_err(before)
            if after:
                self._emit_err(after)

    def _ready_line(self) -> Optional[tuple]:
        """(start, end, pid) of a complete ready line in the pending stderr, else None.
        (A plain search: a regex per command would be compiled anew for every random token.)"""
        start = self._pending_err.find(self.ready)
        while start >= 0:
            # An earlier copy of the token may be a shell's trace of our own command line
            # (`set -x` in a login rc file): only "TOKEN<digits>\n" is the ready line.
            digits_at = start + len(self.ready)
            newline = self._pending_err.find(b"\n", digits_at)
            digits = bytes(self._pending_err[digits_at:newline])
            if newline >= 0 and digits.isdigit():
                return start, newline + 1, int(digits)
            start = self._pending_err.find(self.ready, start + 1)
        return None

    def finish(self) -> None:
        if self._pending_err:
            self._emit_err(bytes(self._pending_err))
            self._pending_err = bytearray()

    def _emit_err(self, data: bytes) -> None:
        self.stderr += data
        if self.on_output:
            self.on_output("stderr", data.decode("utf-8", "replace"))


class BaseConnection:
    """What the runner needs of a connection; subclasses implement `_execute`."""

    host: Host
    is_root: bool = False
    cancel: Optional[threading.Event] = None  # set by the runner: stop commands when it is set

    def __init__(self, host: Host, timeouts: Timeouts, become_password: Optional[str] = None):
        self.host = host
        self.timeouts = timeouts
        self.become_password = become_password

    def run(self, script: str, *, become: bool = False, timeout: Optional[float] = None,
            stdin: Optional[bytes] = None, on_output: Optional[OutputCallback] = None,
            shell: str = "/bin/sh", cancellable: bool = True) -> CommandResult:
        """Run a POSIX sh script on the host; return its exit status and output.

        Raises `Interrupted` (after stopping the command on the host) when `cancel` is set."""
        token = secrets.token_hex(8)
        prompt, ready = f"[gpuprov-sudo-{token}]", f"[gpuprov-ready-{token}]"
        use_sudo = become and not self.is_root
        command = wrap_command(script, become=become, is_root=self.is_root, timeout=timeout,
                               prompt=prompt, ready=ready, password=self.become_password,
                               shell=shell)
        exchange = _Exchange(prompt, ready, self.become_password if use_sudo else None, stdin,
                             use_sudo, on_output)
        started = time.monotonic()
        deadline = started + timeout + CLIENT_GRACE_S if timeout else None
        try:
            rc = self._execute(command, exchange, deadline, timeout,
                               self.cancel if cancellable else None)
        except Interrupted:
            self._stop(exchange.pid, become)
            raise
        exchange.finish()
        if timeout and rc in TIMEOUT_EXIT_CODES:
            raise CommandTimeout(f"timed out after {timeout:g} s")
        if use_sudo and exchange.waiting:
            if exchange.wrong_password:
                raise BecomeError(f"sudo on {self.host.name} rejected the become password")
            if self.become_password is None and b"password is required" in exchange.stderr:
                raise BecomeError(
                    f"sudo on {self.host.name} needs a password: set GPUPROV_BECOME_PASSWORD or "
                    "pass --ask-become-pass")
            raise BecomeError(f"sudo failed on {self.host.name}: "
                              f"{exchange.stderr.decode('utf-8', 'replace').strip()[:300]}")
        return CommandResult(rc, bytes(exchange.stdout), bytes(exchange.stderr),
                             time.monotonic() - started)

    def _execute(self, command: str, exchange: _Exchange, deadline: Optional[float],
                 timeout: Optional[float], cancel: Optional[threading.Event]) -> int:
        raise NotImplementedError

    def _stop(self, pid: Optional[int], become: bool) -> None:
        """Stop a cancelled command's process group on the host (best effort, bounded)."""
        if pid is None:
            return
        script = f"kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null; true"
        try:
            self.run(script, become=become, timeout=STOP_TIMEOUT_S, cancellable=False)
        except Exception:  # noqa: BLE001 - the host may be gone too; the run stops regardless
            pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        """Stop an `open` in progress in another thread (opening a local one is instant)."""

    def describe(self) -> str:
        """What the run log records about the connection."""
        return "local (no SSH)"


class SSHConnection(BaseConnection):
    """A host reached over SSH through Fabric, with our host key checks."""

    def __init__(self, host: Host, timeouts: Timeouts, known_hosts: KnownHosts,
                 become_password: Optional[str] = None, gateway: "SSHConnection | None" = None):
        super().__init__(host, timeouts, become_password)
        self.known_hosts = known_hosts
        self.gateway = gateway
        self.fabric = None
        self.is_root = host.user == "root"
        self._sock: Optional[socket.socket] = None
        self._abort_lock = threading.Lock()
        self._aborted = False

    def abort(self) -> None:
        """Stop an `open` in progress in another thread (the run was cancelled): shutting the
        socket down ends a blocked TCP connect, banner wait, key exchange or login at once,
        and `open` raises `Interrupted` instead of waiting out its timeouts."""
        with self._abort_lock:
            self._aborted = True
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # not connected yet or already closed
                pass
        if self.gateway is not None:
            self.gateway.abort()

    def open(self) -> "SSHConnection":
        """Connect and authenticate, or raise `Unreachable` with the reason (`Interrupted`
        when `abort` stopped it)."""
        try:
            return self._open()
        except Unreachable:
            if self._aborted:
                raise Interrupted("interrupted while connecting") from None
            raise

    def _open(self) -> "SSHConnection":
        connect_kwargs = {"banner_timeout": self.timeouts.banner,
                          "auth_timeout": self.timeouts.auth,
                          "channel_timeout": self.timeouts.auth,
                          "transport_factory": _transport}
        if self.host.identity_file:
            path = os.path.expanduser(self.host.identity_file)
            key = _private_key(path)
            if key is not None:
                connect_kwargs["pkey"] = key
            else:  # paramiko reads it again and reports what is wrong with it
                connect_kwargs["key_filename"] = path
        where = f"{self.host.address}:{self.host.port}"
        if self.gateway is not None:
            self.gateway.open()
        else:
            connect_kwargs["sock"] = self._tcp_socket(where)
        # Fabric's connect_timeout bounds paramiko's whole negotiation (the TCP connect above
        # has its own): when it was shorter than the banner wait, a silent server surfaced as
        # a bare "No existing session" before the banner timeout could say what happened.
        negotiation_s = int(max(1, self.timeouts.banner) + KEX_GRACE_S)
        self.fabric = _fabric_connection_class()(
            self.host.address, user=self.host.user, port=self.host.port,
            config=_fabric_config(), connect_timeout=negotiation_s,
            connect_kwargs=connect_kwargs, gateway=self.gateway.fabric if self.gateway else None)
        self.known_hosts.install(self.fabric.client, self.host.name)
        try:
            self.fabric.open()
        except HostKeyError as exc:
            raise Unreachable(str(exc)) from None
        except paramiko.BadHostKeyException as exc:
            name = lookup_name(self.host.address, self.host.port)
            raise Unreachable(self.known_hosts.changed_message(self.host.name, name, exc)) from None
        except paramiko.AuthenticationException as exc:
            raise Unreachable(f"login as {self.fabric.user} on {where} failed: {exc}. Check the "
                              "user and identity_file in the inventory") from None
        except paramiko.ssh_exception.NoValidConnectionsError:
            raise Unreachable(f"connection to {where} refused (is sshd running there, "
                              "and the port right?)") from None
        except socket.timeout:
            raise Unreachable(f"no answer from {where} within {self.timeouts.connect:g} s "
                              "(connect timeout)") from None
        except paramiko.SSHException as exc:
            text = str(exc)
            if "banner" in text.lower():
                text = (f"{where} accepted TCP but sent no SSH banner within "
                        f"{self.timeouts.banner:g} s")
            elif text == "No existing session":  # start_client gave up waiting
                text = (f"{where} sent its SSH banner but the key exchange did not finish "
                        f"within {negotiation_s} s")
            raise Unreachable(f"SSH to {where} failed: {text}") from None
        except EOFError:
            raise Unreachable(f"SSH to {where} failed: the server closed the connection "
                              "during login") from None
        except OSError as exc:
            raise Unreachable(f"cannot connect to {where}: {exc.strerror or exc}") from None
        self.fabric.transport.set_keepalive(max(1, int(self.timeouts.keepalive)))
        return self

    def _tcp_socket(self, where: str) -> socket.socket:
        """The TCP connection, made here so it can have TCP_NODELAY: paramiko leaves Nagle on,
        which delays every small SSH message (a new channel, a command) by ~40 ms."""
        try:
            sock = self._connect_tcp()
        except ConnectionRefusedError:
            raise Unreachable(f"connection to {where} refused (is sshd running there, "
                              "and the port right?)") from None
        except socket.timeout:
            raise Unreachable(f"no answer from {where} within {self.timeouts.connect:g} s "
                              "(connect timeout)") from None
        except OSError as exc:
            raise Unreachable(f"cannot connect to {where}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if _QUICKACK is not None:
            sock = _QuickAckSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        self._track(sock)
        return sock

    def _track(self, sock: socket.socket) -> None:
        """Make `sock` the one `abort` shuts down; raise if the abort came first."""
        with self._abort_lock:
            self._sock = sock
            if self._aborted:
                sock.close()
                raise Interrupted("interrupted while connecting")

    def _connect_tcp(self) -> socket.socket:
        """socket.create_connection, with each socket known to `abort` while it connects
        (and from then on: the one that connects is the one paramiko uses)."""
        error: Optional[OSError] = None
        for family, kind, proto, _, address in socket.getaddrinfo(
                self.host.address, self.host.port, type=socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            self._track(sock)
            try:
                sock.settimeout(self.timeouts.connect)
                sock.connect(address)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
        raise error if error is not None else OSError(f"no address for {self.host.address}")

    def _execute(self, command, exchange, deadline, timeout, cancel) -> int:
        transport = self.fabric.transport
        try:
            channel = transport.open_session(timeout=self.timeouts.auth)
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise ConnectionLost(f"SSH session to {self.host.name} lost: {exc}") from None
        try:
            return self._pump(channel, exchange, deadline, timeout, cancel)
        finally:
            channel.close()

    def _pump(self, channel, exchange, deadline, timeout, cancel) -> int:
        stdin_closed = False
        liveness = _Liveness(self.fabric.transport, self.timeouts.keepalive)
        cancelled_at = None
        while True:
            cancelled_at = _check_cancel(cancel, exchange, cancelled_at)
            while exchange.to_send:
                channel.sendall(exchange.to_send.pop(0))
            if exchange.close_stdin and not stdin_closed:
                channel.shutdown_write()
                stdin_closed = True
            now = time.monotonic()
            if deadline and now > deadline:
                raise CommandTimeout(f"timed out after {timeout:g} s")
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - now))
            if channel.eof_received:
                # After EOF paramiko keeps the channel's pipe readable for good, so select
                # would return at once until the exit status comes: wait for that instead
                # (a spinning thread also starves the others of the GIL).
                channel.status_event.wait(wait)
            else:
                select.select([channel], [], [], wait)
            got = False
            while channel.recv_ready():
                exchange.feed_stdout(channel.recv(65536))
                got = True
            while channel.recv_stderr_ready():
                exchange.feed_stderr(channel.recv_stderr(65536))
                got = True
            if channel.exit_status_ready() and not channel.recv_ready() \
                    and not channel.recv_stderr_ready() and (channel.eof_received or channel.closed):
                rc = channel.recv_exit_status()
                if rc == -1 and not channel.eof_received:
                    # Closed with no EOF and no exit status: the transport died under the
                    # channel (paramiko unlinks channels before it marks itself inactive).
                    raise ConnectionLost(f"SSH session to {self.host.name} lost while a command "
                                         f"ran: {_transport_error(self.fabric.transport)}")
                return rc
            if not self.fabric.transport.is_active():
                raise ConnectionLost(f"SSH session to {self.host.name} closed while a command ran")
            if not liveness.alive(heard=got):
                self.fabric.transport.close()
                raise ConnectionLost(
                    f"{self.host.name} stopped answering (no reply to SSH keepalive within "
                    f"{liveness.limit:g} s): link down or host gone")

    def describe(self) -> str:
        where = (f"{self.fabric.user}@{self.host.address}:{self.host.port}"
                 f"{' via ' + self.gateway.host.name if self.gateway else ''}")
        try:
            transport = self.fabric.transport
            key = transport.get_remote_server_key()
            return (f"{where}: {transport.remote_version}, {transport.remote_cipher}, host key "
                    f"{key.get_name()} {key.fingerprint}")
        except Exception:  # noqa: BLE001 - the link may drop right after login; commands say so
            return where

    def close(self) -> None:
        if self.fabric is not None:
            self.fabric.close()
        if self.gateway is not None:
            self.gateway.close()


class LocalConnection(BaseConnection):
    """This machine, through /bin/sh; used for `connection: local` hosts."""

    def __init__(self, host: Host, timeouts: Timeouts, become_password: Optional[str] = None):
        super().__init__(host, timeouts, become_password)
        self.is_root = os.geteuid() == 0

    def open(self) -> "LocalConnection":
        return self

    def _execute(self, command, exchange, deadline, timeout, cancel) -> int:
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        streams = {proc.stdout.fileno(): exchange.feed_stdout,
                   proc.stderr.fileno(): exchange.feed_stderr}
        stdin_closed = False
        cancelled_at = None
        try:
            while streams:
                cancelled_at = _check_cancel(cancel, exchange, cancelled_at)
                while exchange.to_send:
                    try:
                        proc.stdin.write(exchange.to_send.pop(0))
                        proc.stdin.flush()
                    except BrokenPipeError:
                        exchange.to_send.clear()
                if exchange.close_stdin and not stdin_closed:
                    proc.stdin.close()
                    stdin_closed = True
                now = time.monotonic()
                if deadline and now > deadline:
                    raise CommandTimeout(f"timed out after {timeout:g} s")
                wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - now))
                readable, _, _ = select.select(list(streams), [], [], wait)
                for fd in readable:
                    data = os.read(fd, 65536)
                    if data:
                        streams[fd](data)
                    else:
                        del streams[fd]
            return proc.wait()
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe and not pipe.closed:
                    pipe.close()


def _check_cancel(cancel: Optional[threading.Event], exchange: _Exchange,
                  cancelled_at: Optional[float]) -> Optional[float]:
    """Raise `Interrupted` once `cancel` is set and the command's PID is known (or it did not
    come within CANCEL_PID_WAIT_S); return when the cancel was first seen."""
    if cancel is None or not cancel.is_set():
        return None
    now = time.monotonic()
    if cancelled_at is None:
        cancelled_at = now
    if exchange.pid is not None or now - cancelled_at >= CANCEL_PID_WAIT_S:
        raise Interrupted("interrupted")
    return cancelled_at


def _transport_error(transport) -> str:
    exc = transport.get_exception() if transport is not None else None
    if exc is None or isinstance(exc, EOFError):
        return "the server closed the connection"
    return str(exc) or type(exc).__name__


class _Liveness:
    """Notices a dead link while a command is silent.

    paramiko's own keepalives ask for no reply, so they cannot tell a dead peer from a quiet one;
    after `interval` seconds of silence this sends a global request that the server must answer
    (OpenSSH replies even to unknown requests) and declares the link dead when no answer comes
    within `limit` seconds.
    """

    def __init__(self, transport: paramiko.Transport, interval: float):
        self.transport = transport
        self.interval = max(1.0, interval)
        self.limit = max(2 * self.interval, 10.0)
        self.last_heard = time.monotonic()
        self.ping_sent: Optional[float] = None
        self.ping_done = threading.Event()

    def alive(self, heard: bool) -> bool:
        now = time.monotonic()
        if heard or self.ping_done.is_set():
            self.last_heard = now
            if self.ping_done.is_set():
                self.ping_sent = None
                self.ping_done.clear()
        if self.ping_sent is None:
            if now - self.last_heard >= self.interval:
                self.ping_sent = now
                threading.Thread(target=self._ping, daemon=True).start()
            return True
        return now - self.ping_sent < self.limit

    def _ping(self) -> None:
        try:
            self.transport.global_request("keepalive@openssh.com", wait=True)
        except Exception:  # noqa: BLE001 - a failed ping is judged by its missing answer
            return
        if self.transport.is_active():
            self.ping_done.set()


_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges what it receives at once.

    Right after login OpenSSH sends two messages the client never answers (a hostkeys-00
    request, a debug line about the key's options). The client's kernel delays its ACK for them
    (up to 40 ms), and sshd's Nagle algorithm holds the reply to our first channel open until
    that ACK: every host lost ~45 ms before its first command. Linux clears TCP_QUICKACK as
    it goes, so it is set again after every read."""

    def recv(self, size: int, flags: int = 0) -> bytes:
        data = super().recv(size, flags)
        self.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return data


def _transport(sock, **kwargs) -> paramiko.Transport:
    """A paramiko Transport that offers AES-GCM first: an AEAD cipher needs no separate MAC,
    which paramiko checks in Python for every packet (~1 ms less CPU per host). Servers
    without it still agree on paramiko's other ciphers."""
    transport = paramiko.Transport(sock, **kwargs)
    options = transport.get_security_options()
    gcm = tuple(c for c in options.ciphers if c.endswith("-gcm@openssh.com"))
    options.ciphers = gcm + tuple(c for c in options.ciphers if c not in gcm)
    return transport


@functools.lru_cache(maxsize=None)
def _fabric_config():
    """One Fabric configuration (it reads ~/.ssh/config) shared by every connection of a run;
    the connections only read it (see `_fabric_connection_class`)."""
    from fabric import Config

    return Config()


@functools.lru_cache(maxsize=None)
def _fabric_connection_class():
    """Fabric's Connection, made safe to build in many threads from one shared Config.

    Fabric 3.2's constructor assigns `self.inline_ssh_env`, an attribute the class does not
    declare, so invoke's DataProxy stores it in the Config instead and re-merges that Config,
    emptying it for a moment: a host built in another thread then read `config.gateway` from
    the empty dict and failed with "No attribute or config key found for 'gateway'" (seen with
    64 hosts at once). Declared here, the value stays on the connection object. Imported
    lazily: fabric is the slowest import of a run."""
    from fabric import Connection

    class _Connection(Connection):
        inline_ssh_env = None

    return _Connection


@functools.lru_cache(maxsize=64)
def _private_key(path: str) -> Optional[paramiko.PKey]:
    """The key in `path`, read once per run rather than by every connection (paramiko tries
    each key type in turn, reading the file each time); None when it cannot be read without
    help (missing, encrypted, unknown type)."""
    try:
        return paramiko.PKey.from_path(path)
    except Exception:  # noqa: BLE001 - encrypted keys raise TypeError, unknown types Exception
        return None


def connect(host: Host, hosts: dict, timeouts: Timeouts, known_hosts: KnownHosts,
            become_password: Optional[str] = None) -> BaseConnection:
    """Open the right connection for `host` (jump hosts chained through the inventory)."""
    return connection_for(host, hosts, timeouts, known_hosts, become_password).open()


def connection_for(host: Host, hosts: dict, timeouts: Timeouts, known_hosts: KnownHosts,
                   become_password: Optional[str] = None) -> BaseConnection:
    """The right connection for `host`, not opened yet (so a runner can `abort` the open)."""
    if host.is_local:
        return LocalConnection(host, timeouts, become_password)
    return _ssh(host, hosts, timeouts, known_hosts, become_password)


def _ssh(host: Host, hosts: dict, timeouts: Timeouts, known_hosts: KnownHosts,
         become_password: Optional[str] = None) -> SSHConnection:
    """An unopened connection to `host` through its chain of jump hosts (the inventory refuses
    cycles), each hop tunnelled through the one before."""
    gateway = _ssh(hosts[host.jump], hosts, timeouts, known_hosts) if host.jump else None
    return SSHConnection(host, timeouts, known_hosts, become_password, gateway)
