"""The inventory: which hosts exist, how to reach them, their groups and variables.

Format (the README's Inventory section): top-level `vars`, `hosts`, `groups` (with `hosts`, `children`, `vars`),
`host_key_policy` (strict | accept-new), `known_hosts` (extra files of trusted keys), `timeouts`,
`secrets` (names of vars whose values are never shown) and `cache` (the fleet cache host).
Variable precedence, low to high: inventory vars, group vars (parents before children), host
vars; recipe vars sit below all of them and `--var` above.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError, Where
from .schema import check_keys, expect, expect_str_list
from .yamlfile import YamlMap, load_yaml

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # used with fullmatch: `$` would pass a final newline

HOST_KEYS = {"address", "user", "port", "identity_file", "ssh_agent", "python", "become",
             "jump", "connection", "vars"}
GROUP_KEYS = {"hosts", "children", "vars"}
TOP_KEYS = {"vars", "hosts", "groups", "host_key_policy", "known_hosts", "timeouts", "secrets",
            "include_if_exists", "cache"}
CACHE_KEYS = {"host", "address", "reach", "apt_port", "pypi_port"}
CACHE_REACH = ("auto", "direct", "forward")
# apt-cacher-ng 3.7.4 (Debian 12) fails to listen on 32768 and above ("Error resolving address
# for binding"; seen on a sandbox host): a higher port would leave the cache dead.
MAX_APT_CACHER_PORT = 32767
TIMEOUT_KEYS = {"connect", "banner", "auth", "keepalive", "command", "idle"}
POLICIES = ("strict", "accept-new")
MAX_GROUP_DEPTH = 50
MAX_JUMPS = 10  # jump hosts in a chain (each hop is one more SSH connection)
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


@dataclass
class Host:
    name: str
    address: str
    where: Where
    user: str | None = None
    port: int = 22
    identity_file: str | None = None
    # Offer the ssh-agent's keys: None means only where no identity_file is named.
    ssh_agent: bool | None = None
    python: str = "python3"
    become: bool = False
    jump: str | None = None
    connection: str = "ssh"
    vars: dict[str, Any] = field(default_factory=dict)

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

    def layered_vars(self, host: Host) -> list[tuple[dict[str, Any], dict[str, Where]]]:
        """The inventory's variable layers for `host`, low to high precedence, with positions."""
        layers: list[tuple[dict[str, Any], dict[str, Where]]] = [(self.vars, self.vars_where)]
        if self.cache is not None:
            # The ports the inventory gives the cache are the ones cache.yaml sets it up on.
            ports = {"cache_apt_port": self.cache.apt_port, "cache_pypi_port": self.cache.pypi_port}
            layers.insert(0, (ports, dict.fromkeys(ports, Where(str(self.path), 1))))
        for group in self.groups_of(host.name):
            g = self.groups[group]
            layers.append((g.vars, getattr(g.vars, "key_where", {})))
        layers.append((host.vars, getattr(host.vars, "key_where", {})))
        return layers


def _list(names: Iterable[str]) -> str:
    listed = list(names)
    shown = ", ".join(listed[:12])
    return shown + (f", ... ({len(listed)} in all)" if len(listed) > 12 else "")


def _read(path: Path) -> YamlMap:
    data = load_yaml(path, "inventory")
    if not isinstance(data, YamlMap):
        raise InputError("an inventory must be a mapping with 'hosts:'", path,
                         getattr(data, "where", Where(str(path), 1)).line)
    check_keys(data, TOP_KEYS, "inventory")
    return data


