"""The inventory: which hosts exist, how to reach them, their groups and variables.

Format and meaning are apart: `model` is what an inventory means (hosts, groups, vars,
settings; variable precedence, low to high: inventory vars, group vars (parents before
children), host vars; recipe vars sit below all of them and `--var` above), `checks` what
every inventory must satisfy, and one reader per file format builds the model and runs the
checks: `yaml_reader` for gpuprov's YAML, `ansible_ini` and `ansible_yaml` for Ansible's two
formats (with what they share in `ansible_common`). `load_inventory` tells the formats apart
(`inventory_format`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...ground.errors import InputError
from ..yamlfile import YamlMap, load_yaml, read_text
from .ansible_ini import read_ini_inventory
from .ansible_yaml import GROUP_KEYS as ANSIBLE_GROUP_KEYS
from .ansible_yaml import read_ansible_yaml_inventory
from .model import CacheSettings, Group, Host, Inventory, SchedulerEntry, SettingsReaders, Timeouts
from .yaml_reader import INVENTORY_MAPPING, TOP_KEYS, read_yaml_inventory

__all__ = ["CacheSettings", "Group", "Host", "Inventory", "SchedulerEntry", "SettingsReaders",
           "Timeouts", "inventory_format", "load_inventory"]

YAML_SUFFIXES = (".yaml", ".yml", ".json")


def load_inventory(path: str | Path, schedulers: SettingsReaders | None = None) -> Inventory:
    """Read and check an inventory file completely, whatever its format; raise `InputError`
    (one line naming the file and line) at the first flaw. `schedulers` (the command line
    hands remote/scheduler's table): the keys that make a host a cluster's login node."""
    path = Path(path)
    kind, loaded = _sniff(path)
    if kind == "ini":
        return read_ini_inventory(path, loaded)
    if kind == "ansible-yaml":
        return read_ansible_yaml_inventory(path, loaded)
    return read_yaml_inventory(path, loaded, schedulers)


def inventory_format(path: str | Path) -> str:
    """`gpuprov-yaml`, `ansible-yaml` or `ini`: how `load_inventory` reads `path`."""
    return _sniff(Path(path))[0]


def _sniff(path: Path) -> tuple[str, Any]:
    """The format of `path`, with what was read on the way (the INI text or the loaded YAML):

    1. a name ending in `.ini` is Ansible INI;
    2. a name ending in `.yaml`, `.yml` or `.json` is YAML (its errors are YAML errors);
    3. any other name (Ansible's customary `hosts`, `inventory`): INI when its first line that
       is not blank nor a comment (`#`, `;`) starts with `[` (a section), or when it does not
       read as a YAML mapping (`gpu1 ansible_host=10.0.0.5` reads as one YAML string);
       else YAML.
    YAML is Ansible's when each top-level key is a group (usually just `all:`): not one of
    gpuprov's keys (`hosts:`, `groups:`, `vars:`, ... `yaml_reader.TOP_KEYS`; an Ansible group
    named so goes under `all: children:`), and holding nothing or only Ansible's group keys
    (`hosts:`, `vars:`, `children:`). Anything else is gpuprov's own, whose reader names what
    is wrong (`host:` -> "did you mean 'hosts'").
    """
    suffix = path.suffix.lower()
    if suffix == ".ini":
        return "ini", read_text(path, "inventory")
    if suffix not in YAML_SUFFIXES:
        text = read_text(path, "inventory")
        first = next((line.strip() for line in text.splitlines()
                      if line.strip() and line.strip()[0] not in "#;"), "")
        if first.startswith("["):
            return "ini", text
        try:
            data = load_yaml(path, "inventory")
        except InputError:
            return "ini", text
        if not isinstance(data, YamlMap):
            return "ini", text
    else:
        data = load_yaml(path, "inventory", mapping=INVENTORY_MAPPING)
    if isinstance(data, YamlMap) and data and all(
            key not in TOP_KEYS and (group is None or isinstance(group, dict)
                                     and all(k in ANSIBLE_GROUP_KEYS for k in group))
            for key, group in data.items()):
        return "ansible-yaml", data
    return "gpuprov-yaml", data
