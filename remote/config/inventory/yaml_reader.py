"""gpuprov's own inventory format, YAML (docs/reference/inventory.md): top-level `vars`,
`hosts`, `groups` (with `hosts`, `children`, `vars`), `host_key_policy` (strict | accept-new),
`known_hosts` (extra files of trusted keys), `timeouts`, `secrets` (names of vars whose values
are never shown), `cache` (the fleet cache host), `include_if_exists` and a bundle's trust
anchor (`bundle_key`, `bundle_keyring`, `bundle_sha256`); a host's or group's `bundle` (the
archive `provision` installs from, as `--bundle`).

This module reads the format only: keys, types, positions. What every inventory must satisfy
whatever its format is in `checks`; the objects it builds are `model`'s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...ground.errors import InputError, Where
from ..schema import check_keys, expect, expect_str_list
from ..yamlfile import YamlMap, load_yaml
from .checks import check_graph, check_group_name, check_host_name
from .model import (
    CACHE_REACH,
    MAX_APT_CACHER_PORT,
    MAX_SECONDS,
    POLICIES,
    Bundled,
    BundleSite,
    CacheSettings,
    Group,
    Host,
    Inventory,
    SchedulerEntry,
    SettingsReaders,
    Timeouts,
)

# Every key of gpuprov's inventory format with what it means: the reader checks keys against
# these, and docs/gen_reference.py writes the reference page (docs/reference/inventory-keys.md)
# from them.
TOP_KEYS = {
    "vars": "variables for every host (the lowest inventory level)",
    "hosts": "the hosts, by name: a mapping of host keys (below), or empty for a name alone",
    "groups": "named sets of hosts and of other groups (`children`), with their own `vars`",
    "host_key_policy": "`strict` (default): refuse a host whose key is not known; "
                       "`accept-new`: trust and record a new host's key (a changed key is always refused)",
    "known_hosts": "extra known_hosts files (one path or a list); ~/.ssh/known_hosts is always read",
    "timeouts": "seconds: `connect`, `banner`, `auth`, `keepalive`, `command`, `idle` (below)",
    "secrets": "names of vars whose values are always shown as ***",
    "include_if_exists": "inventory files (a list) whose hosts, groups, vars and known_hosts are "
                         "merged in when they exist",
    "cache": "the fleet cache: a host of the inventory, or a mapping of cache keys (below)",
    # the anchor that vouches for a `bundle:` (remote/bundle/trust.py checks the values)
    "bundle_key": "the fingerprint of the site key that must have signed a bundle (`gpuprov "
                  "bundle --sign-key`), as `--bundle-key` (the option wins); with `bundle_keyring`",
    "bundle_keyring": "the file holding that key's public half (`gpg --export FINGERPRINT`), as "
                      "`--bundle-keyring` (a path relative to this file)",
    "bundle_sha256": "the sha256 a bundle must have, given out of band, as `--bundle-sha256`",
    "bundle_site": "the host that takes a bundle once and serves it to the other hosts over HTTP "
                   "(`provision --bundle`): a host of the inventory (the fleet cache's, or any), "
                   "or a mapping of bundle site keys (below)",
}
HOST_KEYS = {
    "address": "what to connect to (looked up in ~/.ssh/config; default: the host's name)",
    "user": "the login user (default: ssh_config's, else your login name)",
    "port": "the SSH port (default: ssh_config's, else 22)",
    "identity_file": "the private key to log in with; only this key is offered",
    "ssh_agent": "also offer the ssh-agent's keys (true), or none of them (false)",
    "python": "the host's python3 for gpuprov's scripts",
    "become": "run the steps with sudo",
    "jump": "a host of the inventory to jump through (as ProxyJump)",
    "connection": "`ssh` (default) or `local`: this machine",
    "vars": "this host's variables (over group and inventory vars)",
    "bundle": "a bundle (`gpuprov bundle`) that `provision` installs this host from, as "
              "`--bundle` does (the option wins; a path relative to this file; over its groups')",
}
GROUP_KEYS = {
    "hosts": "the hosts in the group (a list of names)",
    "children": "groups whose hosts are in this one too",
    "vars": "the group's variables (child groups over parents)",
    "bundle": "a bundle that `provision` installs the group's hosts from, as `host: bundle` "
              "(a host's own, then child groups over parents; `--bundle` wins)",
}
CACHE_KEYS = {
    "host": "the inventory host that runs the cache (playbooks/cache.yaml installs it)",
    "address": "where the fleet reaches it (default: the cache host's address)",
    "reach": "`auto` (default: direct, else an SSH forward), `direct` or `forward`",
    "apt_port": "apt-cacher-ng's port (default 3142, at most 32767)",
    "pypi_port": "devpi-server's port (default 3141)",
}
BUNDLE_SITE_KEYS = {
    "host": "the inventory host that takes the bundle and serves it (it needs python3)",
    "address": "where the other hosts reach it (default: its address)",
    "port": "the HTTP port it serves the bundle on while the run needs it (default 8478)",
}
TIMEOUT_KEYS = {
    "connect": "the TCP connect alone",
    "banner": "the wait for the server's SSH banner",
    "auth": "the login",
    "keepalive": "how long a silent link goes unchecked (dead after twice that, at least 10 s)",
    "command": "a step without a `timeout` of its own, and the whole validation",
    "idle": "how long validation (and a pull of its results) may go without an output line",
}
# The vars of a host's layers (inventory vars, a group's or the host's, `--var`) that validation
# reads: the node profile and the operator's waivers (validate/profile.py checks them, here before
# any host is contacted and again on the host; docs/how-to/node-profiles.md), beside the rest.
PROFILE_VARS = {
    "node_profile": "what the node must be: `gpus` (`count`, `model`), `pcie` (`gen`, `width`), `ib` "
                    "(`ports`, `rate_gbps`, `link_layer`), `floors`, `tolerance` (a fraction below 1), `host` (mounts, "
                    "fill, scratch, memory, CPUs, clock, services: the `host_*` checks); "
                    "the innermost layer's mapping wins whole",
    "ignore_xids": "Xid/SXid numbers that never count (a list, or `13,31`)",
    "acknowledged_before": "an ISO 8601 time: Xid/SXid lines logged earlier do not count",
    "warn_only": "checks whose failure only warns (a list of validate's check names, or `p2p,nccl`)",
}
VALIDATE_VARS = {
    "gpu_expected": "how many GPUs the host must show (`python3 -m validate --expect-gpus`)",
    "validate_python": "the python3 that runs validate on the host (a recipe's venv; remembered there)",
    "validate_args": "more `python3 -m validate` arguments (one string, split as a shell would, or a list)",
    **PROFILE_VARS,
}

Parts = list[tuple[Path, YamlMap]]  # the file and those it includes, the including one first


INVENTORY_MAPPING = "an inventory must be a mapping with 'hosts:'"


def _read(path: Path, data: Any = None) -> YamlMap:
    data = load_yaml(path, "inventory", mapping=INVENTORY_MAPPING) if data is None else data
    if not isinstance(data, YamlMap):
        raise InputError(INVENTORY_MAPPING, path,
                         getattr(data, "where", Where(str(path), 1)).line)
    check_keys(data, TOP_KEYS, "inventory")
    return data


def read_yaml_inventory(path: Path, data: Any = None,
                        schedulers: SettingsReaders | None = None) -> Inventory:
    """Read and check a YAML inventory completely (`data`: the file already loaded with
    `load_yaml`; `schedulers`: the keys that make a host a cluster's login node, with their
    readers); raise `InputError` at the first flaw.

    `include_if_exists: [files]` merges other inventories (hosts, groups, vars under this
    file's, known_hosts) when they exist: the example inventory takes in the sandbox's this way.
    """
    data = _read(path, data)
    schedulers = schedulers or {}
    parts = _with_includes(path, data)
    hosts = _load_hosts(parts, schedulers)
    if not hosts:
        raise data.at("hosts").error("the inventory defines no hosts (add a 'hosts:' mapping)")
    groups = _load_groups(parts, hosts)
    top_vars = _merge_vars(data, parts)
    check_graph(hosts, groups)

    policy = data.get("host_key_policy", "strict")
    if policy not in POLICIES:
        raise data.at("host_key_policy").error(
            f"host_key_policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    known_paths = _known_hosts(parts)
    secrets = data.get("secrets") or []
    expect_str_list(secrets, data.at("secrets"), "'secrets'")

    return Inventory(path=path, hosts=hosts, groups=groups, vars=top_vars,
                     vars_where=getattr(top_vars, "key_where", {}), host_key_policy=policy,
                     known_hosts=known_paths, timeouts=_load_timeouts(data),
                     secrets=set(secrets), cache=_load_cache(data, hosts),
                     bundle_trust=_load_bundle_trust(data),
                     bundle_site=_load_bundle_site(data, hosts))


def _with_includes(path: Path, data: YamlMap) -> Parts:
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
    return parts


def _load_hosts(parts: Parts, schedulers: SettingsReaders) -> dict[str, Host]:
    hosts: dict[str, Host] = {}
    for _, part in parts:
        hosts_raw = part.get("hosts") or YamlMap()
        expect(hosts_raw, dict, part.at("hosts"), "'hosts'")
        for name, spec in hosts_raw.items():
            if name in hosts:
                raise hosts_raw.at(name).error(f"host '{name}' is already defined at {hosts[name].where}")
            hosts[name] = _load_host(name, spec, hosts_raw.at(name), schedulers)
    return hosts


def _load_groups(parts: Parts, hosts: dict[str, Host]) -> dict[str, Group]:
    groups: dict[str, Group] = {}
    for _, part in parts:
        expect(part.get("groups") or {}, dict, part.at("groups"), "'groups'")
        for name, spec in (part.get("groups") or {}).items():
            if name in groups:
                raise part["groups"].at(name).error(f"group '{name}' is already defined at "
                                                    f"{groups[name].where}")
            groups[name] = _load_group(name, spec, part["groups"].at(name), hosts)
    return groups


def _merge_vars(data: YamlMap, parts: Parts) -> YamlMap:
    top_vars = YamlMap()
    top_vars.where, top_vars.key_where = data.where, {}
    for _, part in reversed(parts):  # the including file's vars win
        layer = part.get("vars") or YamlMap()
        expect(layer, dict, part.at("vars"), "'vars'")
        top_vars.update(layer)
        top_vars.key_where.update(getattr(layer, "key_where", {}))
    return top_vars


def _known_hosts(parts: Parts) -> list[Path]:
    known_paths = []
    for source, part in parts:
        known = part.get("known_hosts") or []
        if isinstance(known, str):
            known = [known]
        expect_str_list(known, part.at("known_hosts"), "'known_hosts'")
        known_paths += [_resolve_path(p, source) for p in known]
    return known_paths


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
    return CacheSettings(host=name, address=address, reach=reach,
                         address_given="address" in spec, **ports)


def _resolve_path(value: str, inventory_path: Path) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (inventory_path.parent / p)


def _load_bundle(spec: YamlMap, what: str) -> Bundled | None:
    """A host's or group's `bundle:`: a path (to the file it is written in, when relative)."""
    if "bundle" not in spec:
        return None
    where = spec.at("bundle")
    value = spec["bundle"]
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise where.error(f"{what}: bundle must be the path of a bundle archive (gpuprov bundle "
                          f"makes one), not {value!r}")
    return Bundled(_resolve_path(value, Path(where.file)), where)


def _load_bundle_trust(data: YamlMap) -> dict[str, tuple[str, Where]]:
    """The top-level `bundle_key`, `bundle_keyring` (made the inventory file's when relative)
    and `bundle_sha256`, as strings with where they are; their shapes are checked where they
    are used (remote/bundle/trust.py), naming this file and line."""
    out: dict[str, tuple[str, Where]] = {}
    for key in ("bundle_key", "bundle_keyring", "bundle_sha256"):
        if key not in data:
            continue
        where, value = data.at(key), data[key]
        if not isinstance(value, str) or not value.strip() or "\0" in value:
            raise where.error(f"{key} must be a string, not {value!r}")
        if key == "bundle_keyring":
            value = str(_resolve_path(value, Path(where.file)))
        out[key] = (value, where)
    return out


def _load_bundle_site(data: YamlMap, hosts: dict[str, Host]) -> BundleSite | None:
    """`bundle_site: NAME` or `{host, address, port}` (remote/bundle/site.py serves from it)."""
    spec = data.get("bundle_site")
    if spec is None:
        return None
    if isinstance(spec, str):  # `bundle_site: NAME` shorthand
        spec = YamlMap({"host": spec})
        spec.where, spec.key_where = data.at("bundle_site"), {}
    expect(spec, dict, data.at("bundle_site"), "'bundle_site'")
    check_keys(spec, BUNDLE_SITE_KEYS, "bundle_site")
    name = spec.get("host")
    if not isinstance(name, str) or name not in hosts:
        raise spec.at("host").error(
            f"bundle_site.host must name a host of the inventory, not {name!r}"
            if name is not None else "bundle_site needs 'host:' (the host that serves the bundle)")
    if hosts[name].is_local:
        raise spec.at("host").error(f"bundle site '{name}' has connection: local; the other "
                                    "hosts reach it over the network")
    address = expect(spec.get("address", hosts[name].address), str, spec.at("address"),
                     "bundle_site.address")
    port = spec.get("port", BundleSite.port)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= 65535:
        raise spec.at("port").error("bundle_site.port must be a number from 1 to 65535")
    return BundleSite(host=name, address=address, port=port, where=spec.at("host"))


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


def _load_host(name: str, spec: Any, where: Where, schedulers: SettingsReaders) -> Host:
    check_host_name(name, where)
    if spec is None:
        spec = YamlMap()
        spec.where, spec.key_where = where, {}
    expect(spec, dict, where, f"host '{name}'")
    check_keys(spec, set(HOST_KEYS) | set(schedulers), f"host '{name}'")
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
    keys = [k for k in schedulers if k in spec]
    if len(keys) > 1:
        raise spec.at(keys[1]).error(f"host '{name}': one scheduler per host, not "
                                     f"{' and '.join(keys)}")
    for key in keys:
        host.scheduler = SchedulerEntry(key, schedulers[key].read_settings(spec[key], spec.at(key),
                                                                           name))
    host_vars = spec.get("vars") or YamlMap()
    host.vars = expect(host_vars, dict, spec.at("vars"), f"host '{name}': vars")
    host.bundle = _load_bundle(spec, f"host '{name}'")
    return host


def _load_group(name: str, spec: Any, where: Where, hosts: dict[str, Host]) -> Group:
    check_group_name(name, where)
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
    group.bundle = _load_bundle(spec, f"group '{name}'") if spec else None
    return group
