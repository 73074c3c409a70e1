"""A remote port forward over gpuprov's own SSH connections, for a host that cannot reach a
service (the fleet cache) that another host of the inventory runs.

`RemoteForwards(host_conn, target_conn).add(port)` asks the host's sshd for a listening port on
the host's loopback (`ssh -R 127.0.0.1:0:...`, the port the server picks); each connection made
to it arrives over the host's SSH connection, and the control carries it on over the target's SSH
connection to `127.0.0.1:port` there (a `direct-tcpip` channel, as `ssh -L` opens). Nothing
listens on the control machine, and the two hosts never need a route to each other.

What a host opens is untrusted: a host that opened 290 to 750 connections at once made the
control run about 260 threads and print Python tracebacks. Connections carried at once are
capped per host (`PER_HOST_CHANNELS`) and over all hosts (`TOTAL_CHANNELS`); one past a cap is
closed at once, and each burst of refusals is told once (`on_refused`), not per connection. A
carried connection is one thread; its two channels are waited on with poll(2), not select(2),
which fails on file descriptors of 1024 and more, and nothing a host does reaches the terminal
as a traceback.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import paramiko

from .base import BaseConnection, wait_readable

CHUNK = 256 * 1024
CONNECT_TIMEOUT_S = 10.0
# A host's apt and pip need a few connections at once: pip keeps at most 10 per index host
# (pip 23.2.1's pip/_internal/network/session.py mounts requests' HTTPAdapter with its default
# pool_maxsize, requests.adapters.DEFAULT_POOLSIZE = 10) and apt one per origin through a proxy
# (unsourced). 16 leaves room; more at once from one host is not a package download.
PER_HOST_CHANNELS = 16
# Over all hosts: 128 carried connections are 128 threads and 512 file descriptors (2 channels
# each, paramiko gives each channel a pipe for poll), half the default soft RLIMIT_NOFILE of
# 1024, with room left for the hosts' own SSH connections. Unsourced beyond that arithmetic.
TOTAL_CHANNELS = 128
# Refusals less than this far apart are one burst: told once.
BURST_GAP_S = 30.0


class ChannelBudget:
    """Connections carried at once over all forwards of a run, at most `limit`."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.used -= 1


FLEET_BUDGET = ChannelBudget(TOTAL_CHANNELS)


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
    transport, so this one handler tells the ports apart by the port a connection came in on.

    At most `per_host` connections are carried at once, and no more than `budget` allows over
    all hosts; the first refusal of a burst calls `on_refused` with one line saying why."""

    def __init__(self, host_conn: BaseConnection, target_conn: BaseConnection,
                 on_refused: Optional[Callable[[str], None]] = None,
                 per_host: int = PER_HOST_CHANNELS, budget: ChannelBudget = FLEET_BUDGET):
        self._host = ssh_transport(host_conn)
        self._target = ssh_transport(target_conn)
        self._targets: dict[int, int] = {}   # port on the host -> port on the target
        self._closed = threading.Event()
        self._channels: set[paramiko.Channel] = set()
        self._lock = threading.Lock()
        self._on_refused = on_refused
        self._per_host = per_host
        self._budget = budget
        self.active = 0  # connections carried now
        self.refused = 0  # connections refused over a cap, in all
        self._last_refused = float("-inf")

    def add(self, target_port: int) -> int:
        """A new port on the host's loopback for the target's `target_port`; returns it. Raises
        paramiko.SSHException when the server refuses (`AllowTcpForwarding no`)."""
        port = self._host.request_port_forward("127.0.0.1", 0, handler=self._accepted)
        self._targets[port] = target_port
        return port

    def _accepted(self, channel: paramiko.Channel, origin: tuple[str, int],
                  server: tuple[str, int]) -> None:
        # Called on paramiko's transport thread, which must never raise or block: opening the
        # far end takes a round trip, so each connection gets its own thread, within the caps.
        try:
            target_port = self._targets.get(server[1])
            if target_port is None or self._closed.is_set() or not self._admit():
                channel.close()
                return
            try:
                threading.Thread(target=self._carry, args=(channel, target_port), daemon=True,
                                 name=f"forward-{target_port}").start()
            except RuntimeError:  # no thread to be had: refused like one over the cap
                self._release()
                channel.close()
        except Exception:  # noqa: BLE001 - a host's connection must not break the transport
            channel.close()

    def _admit(self) -> bool:
        """Count one more carried connection, or refuse it (telling the first of a burst)."""
        why = None
        with self._lock:
            if self.active < self._per_host and self._budget.take():
                self.active += 1
                return True
            self.refused += 1
            now = time.monotonic()
            if now - self._last_refused > BURST_GAP_S:
                why = (f"fleet cache forward: refusing the host's connections past "
                       f"{self._per_host} at once ({self._budget.limit} over all hosts)")
            self._last_refused = now
        if why and self._on_refused is not None:
            self._on_refused(why)
        return False

    def _release(self) -> None:
        with self._lock:
            self.active -= 1
        self._budget.give()

    def _carry(self, near: paramiko.Channel, target_port: int) -> None:
        far: Optional[paramiko.Channel] = None
        try:
            far = self._target.open_channel("direct-tcpip", ("127.0.0.1", target_port),
                                            ("127.0.0.1", 0), timeout=CONNECT_TIMEOUT_S)
            with self._lock:
                self._channels |= {near, far}
            _pump(near, far, self._closed)
        except Exception:  # noqa: BLE001 - the service is down, a channel closed, no fd left:
            pass  # the host's client sees a closed connection, nothing reaches the terminal
        finally:
            with self._lock:
                self._channels -= {near, far}
            try:
                # Closing sends a message: on a transport already gone it raises EOFError
                # (seen in test_the_cap_over_all_hosts_is_shared_by_their_forwards), which
                # must neither reach the terminal nor keep this connection's place.
                near.close()
                if far is not None:
                    far.close()
            except Exception:  # noqa: BLE001 - see above
                pass
            finally:
                self._release()

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
            channels = list(self._channels)
        for channel in channels:
            try:
                channel.close()
            except (paramiko.SSHException, OSError, EOFError):
                pass  # its transport is gone: nothing left to tell


def _pump(a: paramiko.Channel, b: paramiko.Channel, closed: threading.Event) -> None:
    """Copy both ways until either side ends (HTTP clients and servers close whole
    connections, so the first end-of-file ends the pair) or the forward is closed."""
    peer = {a.fileno(): (a, b), b.fileno(): (b, a)}
    while not closed.is_set():
        for fd in wait_readable(list(peer), 1.0):
            source, sink = peer[fd]
            data = source.recv(CHUNK)
            if not data:
                return
            sink.sendall(data)
