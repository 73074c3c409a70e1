"""Which connection a host gets: `connection_for` (SSH through its jump hosts, or local).

The engine reaches transports only through this module: `connection_for`, a connection's
`open`/`run`/`close`/`abort`/`describe`, the `CommandResult` it returns, the `LineSplitter` for
its streamed output and the errors it raises (re-exported here from `remote.ground.errors`, and
paramiko's `SSHException` for what a forward can raise), host-key trust (`KnownHosts`), the
fleet cache's forwards (`RemoteForwards`, `ssh_transport`) and the tarball transfers (`pack`,
`unpack_command`, `pull`, `COMMIT_FILE`). The I/O loop lives in `base`, the transports in `ssh`
and `local`.
"""
from __future__ import annotations

from typing import Optional

from paramiko import SSHException

from ..config.inventory import Host, Timeouts
from ..ground.errors import BecomeError, CommandTimeout, ConnectionLost, Interrupted, OutputTooLarge, Unreachable
from .base import BaseConnection, CommandResult, LineSplitter
from .forward import RemoteForwards, ssh_transport
from .hostkeys import KnownHosts
from .local import LocalConnection
from .ssh import SSHConnection
from .sshconfig import MAX_HOPS, jump_host, resolve
from .transfer import COMMIT_FILE, PullLimits, pack, pack_zip, package_files, publish_pull, pull, unpack_command

__all__ = ["COMMIT_FILE", "BaseConnection", "BecomeError", "CommandResult", "CommandTimeout",
           "ConnectionLost", "Interrupted", "KnownHosts", "LineSplitter", "LocalConnection",
           "OutputTooLarge", "PullLimits", "RemoteForwards", "SSHConnection", "SSHException",
           "Unreachable", "connection_for", "pack", "package_files", "publish_pull", "pull", "ssh_transport",
           "unpack_command", "pack_zip"]


def connection_for(host: Host, hosts: dict[str, Host], timeouts: Timeouts,
                   known_hosts: KnownHosts,
                   become_password: Optional[str] = None) -> BaseConnection:
    """The right connection for `host`, not opened yet (so the engine can `abort` the open);
    sudo gets the host's own become password where the inventory gives one, else the run's."""
    if host.become_password is not None:
        become_password = host.become_password
    if host.is_local:
        return LocalConnection(host, timeouts, become_password)
    return _ssh(host, hosts, timeouts, known_hosts, become_password)


def _ssh(host: Host, hosts: dict[str, Host], timeouts: Timeouts, known_hosts: KnownHosts,
         become_password: Optional[str] = None, hops: int = 0) -> SSHConnection:
    """An unopened connection to `host`, with what ~/.ssh/config says for it (`sshconfig`),
    through its chain of jump hosts (the inventory's `jump`, else ssh_config's ProxyJump; the
    inventory refuses cycles, `sshconfig` a chain too long), each hop tunnelled through the
    one before."""
    host = resolve(host)
    jump = jump_host(host, hosts)
    if hops > MAX_HOPS:
        raise Unreachable(f"{host.name}: more than {MAX_HOPS} jump hosts (a loop of ProxyJump "
                          "in ~/.ssh/config?)")
    gateway = _ssh(jump, hosts, timeouts, known_hosts, hops=hops + 1) if jump else None
    return SSHConnection(host, timeouts, known_hosts, become_password, gateway)
