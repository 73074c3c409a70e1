"""Hosts reached over SSH: Fabric's `Connection` (jump hosts) with host keys checked by
`hostkeys.KnownHosts`, connect/banner/auth timeouts and keepalives; each command runs on its
own channel of the one transport. The host comes with ~/.ssh/config applied already
(`sshconfig.resolve`); Fabric's own ssh_config lookup is off, so nothing is applied twice.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any, Optional

import paramiko
from paramiko.packet import Packetizer

from ..config.inventory import Host, Timeouts
from ..ground.errors import ConnectionLost, HostKeyError, Interrupted, Unreachable
from .base import BaseConnection, RunningCommand, Stream, once_per_process, wait_readable
from .hostkeys import KnownHosts, lookup_name
from .sshconfig import DEFAULT_PORT

# paramiko logs failures (a missing banner, a reset) with tracebacks; with no handler configured,
# Python's last-resort handler would print them on the user's terminal. Each failure reaches the
# user once, as the host's one-line reason (Unreachable, ConnectionLost).
logging.getLogger("paramiko").addHandler(logging.NullHandler())

KEX_GRACE_S = 10  # after the banner came, the key exchange has this much longer
# A session sshd refused with "connect failed" (RFC 4254 5.1: SSH_OPEN_CONNECT_FAILED, what
# OpenSSH answers past MaxSessions) is asked for again after each of these waits, 1.9 s in all.
# Measured (bench/one_session_host.py, MaxSessions 1, banner, chatty ~/.ssh/rc, a new session
# right after the last one closed): refused at first 97% to 99% of the time; it went through
# after median 0.054 s, max 0.099 s idle; median 0.095 s, max 0.583 s on 2 cores under load 15.
SESSION_RETRY_DELAYS_S = (0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 0.64)


class SSHConnection(BaseConnection):
    """A host reached over SSH through Fabric, with our host key checks."""

    def __init__(self, host: Host, timeouts: Timeouts, known_hosts: KnownHosts,
                 become_password: Optional[str] = None, gateway: Optional[SSHConnection] = None):
        super().__init__(host, timeouts, become_password)
        self.known_hosts = known_hosts
        self.gateway = gateway
        self.fabric: Any = None  # fabric.Connection once `open` ran (fabric ships no types)
        self.is_root = host.user == "root"
        self.port: int = host.port or DEFAULT_PORT
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

    def open(self) -> SSHConnection:
        """Connect and authenticate, or raise `Unreachable` with the reason (`Interrupted`
        when `abort` stopped it)."""
        try:
            return self._open()
        except Unreachable:
            if self._aborted:
                raise Interrupted("interrupted while connecting") from None
            raise

    def _open(self) -> SSHConnection:
        connect_kwargs = {"banner_timeout": self.timeouts.banner,
                          "auth_timeout": self.timeouts.auth,
                          "channel_timeout": self.timeouts.auth,
                          "transport_factory": _ClientTransport}
        identity = os.path.expanduser(self.host.identity_file) if self.host.identity_file \
            else None
        connect_kwargs.update(_key_sources(identity, self.host.ssh_agent))
        if self.host.password is not None:  # paramiko tries it after the keys
            connect_kwargs["password"] = self.host.password
        where = f"{self.host.address}:{self.port}"
        if self.gateway is not None:
            self._open_gateway()
        else:
            connect_kwargs["sock"] = self._tcp_socket(where)
        # Fabric's connect_timeout bounds paramiko's whole negotiation (the TCP connect above
        # has its own): when it was shorter than the banner wait, a silent server surfaced as
        # a bare "No existing session" before the banner timeout could say what happened.
        negotiation_s = int(max(1, self.timeouts.banner) + KEX_GRACE_S)
        self.fabric = _fabric_connection_class()(
            self.host.address, user=self.host.user, port=self.port,
            config=_fabric_config(), connect_timeout=negotiation_s,
            connect_kwargs=connect_kwargs, gateway=self.gateway.fabric if self.gateway else None)
        if identity is not None:
            # The configured key (the inventory's, else ssh_config's IdentityFile) is the
            # only one offered (OpenSSH's IdentitiesOnly), whatever Fabric's config adds.
            self.fabric.connect_kwargs.pop("key_filename", None)
            if "pkey" not in connect_kwargs:
                self.fabric.connect_kwargs["key_filename"] = identity
        self.known_hosts.install(self.fabric.client, self.host.name,
                                 lookup_name(self.fabric.host, self.fabric.port))
        try:
            self.fabric.open()
        except HostKeyError as exc:
            raise Unreachable(str(exc)) from None
        except paramiko.BadHostKeyException as exc:
            name = lookup_name(self.host.address, self.port)
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

    def _open_gateway(self) -> None:
        """Open the jump host; when that fails, the jump host is to blame, not this host."""
        assert self.gateway is not None
        gateway = self.gateway
        try:
            gateway.open()
        except Unreachable as exc:
            if self._aborted or str(exc).startswith("jump host "):
                raise
            raise Unreachable(f"jump host {gateway.host.name} "
                              f"({gateway.host.address}:{gateway.port}) failed, so "
                              f"{self.host.name} was not tried: {exc}") from None

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
                self.host.address, self.port, type=socket.SOCK_STREAM):
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

    def _start(self, command: str) -> RunningCommand:
        transport: paramiko.Transport = self.fabric.transport
        try:
            channel = self._open_session(transport)
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise ConnectionLost(f"SSH session to {self.host.name} lost: {exc}") from None
        return _SSHCommand(channel, transport, self.host.name,
                           _Liveness(transport, self.timeouts.keepalive))

    def _open_session(self, transport: paramiko.Transport) -> paramiko.Channel:
        """A new session channel. One that sshd refuses with "connect failed" is asked for
        again after SESSION_RETRY_DELAYS_S: a host with `MaxSessions 1` refuses a session
        while it still tears the previous one down (the client has closed it already)."""
        for delay in (*SESSION_RETRY_DELAYS_S, None):
            try:
                return transport.open_session(timeout=self.timeouts.auth)
            except paramiko.ChannelException as exc:
                if exc.code != paramiko.common.OPEN_FAILED_CONNECT_FAILED:
                    raise
                if delay is None:
                    raise paramiko.SSHException(
                        f"the server refused a new session ({exc.text}) "
                        f"{len(SESSION_RETRY_DELAYS_S) + 1} times over "
                        f"{sum(SESSION_RETRY_DELAYS_S):g} s (its MaxSessions?)") from None
                # A plain sleep, not the run's cancel event: the `kill` that stops a cancelled
                # command needs a session too. 1.9 s at most.
                time.sleep(delay)
        raise AssertionError("unreachable: the last try raises")

    def describe(self) -> str:
        where = (f"{self.fabric.user}@{self.host.address}:{self.port}"
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


class _SSHCommand(RunningCommand):
    """A command on its own channel of the host's transport."""

    def __init__(self, channel: paramiko.Channel, transport: paramiko.Transport, host_name: str,
                 liveness: _Liveness):
        self.channel = channel
        self.transport = transport
        self.host_name = host_name
        self.liveness = liveness
        self.stdin_gone = False

    def write_stdin(self, data: bytes) -> None:
        # at most STDIN_PIECE bytes (base.py: the loop sends a command's stdin in pieces)
        if self.stdin_gone:
            return
        try:
            self.channel.sendall(data)
        except OSError:    # the channel closed: the command exited, it reads no more
            self.stdin_gone = True

    def close_stdin(self) -> None:
        self.channel.shutdown_write()

    def read(self, wait: float) -> list[tuple[Stream, bytes]]:
        channel = self.channel
        if channel.eof_received:
            # After EOF paramiko keeps the channel's pipe readable for good, so poll
            # would return at once until the exit status comes: wait for that instead
            # (a spinning thread also starves the others of the GIL).
            channel.status_event.wait(wait)
        else:
            wait_readable([channel.fileno()], wait)
        chunks: list[tuple[Stream, bytes]] = []
        while channel.recv_ready():
            chunks.append(("stdout", channel.recv(65536)))
        while channel.recv_stderr_ready():
            chunks.append(("stderr", channel.recv_stderr(65536)))
        return chunks

    def exit_status(self) -> Optional[int]:
        channel = self.channel
        if channel.exit_status_ready() and not channel.recv_ready() \
                and not channel.recv_stderr_ready() and (channel.eof_received or channel.closed):
            rc = channel.recv_exit_status()
            if rc == -1 and not channel.eof_received:
                # Closed with no EOF and no exit status: the transport died under the
                # channel (paramiko unlinks channels before it marks itself inactive).
                raise ConnectionLost(f"SSH session to {self.host_name} lost while a command "
                                     f"ran: {_transport_error(self.transport)}")
            return rc
        return None

    def check_alive(self, heard: bool) -> None:
        if not self.transport.is_active():
            raise ConnectionLost(f"SSH session to {self.host_name} closed while a command ran")
        if not self.liveness.alive(heard=heard):
            self.transport.close()
            raise ConnectionLost(
                f"{self.host_name} stopped answering (no reply to SSH keepalive within "
                f"{self.liveness.limit:g} s): link down or host gone")

    def close(self) -> None:
        # Closing a channel sends a message: on a link that died under the command (seen in a
        # CI rehearsal under load: a pull stopped at its cap, then the peer gone) paramiko
        # raises EOFError here, and that masked the error the command ended with. Whether the
        # session is still there is run()'s next question (transport.is_active()).
        try:
            self.channel.close()
        except (EOFError, OSError, paramiko.SSHException):
            pass


