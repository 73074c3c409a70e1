"""Ansible's INI inventory format, read as Ansible's `ini` inventory plugin reads it
(lib/ansible/plugins/inventory/ini.py; https://docs.ansible.com/ansible/latest/collections/
ansible/builtin/ini_inventory.html):

- `#` and `;` start a comment line; a line before any section is a host outside any group;
- `[group]` lists hosts: `pattern [key=value ...]` (shell-like quoting, `#` comments), where
  the pattern may hold ranges and a `:port` (`ansible_common.expand_pattern`);
- `[group:children]` lists child groups; `[group:vars]` holds one `key=value` a line;
- `[all]` lists hosts of the group `all` only (DeepOps's and older kubespray's sample
  inventories start with one, every host with its `ansible_host=`); `[all:children]` names
  top-level groups, which every group is already; `[all:vars]` holds the inventory's vars;
- values are read as Python literals where they are one (`ansible_port=2222` a number,
  `flag=True` a boolean, `"'03'"` a string), else kept as text: Ansible's `_parse_value`
  does this for host lines and `:vars` lines alike, and turns what a variable cannot hold
  into what it can, inside lists and dicts too: tuples and sets become lists, bytes text,
  `...` and complex numbers their text (`_parse_recursive_coerce_types_and_tag`);
- a group named only in `[x:children]` or `[x:vars]` and never declared is an error, as in
  Ansible ("includes undefined group").
"""
from __future__ import annotations

import ast
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

from ...ground.errors import Where
from ..yamlfile import read_text
from .ansible_common import AnsibleBuilder, expand_pattern
from .model import Inventory

# Ansible's section pattern: `[name]` or `[name:kind]`, then only a comment.
SECTION = re.compile(r"\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?")
GROUP_LINE = re.compile(r"([^:\]\s]+)\s*(?:[#;].*)?")


def read_ini_inventory(path: Path, text: str | None = None) -> Inventory:
    """Read an Ansible INI inventory; `InputError` at the first flaw, naming file and line."""
    text = read_text(path, "inventory") if text is None else text
    build = AnsibleBuilder(path)
    declared: set[str] = set()
    pending: dict[str, Where] = {}  # group named before (or without) its declaration
    group, kind = None, "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        where = Where(str(path), number)
        section = SECTION.fullmatch(line)
        if section:
            group, kind = section[1], section[2] or "hosts"
            if kind not in ("hosts", "children", "vars"):
                raise where.error(f"section [{group}:{kind}] has unknown type '{kind}' "
                                  "(Ansible's are :children and :vars)")
            if group == "all":  # every host and group is in 'all' already: nothing to declare
                continue
            build.add_group(group, where)
            if kind != "vars":
                declared.add(group)
            else:
                pending.setdefault(group, where)
            continue
        if line.startswith("["):
            raise where.error(f"invalid section {line!r} (no spaces inside [ ], and no "
                              "characters after it but a comment)")
        own = None if group == "all" else group
        if kind == "hosts":
            _host_line(build, line, where, own)
        elif kind == "children":
            child = GROUP_LINE.fullmatch(line)
            if child is None:
                raise where.error(f"expected a group name, got {line!r}")
            build.add_group(child[1], where)
            if own is not None:
                build.add_child(own, child[1])
            pending.setdefault(child[1], where)
        else:
            key, value = _assignment(line, where)
            build.set_var(own, key, value, where)
    for name, where in pending.items():
        if name not in declared:
            raise where.error(f"group '{name}' is named here but never declared with "
                              f"[{name}] or [{name}:children]")
    return build.finish()


def _host_line(build: AnsibleBuilder, line: str, where: Where, group: str | None) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise where.error(f"cannot read host line: {exc}") from None
    if not tokens:
        return
    names, port = expand_pattern(tokens[0], where)
    assignments = [_assignment(token, where, host_line=True) for token in tokens[1:]]
    for name in names:
        build.add_host(name, where, group)
        if port is not None:
            build.set_var(name, "ansible_port", port, where, host=True)
        for key, value in assignments:
            build.set_var(name, key, value, where, host=True)


def _assignment(text: str, where: Where, host_line: bool = False) -> tuple[str, Any]:
    if "=" not in text:
        what = "host variable" if host_line else "variable"
        raise where.error(f"expected a {what} as key=value, got {text!r}")
    key, value = (part.strip() for part in text.split("=", 1))
    if not key:
        raise where.error(f"a variable needs a name before '=' ({text!r})")
    return key, _parse_value(value)


def _parse_value(text: str) -> Any:
    """Ansible's `_parse_value`: a Python literal where the text is one, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _coerce(value)


def _coerce(value: Any) -> Any:
    """A literal as a variable can hold it, as Ansible 2.19's ini plugin coerces it."""
    if isinstance(value, (list, tuple, set)):
        return [_coerce(item) for item in value]
    if isinstance(value, dict):
        return {_coerce(key): _coerce(item) for key, item in value.items()}
    if value is Ellipsis:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value
