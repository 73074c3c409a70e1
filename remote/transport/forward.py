"""A remote port forward over gpuprov's own SSH connections, for a host that cannot reach a
service (the fleet cache) that another host of the inventory runs.

`RemoteForwards(host_conn, target_conn).add(port)` asks the host's sshd for a listening port on
the host's loopback (`ssh -R 127.0.0.1:0:...`, the port the server picks); each connection made
to it arrives over the host's SSH connection, and the control carries it on over the target's SSH
connection to `127.0.0.1:port` there (a `direct-tcpip` channel, as `ssh -L` opens). Nothing
listens on the control machine, and the two hosts never need a route to each other.
"""
from __future__ import annotations

import select
import threading

import paramiko

from .base import BaseConnection

CHUNK = 256 * 1024
CONNECT_TIMEOUT_S = 10.0


def ssh_transport(conn: BaseConnection) -> paramiko.Transport:
    """`conn`'s live paramiko transport; OSError when it has none (local, closed or lost)."""
    fabric = getattr(conn, "fabric", None)
    transport = getattr(fabric, "transport", None)
    if not isinstance(transport, paramiko.Transport) or not transport.is_active():
        raise OSError(f"{conn.host.name} has no open SSH connection to forward over")
    return transport


class RemoteForwards:
    """Ports on `host_conn`'s loopback, each leading to 127.0.0.1:PORT on `target_conn`'s host,
    until `close`. One object per host connection: paramiko keeps one forward handler per
    transport, so this one handler tells the ports apart by the port a connection came in on."""

    def __init__(self, host_conn: BaseConnection, target_conn: BaseConnection):
        self._host = ssh_transport(host_conn)
        self._target = ssh_transport(target_conn)
        self._targets: dict[int, int] = {}   # port on the host -> port on the target
        self._closed = threading.Event()
        self._channels: set[paramiko.Channel] = set()
        self._lock = threading.Lock()

    def add(self, target_port: int) -> int:
        """A new port on the host's loopback for the target's `target_port`; returns it. Raises
        paramiko.SSHException when the server refuses (`AllowTcpForwarding no`)."""
        port = self._host.request_port_forward("127.0.0.1", 0, handler=self._accepted)
        self._targets[port] = target_port
        return port

    def _accepted(self, channel: paramiko.Channel, origin: tuple[str, int],
                  server: tuple[str, int]) -> None:
        # Called on paramiko's transport thread: opening the far end takes a round trip, so
        # each connection gets its own thread.
        target_port = self._targets.get(server[1])
        if target_port is None:
            channel.close()
            return
        threading.Thread(target=self._carry, args=(channel, target_port), daemon=True,
                         name=f"forward-{target_port}").start()

    def _carry(self, near: paramiko.Channel, target_port: int) -> None:
        try:
            far = self._target.open_channel("direct-tcpip", ("127.0.0.1", target_port),
                                            ("127.0.0.1", 0), timeout=CONNECT_TIMEOUT_S)
        except (paramiko.SSHException, OSError, EOFError):
            near.close()  # the client sees a closed connection: the service is down
            return
        with self._lock:
            self._channels |= {near, far}
        try:
            _pump(near, far, self._closed)
        finally:
            with self._lock:
                self._channels -= {near, far}
            near.close()
            far.close()

    def close(self) -> None:
        """Stop listening on the host and end the connections still open."""
        self._closed.set()
        for port in list(self._targets):
            if self._host.is_active():
                try:
                    self._host.cancel_port_forward("127.0.0.1", port)
                except (paramiko.SSHException, OSError, EOFError):
                    pass
        self._targets.clear()
        with self._lock:
            for channel in list(self._channels):
                channel.close()


def _pump(a: paramiko.Channel, b: paramiko.Channel, closed: threading.Event) -> None:
    """Copy both ways until either side ends (HTTP clients and servers close whole
    connections, so the first end-of-file ends the pair) or the forward is closed."""
    peer = {a: b, b: a}
    while not closed.is_set():
        ready, _, _ = select.select([a, b], [], [], 1.0)
        for channel in ready:
            data = channel.recv(CHUNK)
            if not data:
                return
            peer[channel].sendall(data)
