"""The inventory as gpuprov means it, whatever file it came from: hosts, groups, variables,
and the settings that reach hosts (host keys, timeouts, secrets, the fleet cache).

A reader of one inventory format (`yaml_reader` for gpuprov's YAML) builds these objects and
hands hosts and groups to `checks.check_graph`, which refuses what no format may hold (a name
both a host and a group, group cycles, jump chains without end).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol

from ...ground.errors import InputError, Where

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # used with fullmatch: `$` would pass a final newline
CACHE_REACH = ("auto", "direct", "forward")
# apt-cacher-ng 3.7.4 (Debian 12) fails to listen on 32768 and above ("Error resolving address
# for binding"; seen on a sandbox host): a higher port would leave the cache dead.
MAX_APT_CACHER_PORT = 32767
POLICIES = ("strict", "accept-new")
MAX_SECONDS = 10_000_000  # ~116 days: anything above is a typo (and .inf/.nan are refused)


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `keepalive` is the interval of SSH keepalives; `command` the default step bound
    (and validation's); `idle` how long validation may go without printing a line."""

    connect: float = 10.0
    banner: float = 15.0
    auth: float = 15.0
    keepalive: float = 5.0
    command: float = 3600.0
    # validate prints a line as each check starts and ends and as each bench model does; on a
    # GPU its longest silence by design is `stress` (60 s in the full suite, longer only with
    # --stress-seconds, which validate's job adds to this). The full suite on the 2-core VM with
    # no GPU (2026-11-25, load 10-17, `python3 -m bench.validate_silence --device cpu`): longest
    # silence 227 s (profile's resnet50 on the CPU), then 161 s (bench, wide_resnet50_2).
    # 600 s is well above both; unsourced beyond that.
    idle: float = 600.0


@dataclass(frozen=True)
class CacheSettings:
    """The fleet cache (playbooks/cache.yaml installs it on `host`): apt-cacher-ng on `apt_port`
    and devpi-server on `pypi_port`. The other hosts reach it at `address` (default: the cache
    host's own address), or through an SSH port forward (`reach`: auto tries direct first)."""

    host: str
    address: str
    reach: str = "auto"
    apt_port: int = 3142    # apt-cacher-ng's default port (its acng.conf: Port:3142)
    pypi_port: int = 3141   # devpi-server's default port (devpi-server --port, default 3141)
    # False when `address` is the cache host's own (no cache.address): an ssh_config alias
    # there is resolved to its HostName before the run (remote/cli.py), since the fleet hosts
    # do not read this machine's ~/.ssh/config.
    address_given: bool = True


@dataclass
class BundleSite:
    """`bundle_site:` the host that takes a bundle once from the control machine and serves it
    to the other hosts over HTTP (remote/bundle/site.py), at `address` (default: its own
    address) and `port`."""

    host: str
    address: str
    port: int = 8478    # chosen: no IANA service is registered on it
    where: Where | None = None


class SettingsReader(Protocol):
    """Reads one scheduler's inventory key (remote/scheduler/: its `Scheduler` rows)."""

    def read_settings(self, spec: Any, where: Where, host: str) -> Any: ...


# inventory key -> its reader: the loader is handed the schedulers' table (none: no such key)
SettingsReaders = Mapping[str, SettingsReader]


@dataclass(frozen=True)
class SchedulerEntry:
    """A cluster's login node: the key that named its scheduler and what that key's reader
    made of its value."""

    key: str
    settings: Any


@dataclass(frozen=True)
class Bundled:
    """A host's or group's `bundle:` key: the archive (relative paths are the inventory file's)
    and where the key is written."""

    path: Path
    where: Where


@dataclass
class Host:
    name: str
    address: str
    where: Where
    user: str | None = None
    port: int | None = None  # None: ~/.ssh/config's Port for the address, else 22
    identity_file: str | None = None
    # The SSH login password (Ansible's ansible_password), offered after the keys; kept out
    # of repr and masked in every output (engine/run.py).
    password: str | None = field(default=None, repr=False)
    # Offer the ssh-agent's keys: None means only where no identity_file is named.
    ssh_agent: bool | None = None
    python: str = "python3"
    become: bool = False
    become_user: str | None = None  # whom `become` runs as (`sudo -u`); None: root
    # sudo's password for this host (Ansible's ansible_become_password); None: the run's
    # (GPUPROV_BECOME_PASSWORD, --ask-become-pass). Out of repr, masked in every output.
    become_password: str | None = field(default=None, repr=False)
    jump: str | None = None
    connection: str = "ssh"
    vars: dict[str, Any] = field(default_factory=dict)
    scheduler: SchedulerEntry | None = None  # a cluster's login node (remote/scheduler/)
    # `bundle:` (provision installs from it, as with --bundle), with where it is written
    bundle: Bundled | None = None

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


