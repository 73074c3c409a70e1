"""Ansible's YAML inventory format, read as Ansible's `yaml` inventory plugin reads it
(lib/ansible/plugins/inventory/yaml.py; https://docs.ansible.com/ansible/latest/collections/
ansible/builtin/yaml_inventory.html): the top level maps group names (usually just `all`) to
groups; a group may hold `hosts:` (host patterns, with ranges and `:port`, each mapped to its
vars or nothing), `vars:` and `children:` (groups, same shape, nested). A group met twice is
one group. Ansible skips any other key in a group with a warning; gpuprov refuses it at its
line, so a typo (`host:`) does not drop hosts silently.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ...ground.errors import InputError, Where
from ..yamlfile import YamlMap, load_yaml
from .ansible_common import AnsibleBuilder, expand_pattern
from .model import Inventory

GROUP_KEYS = ("hosts", "vars", "children")


def read_ansible_yaml_inventory(path: Path, data: Any = None) -> Inventory:
    """Read an Ansible YAML inventory (`data`: the file already loaded with `load_yaml`)."""
    data = load_yaml(path, "inventory") if data is None else data
    if not isinstance(data, YamlMap):
        raise InputError("an Ansible YAML inventory must be a mapping of groups ('all:')", path,
                         getattr(data, "where", Where(str(path), 1)).line)
    build = AnsibleBuilder(path)
    for name, spec in data.items():
        _group(build, name, spec, data.at(name), parent=None)
    return build.finish()


def _group(build: AnsibleBuilder, name: Any, spec: Any, where: Where,
           parent: Optional[str]) -> None:
    if not isinstance(name, str):
        raise where.error(f"a group name must be text, not {name!r}")
    if spec is None:
        spec = YamlMap()
        spec.where, spec.key_where = where, {}
    if not isinstance(spec, YamlMap):
        raise where.error(f"group '{name}' must be a mapping with hosts:, vars: or children:, "
                          f"not {type(spec).__name__}")
    for key in spec:
        if key not in GROUP_KEYS:
            raise spec.at(key).error(f"group '{name}': unknown key '{key}' (an Ansible group "
                                     f"holds {', '.join(GROUP_KEYS)})")
    is_all = name == "all"
    if is_all and parent is not None:
        raise where.error("'all' cannot be a child group: every group is in it already")
    if not is_all:
        build.add_group(name, where)
        if parent is not None:
            build.add_child(parent, name)
    own = None if is_all else name
    hosts = spec.get("hosts") or {}
    if not isinstance(hosts, dict):
        raise spec.at("hosts").error(f"group '{name}': hosts must be a mapping of host names "
                                     "(each with its vars, or nothing)")
    for pattern, host_vars in hosts.items():
        _hosts(build, str(pattern), host_vars, _at(hosts, pattern, where), own)
    group_vars = spec.get("vars") or {}
    if not isinstance(group_vars, dict):
        raise spec.at("vars").error(f"group '{name}': vars must be a mapping")
    for key, value in group_vars.items():
        build.set_var(own, key, value, _at(group_vars, key, where))
    children = spec.get("children") or {}
    if not isinstance(children, dict):
        raise spec.at("children").error(f"group '{name}': children must be a mapping of groups")
    for child, child_spec in children.items():
        _group(build, child, child_spec, _at(children, child, where), parent=own)


def _hosts(build: AnsibleBuilder, pattern: str, host_vars: Any, where: Where,
           group: Optional[str]) -> None:
    if host_vars is not None and not isinstance(host_vars, dict):
        raise where.error(f"host '{pattern}': its value must be a mapping of vars (or nothing)")
    names, port = expand_pattern(pattern, where)
    for name in names:
        build.add_host(name, where, group)
        if port is not None:
            build.set_var(name, "ansible_port", port, where, host=True)
        for key, value in (host_vars or {}).items():
            build.set_var(name, key, value, _at(host_vars, key, where), host=True)


def _at(mapping: Any, key: Any, default: Where) -> Where:
    """Where `key` of a loaded mapping was written (`default` for one made here)."""
    return mapping.at(key) if isinstance(mapping, YamlMap) else default
