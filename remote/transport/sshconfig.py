"""`~/.ssh/config` honoured as ssh and Fabric honour it: a host's HostName, Port, User,
IdentityFile and ProxyJump, looked up by the address the inventory gives it (its name when it
gives none; Ansible's `ansible_host`), as `ssh ADDRESS` would look it up.

The files are Fabric's and OpenSSH's: ~/.ssh/config, then /etc/ssh/ssh_config, parsed into one
paramiko SSHConfig, whose lookup keeps the first value found for each key, as OpenSSH does.
paramiko ignores `Include` (paramiko/paramiko#1609, open; Debian's and Ubuntu's own
/etc/ssh/ssh_config starts with `Include /etc/ssh/ssh_config.d/*.conf`), so the files are read
here with their Includes in place, as ssh_config(5) says: several paths per line, glob
wildcards in lexical order, `~` expanded, relative paths under ~/.ssh (or /etc/ssh for the
system file), a path that matches nothing ignored, at most 16 deep (OpenSSH's
READCONF_MAX_DEPTH). An Include inside a Host or Match block applies only there; OpenSSH
then never matches the Host lines of the included file when the block does not match, which
one flat SSHConfig cannot say: such a file is refused rather than read wrongly.
This module is the one place they are applied: the Fabric connections themselves get an empty
ssh_config, so nothing is applied twice (Fabric would otherwise also look up the resolved
address, and its own ProxyJump would replace the socket made here).

Precedence: what the inventory says explicitly wins, then ssh_config, then the defaults
(port 22, the local user) — Fabric's own order (fabric/connection.py, Connection.__init__:
`user or ssh_config.get("user")`, `port or ssh_config.get("port")`; HostName replaces the
looked-up name) and OpenSSH's (options given on the command line, as Ansible passes
ansible_port and ansible_user, come before the files: ssh_config(5), "command-line options").
The inventory's `jump` wins over ProxyJump. An IdentityFile from ssh_config is the host's
configured key when the inventory names none: only that key is offered (IdentitiesOnly), as
for the inventory's `identity_file`.
"""
from __future__ import annotations

import dataclasses
import glob
import io
import os
import re
import shlex
from pathlib import Path
from typing import Any, Optional

import paramiko

from ..config.inventory import Host
from ..ground.errors import Unreachable
from .base import once_per_process

DEFAULT_PORT = 22
MAX_HOPS = 10  # ProxyJump hops in a chain; more is a loop in ssh_config (A via B via A)


USER_CONFIG = "~/.ssh/config"
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH (readconf.c)
# paramiko's SSHConfig.SETTINGS_REGEX: `Key value` or `Key=value`
_SETTING = re.compile(r"\s*(\w+)(?:\s*=\s*|\s+)(.+)")


def _with_includes(path: Path, folder: Path, depth: int = 0) -> list[str]:
    """`path`'s lines with each Include replaced by the lines of the files it names."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise Unreachable(f"cannot read {path}: {exc.strerror or exc}") from None
    lines: list[str] = []
    in_block = False
    for number, line in enumerate(text.splitlines(), 1):
        found = _SETTING.match(line)
        key = found.group(1).lower() if found else ""
        if key in ("host", "match"):
            in_block = True
        if key != "include" or found is None:
            lines.append(line)
            continue
        if depth >= MAX_INCLUDE_DEPTH:
            raise Unreachable(f"{path}:{number}: Include nested more than {MAX_INCLUDE_DEPTH} "
                              "deep (a file that includes itself?)")
        try:
            words = shlex.split(found.group(2))
        except ValueError as exc:
            raise Unreachable(f"{path}:{number}: Include: {exc}") from None
        for word in words:
            pattern = Path(os.path.expanduser(word))
            for name in sorted(glob.glob(str(pattern if pattern.is_absolute() else folder / pattern))):
                if not os.path.isfile(name):
                    continue
                included = _with_includes(Path(name), folder, depth + 1)
                if in_block and any((m := _SETTING.match(x)) and m.group(1).lower() in ("host", "match")
                                    for x in included):
                    raise Unreachable(f"{path}:{number}: Include of {name}, which has Host or "
                                      "Match lines of its own, inside a Host or Match block: "
                                      "gpuprov cannot apply it as OpenSSH does; include it at "
                                      "the top level")
                lines += included
    return lines


@once_per_process
def user_ssh_config() -> paramiko.SSHConfig:
    """~/.ssh/config and /etc/ssh/ssh_config with their Includes, once per process."""
    config = paramiko.SSHConfig()
    for name in (USER_CONFIG, SYSTEM_CONFIG):
        path = Path(os.path.expanduser(name))
        if not path.is_file():
            continue
        lines = _with_includes(path, path.parent)
        try:
            config.parse(io.StringIO("\n".join(lines) + "\n"))
        except Exception as exc:  # noqa: BLE001 - paramiko raises its ConfigParseError and others
            raise Unreachable(f"cannot read {name}: {exc}") from None
    return config


def resolve(host: Host) -> Host:
    """`host` with what ssh_config adds for its address (see the module's docstring)."""
    try:
        found: dict[str, Any] = dict(user_ssh_config().lookup(host.address))
    except Exception as exc:  # noqa: BLE001 - a Match exec that fails, a bad token
        raise Unreachable(f"~/.ssh/config for {host.address}: {exc}") from None
    if "proxycommand" in found and host.jump is None and "proxyjump" not in found:
        raise Unreachable(f"~/.ssh/config gives {host.address} a ProxyCommand, which gpuprov "
                          "does not run; use ProxyJump (or the inventory's jump)")
    port = host.port
    if port is None:
        try:
            port = int(found.get("port", DEFAULT_PORT))
        except ValueError:
            raise Unreachable(f"~/.ssh/config gives {host.address} Port "
                              f"{found['port']!r}, not a number") from None
    identity = host.identity_file
    if identity is None and found.get("identityfile"):
        identity = found["identityfile"][0]
    jump = host.jump
    if jump is None and found.get("proxyjump", "none").lower() != "none":
        jump = found["proxyjump"]
    return dataclasses.replace(host, address=found.get("hostname", host.address), port=port,
                               user=host.user or found.get("user"), identity_file=identity,
                               jump=jump)


def jump_host(target: Host, hosts: dict[str, Host]) -> Optional[Host]:
    """The host `target` (resolved) connects through: the inventory's host its `jump` names,
    or the last hop of its ProxyJump (`[user@]host[:port]`, comma-separated, first hop
    first), whose own `jump` is then the hops before it (a hop the inventory names is the
    inventory's host). None without one. The caller bounds the chain (MAX_HOPS)."""
    if target.jump is None:
        return None
    if target.jump in hosts:
        return hosts[target.jump]
    hops = [hop.strip() for hop in target.jump.split(",") if hop.strip()]
    last = hops[-1]
    user, _, rest = last.rpartition("@")
    address, port = rest, None
    if rest.count(":") == 1:
        address, port_text = rest.split(":")
        if not (port_text.isascii() and port_text.isdigit()):  # "²" is a digit to isdigit()
            raise Unreachable(f"{target.name}: ProxyJump {last!r} has a port that is not a number")
        port = int(port_text)
    return Host(name=last, address=address, where=target.where, user=user or None, port=port,
                jump=",".join(hops[:-1]) or None)