def load_inventory(path: str | Path) -> Inventory:
    """Read and check an inventory file completely; raise `InputError` at the first flaw.

    `include_if_exists: [files]` merges other inventories (hosts, groups, vars under this
    file's, known_hosts) when they exist: the example inventory takes in the sandbox's this way.
    """
    path = Path(path)
    data = _read(path)
    parts = [(path, data)]
    includes = data.get("include_if_exists") or []
    if isinstance(includes, str):
        includes = [includes]
    expect_str_list(includes, data.at("include_if_exists"), "'include_if_exists'")
    for name in includes:
        included = _resolve_path(name, path)
        if included.exists():
            part = _read(included)
            if part.get("include_if_exists"):
                raise part.at("include_if_exists").error("an included inventory cannot include others")
            parts.append((included, part))
    hosts: dict[str, Host] = {}
    groups: dict[str, Group] = {}
    for _, part in parts:
        hosts_raw = part.get("hosts") or YamlMap()
        expect(hosts_raw, dict, part.at("hosts"), "'hosts'")
        for name, spec in hosts_raw.items():
            if name in hosts:
                raise hosts_raw.at(name).error(f"host '{name}' is already defined at {hosts[name].where}")
            hosts[name] = _load_host(name, spec, hosts_raw.at(name))
    if not hosts:
        raise data.at("hosts").error("the inventory defines no hosts (add a 'hosts:' mapping)")
    for _, part in parts:
        expect(part.get("groups") or {}, dict, part.at("groups"), "'groups'")
        for name, spec in (part.get("groups") or {}).items():
            if name in groups:
                raise part["groups"].at(name).error(f"group '{name}' is already defined at "
                                                    f"{groups[name].where}")
            groups[name] = _load_group(name, spec, part["groups"].at(name), hosts)
    top_vars = YamlMap()
    top_vars.where, top_vars.key_where = data.where, {}
    for _, part in reversed(parts):  # the including file's vars win
        layer = part.get("vars") or YamlMap()
        expect(layer, dict, part.at("vars"), "'vars'")
        top_vars.update(layer)
        top_vars.key_where.update(getattr(layer, "key_where", {}))
    for name in groups:
        if name in hosts:
            raise groups[name].where.error(f"'{name}' is both a host and a group")
    _check_children(groups)
    for host in hosts.values():
        if host.jump is not None:
            if host.jump not in hosts:
                raise host.where.error(f"host '{host.name}': jump host '{host.jump}' is not in the inventory")
            if host.jump == host.name:
                raise host.where.error(f"host '{host.name}' cannot be its own jump host")
            if hosts[host.jump].is_local:
                raise host.where.error(f"host '{host.name}': jump host '{host.jump}' has "
                                       "connection: local (a jump host is reached over SSH)")
    _check_jump_chains(hosts)

    policy = data.get("host_key_policy", "strict")
    if policy not in POLICIES:
        raise data.at("host_key_policy").error(
            f"host_key_policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    known_paths = []
    for source, part in parts:
        known = part.get("known_hosts") or []
        if isinstance(known, str):
            known = [known]
        expect_str_list(known, part.at("known_hosts"), "'known_hosts'")
        known_paths += [_resolve_path(p, source) for p in known]
    secrets = data.get("secrets") or []
    expect_str_list(secrets, data.at("secrets"), "'secrets'")

    return Inventory(path=path, hosts=hosts, groups=groups, vars=top_vars,
                     vars_where=getattr(top_vars, "key_where", {}), host_key_policy=policy,
                     known_hosts=known_paths, timeouts=_load_timeouts(data),
                     secrets=set(secrets), cache=_load_cache(data, hosts))


def _load_cache(data: YamlMap, hosts: dict[str, Host]) -> CacheSettings | None:
    spec = data.get("cache")
    if spec is None:
        return None
    if isinstance(spec, str):  # `cache: NAME` shorthand
        spec = YamlMap({"host": spec})
        spec.where, spec.key_where = data.at("cache"), {}
    expect(spec, dict, data.at("cache"), "'cache'")
    check_keys(spec, CACHE_KEYS, "cache")
    name = spec.get("host")
    if not isinstance(name, str) or name not in hosts:
        raise spec.at("host").error(
            f"cache.host must name a host of the inventory, not {name!r}"
            if name is not None else "cache needs 'host:' (the host that runs the cache)")
    if hosts[name].is_local:
        raise spec.at("host").error(f"cache host '{name}' has connection: local; the other "
                                    "hosts reach the cache over the network")
    address = expect(spec.get("address", hosts[name].address), str, spec.at("address"),
                     "cache.address")
    reach = spec.get("reach", "auto")
    if reach not in CACHE_REACH:
        raise spec.at("reach").error(f"cache.reach must be one of {', '.join(CACHE_REACH)}, "
                                     f"not {reach!r}")
    ports = {}
    for key in ("apt_port", "pypi_port"):
        port = spec.get(key, getattr(CacheSettings, key))
        top = MAX_APT_CACHER_PORT if key == "apt_port" else 65535
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= top:
            why = " (apt-cacher-ng 3.7.4 cannot listen above it)" if key == "apt_port" else ""
            raise spec.at(key).error(f"cache.{key} must be a number from 1 to {top}{why}")
        ports[key] = port
    return CacheSettings(host=name, address=address, reach=reach, **ports)


def _resolve_path(value: str, inventory_path: Path) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (inventory_path.parent / p)


def _load_timeouts(data: YamlMap) -> Timeouts:
    spec = data.get("timeouts")
    if spec is None:
        return Timeouts()
    expect(spec, dict, data.at("timeouts"), "'timeouts'")
    check_keys(spec, TIMEOUT_KEYS, "timeouts")
    values = {}
    for key, value in spec.items():
        # `not 0 < value <= MAX` also refuses NaN, and compares huge ints exactly
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value <= MAX_SECONDS:
            raise spec.at(key).error(f"timeouts.{key} must be a positive number of seconds "
                                     f"(at most {MAX_SECONDS})")
        values[key] = float(value)
    return Timeouts(**values)


def _load_host(name: str, spec: Any, where: Where) -> Host:
    if not NAME.fullmatch(name):
        raise where.error(f"host name {name!r} may hold only letters, digits, '.', '_' and '-'")
    if spec is None:
        spec = YamlMap()
        spec.where, spec.key_where = where, {}
    expect(spec, dict, where, f"host '{name}'")
    check_keys(spec, HOST_KEYS, f"host '{name}'")
    connection = spec.get("connection", "ssh")
    if connection not in ("ssh", "local"):
        raise spec.at("connection").error(f"connection must be 'ssh' or 'local', not {connection!r}")
    host = Host(name=name, address=str(spec.get("address", name)), where=where,
                connection=connection)
    for key, kind in (("user", str), ("identity_file", str), ("python", str), ("jump", str)):
        if key in spec:
            setattr(host, key, expect(spec[key], kind, spec.at(key), f"host '{name}': {key}"))
    if "port" in spec:
        port = spec["port"]
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise spec.at("port").error(f"host '{name}': port must be a number from 1 to 65535")
        host.port = port
    if "become" in spec:
        host.become = expect(spec["become"], bool, spec.at("become"), f"host '{name}': become")
    if "ssh_agent" in spec:
        host.ssh_agent = expect(spec["ssh_agent"], bool, spec.at("ssh_agent"),
                                f"host '{name}': ssh_agent")
    host_vars = spec.get("vars") or YamlMap()
    host.vars = expect(host_vars, dict, spec.at("vars"), f"host '{name}': vars")
    return host


def _load_group(name: str, spec: Any, where: Where, hosts: dict[str, Host]) -> Group:
    if not NAME.fullmatch(name):
        raise where.error(f"group name {name!r} may hold only letters, digits, '.', '_' and '-'")
    if name == "all":
        raise where.error("'all' is reserved: it already means every host")
    spec = spec or YamlMap()
    expect(spec, dict, where, f"group '{name}'")
    if spec:
        check_keys(spec, GROUP_KEYS, f"group '{name}'")
    group = Group(name=name, where=where)
    for key in ("hosts", "children"):
        value = spec.get(key) or []
        expect_str_list(value, spec.at(key) if spec else where, f"group '{name}': {key}")
        setattr(group, key, list(value))
    for index, member in enumerate(group.hosts):
        if member not in hosts:
            at = spec["hosts"].at(index) if hasattr(spec["hosts"], "at") else where
            raise at.error(f"group '{name}' lists host '{member}', which is not under hosts:")
    group.vars = expect(spec.get("vars") or YamlMap(), dict, spec.at("vars") if spec else where,
                        f"group '{name}': vars")
    return group


def _check_jump_chains(hosts: dict[str, Host]) -> None:
    """Jump hosts may have jump hosts of their own, but not in a cycle nor without end."""
    for host in hosts.values():
        chain = [host.name]
        while (nxt := hosts[chain[-1]].jump) is not None:
            if nxt in chain:
                cycle = " -> ".join(chain[chain.index(nxt):] + [nxt])
                raise hosts[nxt].where.error(f"jump hosts form a cycle: {cycle}")
            if len(chain) > MAX_JUMPS:
                raise host.where.error(f"host '{host.name}' is more than {MAX_JUMPS} jump hosts "
                                       "away")
            chain.append(nxt)


def _check_children(groups: dict[str, Group]) -> None:
    for group in groups.values():
        for child in group.children:
            if child not in groups:
                raise group.where.error(f"group '{group.name}' has unknown child group '{child}'")

    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            cycle = " -> ".join(path[path.index(name):] + [name])
            raise groups[name].where.error(f"group children form a cycle: {cycle}")
        if len(path) >= MAX_GROUP_DEPTH:
            raise groups[name].where.error(f"groups nested deeper than {MAX_GROUP_DEPTH} levels "
                                           f"({path[0]} -> ... -> {name})")
        state[name] = "open"
        for child in groups[name].children:
            visit(child, path + [name])
        state[name] = "done"

    for name in groups:
        visit(name, [])