def _transport_error(transport: paramiko.Transport) -> str:
    exc = transport.get_exception()
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


_QUICKACK: Optional[int] = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges what it receives at once.

    Right after login OpenSSH sends two messages the client never answers (a hostkeys-00
    request, a debug line about the key's options). The client's kernel delays its ACK for them
    (up to 40 ms), and sshd's Nagle algorithm holds the reply to our first channel open until
    that ACK: every host lost ~45 ms before its first command. Linux clears TCP_QUICKACK as
    it goes, so it is set again after every read."""

    def recv(self, size: int, flags: int = 0) -> bytes:
        data = super().recv(size, flags)
        assert _QUICKACK is not None  # only made where the option exists
        self.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return data


class _ClientTransport(paramiko.Transport):
    """paramiko's Transport, with less CPU per connection:
    - AES-GCM offered first: an AEAD cipher needs no separate MAC, which paramiko checks in
      Python for every packet (~1 ms less CPU per host). Servers without it still agree on
      paramiko's other ciphers.
    - the handshake deadline kept by the packetizer itself (`_DeadlinePacketizer`);
    - OpenSSH's debug message after login (the key's options) formatted only when paramiko's
      debug log is on: `util.safe_string` escapes it byte by byte in Python (0.08 ms a host).
    The last two: about 0.5 ms less control CPU per extra converged host (bench/compare.py
    --fleet 1,64; alternating runs)."""

    def __init__(self, sock: socket.socket, **kwargs: Any):
        super().__init__(sock, packetizer_class=_DeadlinePacketizer, **kwargs)
        options = self.get_security_options()
        gcm = tuple(c for c in options.ciphers if c.endswith("-gcm@openssh.com"))
        options.ciphers = gcm + tuple(c for c in options.ciphers if c not in gcm)

    def _parse_debug(self, m: paramiko.Message) -> None:
        if self.logger.isEnabledFor(logging.DEBUG):
            super()._parse_debug(m)  # type: ignore[misc]  # private, so not in the stubs


class _DeadlinePacketizer(Packetizer):
    """paramiko's Packetizer with the handshake timeout as a deadline that its reads check
    (they wake at least every 0.1 s), instead of a `threading.Timer`: a thread started and
    stopped for every connection (0.18 ms of CPU alone), and cancelled at every packet read."""

    _deadline: Optional[float] = None
    _handshake_done = False

    def start_handshake(self, timeout: float) -> None:
        if self._deadline is None:
            self._deadline = time.monotonic() + timeout

    def handshake_timed_out(self) -> bool:
        return (self._deadline is not None and not self._handshake_done
                and time.monotonic() > self._deadline)

    def complete_handshake(self) -> None:
        if self._deadline is not None:
            self._handshake_done = True


@once_per_process
def _fabric_config() -> Any:
    """One Fabric configuration shared by every connection of a run; the connections only read
    it (see `_fabric_connection_class`). Its ssh_config is empty: `sshconfig` applied the
    user's already."""
    from fabric import Config

    return Config(ssh_config=paramiko.SSHConfig())