@dataclass
class Group:
    name: str
    where: Where
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    bundle: Bundled | None = None


@dataclass
class Inventory:
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, Group]
    vars: dict[str, Any]
    vars_where: dict[str, Where]
    host_key_policy: str = "strict"
    known_hosts: list[Path] = field(default_factory=list)
    timeouts: Timeouts = field(default_factory=Timeouts)
    secrets: set[str] = field(default_factory=set)
    cache: CacheSettings | None = None
    # `bundle_key`, `bundle_keyring`, `bundle_sha256` as written (the keyring's path made the
    # inventory file's), with where: the anchor that vouches for a bundle (remote/bundle/trust.py)
    bundle_trust: dict[str, tuple[str, Where]] = field(default_factory=dict)
    # `bundle_site:` the host that serves a bundle to the others (remote/bundle/site.py)
    bundle_site: BundleSite | None = None
    # group -> members, group -> depth: computed once (groups may share children, and walking
    # every path through a lattice of groups would take exponential time)
    _members: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)
    _depths: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def select(self, selection: str) -> list[Host]:
        """Hosts matching SEL: names, groups, `all`, globs, comma-separated; inventory order."""
        items = [item.strip() for item in (selection or "").split(",")]
        if not any(items):
            raise InputError("--host needs a host, group, glob or 'all'", self.path)
        chosen: set[str] = set()
        for item in items:
            if not item:
                continue
            matched = self._match(item)
            if not matched:
                raise InputError(
                    f"--host '{item}' matches no host or group (hosts: {_list(self.hosts)}; "
                    f"groups: {_list(self.groups) or 'none'})", self.path)
            chosen |= matched
        return [host for name, host in self.hosts.items() if name in chosen]

    def _match(self, item: str) -> set[str]:
        if item == "all":
            return set(self.hosts)
        if item in self.hosts:
            return {item}
        if item in self.groups:
            return self.group_members(item)
        if any(ch in item for ch in "*?["):
            found = set(fnmatch.filter(self.hosts, item))
            for group in fnmatch.filter(self.groups, item):
                found |= self.group_members(group)
            return found
        return set()

    def group_members(self, group: str) -> set[str]:
        if group not in self._members:
            members = set(self.groups[group].hosts)
            for child in self.groups[group].children:
                members |= self.group_members(child)
            self._members[group] = frozenset(members)
        return set(self._members[group])

    def groups_of(self, host: str) -> list[str]:
        """Groups holding `host` directly or through children, parents before children."""
        mine = [g for g in self.groups if host in self.group_members(g)]
        return sorted(mine, key=lambda g: (self._depth(g), g))

    def _depth(self, group: str) -> int:
        """The longest chain of parents above `group` (0 for a top-level group)."""
        if not self._depths:
            parents: dict[str, list[str]] = {name: [] for name in self.groups}
            for parent in self.groups.values():
                for child in parent.children:
                    parents[child].append(parent.name)

            def depth(name: str) -> int:
                if name not in self._depths:
                    self._depths[name] = max((depth(p) + 1 for p in parents[name]), default=0)
                return self._depths[name]

            for name in self.groups:
                depth(name)
        return self._depths.get(group, 0)

    def bundle_for(self, host: Host) -> Bundled | None:
        """The `bundle:` that holds for `host`: its own, else its innermost group's (as vars:
        children over parents)."""
        if host.bundle is not None:
            return host.bundle
        named = [self.groups[g].bundle for g in self.groups_of(host.name) if self.groups[g].bundle]
        return named[-1] if named else None

    def layered_vars(self, host: Host) -> list[tuple[dict[str, Any], dict[str, Where]]]:
        """The inventory's variable layers for `host`, low to high precedence, with positions."""
        layers: list[tuple[dict[str, Any], dict[str, Where]]] = [(self.vars, self.vars_where)]
        if self.cache is not None:
            # The ports the inventory gives the cache are the ones cache.yaml sets it up on; its
            # address and reach say where cache.yaml lets the services listen.
            given = {"cache_apt_port": self.cache.apt_port, "cache_pypi_port": self.cache.pypi_port,
                     "cache_address": self.cache.address, "cache_reach": self.cache.reach}
            layers.insert(0, (given, dict.fromkeys(given, Where(str(self.path), 1))))
        for group in self.groups_of(host.name):
            g = self.groups[group]
            layers.append((g.vars, getattr(g.vars, "key_where", {})))
        layers.append((host.vars, getattr(host.vars, "key_where", {})))
        return layers


def _list(names: Iterable[str]) -> str:
    listed = list(names)
    shown = ", ".join(listed[:12])
    return shown + (f", ... ({len(listed)} in all)" if len(listed) > 12 else "")
