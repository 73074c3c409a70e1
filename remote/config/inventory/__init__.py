"""The inventory: which hosts exist, how to reach them, their groups and variables.

Format and meaning are apart: `model` is what an inventory means (hosts, groups, vars,
settings; variable precedence, low to high: inventory vars, group vars (parents before
children), host vars; recipe vars sit below all of them and `--var` above), `checks` what
every inventory must satisfy, and one reader per file format builds the model and runs the
checks: `yaml_reader` for gpuprov's YAML. A new format (an Ansible INI or YAML inventory) is
one more reader module here and one more line in `load_inventory`.

May import: `remote.errors`, `remote.config` (schema, yamlfile). Nothing else of remote/.
"""
from __future__ import annotations

from pathlib import Path

from .model import CacheSettings, Group, Host, Inventory, Timeouts
from .yaml_reader import read_yaml_inventory

__all__ = ["CacheSettings", "Group", "Host", "Inventory", "Timeouts", "load_inventory"]


def load_inventory(path: str | Path) -> Inventory:
    """Read and check an inventory file completely; raise `InputError` (one line naming the
    file and line) at the first flaw."""
    return read_yaml_inventory(Path(path))