@once_per_process
def _fabric_connection_class() -> Any:
    """Fabric's Connection, made safe to build in many threads from one shared Config.

    Fabric 3.2's constructor assigns `self.inline_ssh_env`, an attribute the class does not
    declare, so invoke's DataProxy stores it in the Config instead and re-merges that Config,
    emptying it for a moment: a host built in another thread then read `config.gateway` from
    the empty dict and failed with "No attribute or config key found for 'gateway'" (seen with
    64 hosts at once). Declared here, the value stays on the connection object. Imported
    lazily: fabric is the slowest import of a run."""
    from fabric import Connection

    class _Connection(Connection):  # type: ignore[misc]  # fabric ships no types
        inline_ssh_env = None

        def __dir__(self) -> list[str]:
            # invoke's DataProxy.__setattr__ asks `name in dir(self)` for each of the 13
            # attributes the constructor sets, and the default dir() walks Fabric's whole
            # class hierarchy every time: 0.3 ms of CPU per connection. The same names: the
            # class's (computed once) and the instance's own.
            return [*class_names, *self.__dict__]

    class_names = tuple(dir(_Connection))
    return _Connection


def _key_sources(identity: Optional[str], agent: Optional[bool]) -> dict[str, Any]:
    """paramiko's connect() arguments that say which keys are offered to the server.

    paramiko, left to itself, offers the given key, then every key of the ssh-agent, then
    ~/.ssh/id_* (`allow_agent`, `look_for_keys`: both True by default, SSHClient.connect), so a
    host that refuses the inventory's key learns every identity the operator holds. With an
    `identity_file` only that key is offered, as OpenSSH's `IdentitiesOnly yes`; the agent
    only where the host says `ssh_agent: true`. Without one, as `ssh` does: the agent (unless
    `ssh_agent: false`), then ~/.ssh/id_*."""
    if identity is None:
        return {"allow_agent": agent is not False, "look_for_keys": True}
    sources: dict[str, Any] = {"allow_agent": agent is True, "look_for_keys": False}
    key = _private_key(identity)
    if key is not None:
        sources["pkey"] = key
    else:  # paramiko reads it again and reports what is wrong with it
        sources["key_filename"] = identity
    return sources


@once_per_process
def _private_key(path: str) -> Optional[paramiko.PKey]:
    """The key in `path`, read once per run rather than by every connection (paramiko tries
    each key type in turn, reading the file each time); None when it cannot be read without
    help (missing, encrypted, unknown type)."""
    try:
        return paramiko.PKey.from_path(path)
    except Exception:  # noqa: BLE001 - encrypted keys raise TypeError, unknown types Exception
        return None


