"""What Ansible's two inventory formats share: host patterns with ranges (`gpu[01:64]`,
`db-[a:c]`, `:port`), the `ansible_*` connection variables, and `AnsibleBuilder`, which both
readers (`ansible_ini`, `ansible_yaml`) feed with hosts, groups and variables in file order and
which makes `model`'s objects from them with Ansible's meaning:

- the group `all`: its vars are the inventory's top-level vars; a host only under `all`
  (INI: before any section, or in `[all]`) belongs to no group (Ansible's `ungrouped`);
- a host named twice is one host, in every group that names it; its vars merge, later wins;
- variable precedence as Ansible's: all < parent groups < child groups < host vars (`model`);
- connection variables are taken from the host's merged variables (so `[gpus:vars]
  ansible_user=ubuntu` reaches every GPU host) and do not become recipe vars; every other
  variable does, at its group's or host's level. An `ansible_*` variable gpuprov does not
  understand, or a Jinja template in one, is refused at its file:line, never silently
  ignored.
"""
from __future__ import annotations

import re
import string
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from ...ground.errors import InputError, Where
from ..yamlfile import YamlMap
from .checks import check_graph, check_group_name, check_host_name, check_user_name
from .model import Group, Host, Inventory

# A range pattern names at most this many hosts, so a typo (`gpu[0:99999999]`) is refused
# instead of filling memory. Unsourced: ten times the largest fleet gpuprov was run on (64).
MAX_RANGE_HOSTS = 10_000

# `[beg:end]` or `[beg:end:step]` inside a host name (Ansible's detect_range/
# expand_hostname_range, lib/ansible/plugins/inventory/__init__.py; documented in "How to
# build your inventory", https://docs.ansible.com/ansible/latest/inventory_guide/
# intro_inventory.html#adding-ranges-of-hosts: "www[01:50].example.com", a stride
# "www[01:50:2]", letters "db-[a:f].example.com"; ranges are inclusive).
RANGE = re.compile(r"\[([^\]:]*):([^\]:]*)(?::([^\]:]*))?\]")
HOST_AND_PORT = re.compile(r"(?P<host>[^:\[\]]*(?:\[[^\]]*\][^:\[\]]*)*):(?P<port>[0-9]+)")

# Ansible's connection variables that gpuprov understands, and the Host field each sets
# (Ansible's names: https://docs.ansible.com/ansible/latest/inventory_guide/
# intro_inventory.html#connecting-to-hosts-behavioral-inventory-parameters; the `ansible_ssh_*`
# spellings are the older names the same page lists for host, port and user).
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
PORT_VARS = ("ansible_port", "ansible_ssh_port")
USER_VARS = ("ansible_user", "ansible_ssh_user")
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
# The login password: the ssh connection plugin's `password` option reads these three
# (lib/ansible/plugins/connection/ssh.py, DOCUMENTATION: password, vars). DeepOps's Vagrant
# inventories (virtual/virtual_inventory*) log in as vagrant/vagrant this way.
PASSWORD_VARS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")
# sudo's password: the sudo become plugin's `become_pass` reads these (lib/ansible/plugins/
# become/sudo.py, DOCUMENTATION).
BECOME_PASSWORD_VARS = ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass")
# Pipelining spares Ansible copying a module file to the host before running it (the ssh
# plugin's `pipelining` option, lib/ansible/plugins/connection/ssh.py); gpuprov copies none,
# each command goes over the SSH session as it is, so on or off is the same run.
PIPELINING_VARS = ("ansible_pipelining", "ansible_ssh_pipelining")
OTHER_VARS = ("ansible_become", "ansible_become_method", "ansible_become_user",
              "ansible_connection", "ansible_python_interpreter")
KNOWN_VARS = (ADDRESS_VARS + PORT_VARS + USER_VARS + KEY_VARS + PASSWORD_VARS
              + BECOME_PASSWORD_VARS + PIPELINING_VARS + OTHER_VARS)
# ansible_connection values that mean "over SSH" (Ansible's ssh plugin; `smart` picks ssh,
# `paramiko`/`paramiko_ssh` is Ansible's other SSH client) and "this machine".
SSH_CONNECTIONS = ("ssh", "smart", "paramiko", "paramiko_ssh")
# `ansible_python_interpreter="{{ ansible_playbook_python }}"` (Ansible's own test
# inventories): "the path to the python interpreter being used by Ansible on the controller"
# (https://docs.ansible.com/ansible/latest/reference_appendices/special_variables.html), which
# for gpuprov is the Python running it. Any other template in a connection variable is refused.
PLAYBOOK_PYTHON = re.compile(r"\{\{\s*ansible_playbook_python\s*\}\}")
# Ansible's boolean() (lib/ansible/module_utils/parsing/convert_bool.py): BOOLEANS_TRUE and
# BOOLEANS_FALSE, compared lowercased.
TRUE_WORDS = ("y", "yes", "on", "1", "true", "t")
FALSE_WORDS = ("n", "no", "off", "0", "false", "f")


def expand_pattern(pattern: str, where: Where) -> tuple[list[str], Optional[int]]:
    """The host names a pattern stands for, and the port it names (`host:2222`), as Ansible's
    `_expand_hostpattern`: every `[beg:end(:step)]` expands, left to right; numbers keep a
    leading zero's width (`[01:64]` -> 01 ... 64, both ends as wide); single letters range
    over a-z then A-Z (Python's string.ascii_letters, as Ansible does)."""
    port = None
    match = HOST_AND_PORT.fullmatch(pattern)
    if match:
        pattern, port = match["host"], int(match["port"])
        if not 0 < port < 65536:
            raise where.error(f"host '{pattern}': port must be a number from 1 to 65535")
    names = [pattern]
    while "[" in names[0]:
        expanded: list[str] = []
        for name in names:
            found = RANGE.search(name)
            if found is None:
                raise where.error(f"host pattern '{pattern}' has a '[' that is not a range "
                                  "[begin:end] or [begin:end:step]")
            head, tail = name[:found.start()], name[found.end():]
            expanded += [head + item + tail for item in _range(found, pattern, where)]
            if len(expanded) > MAX_RANGE_HOSTS:
                raise where.error(f"host pattern '{pattern}' names more than {MAX_RANGE_HOSTS} "
                                  "hosts")
        names = expanded
    return names, port


def _ascii_number(text: str) -> bool:
    """Digits 0-9 only: str.isdigit() also takes "²" (which int() refuses) and other scripts'
    digits (which int() reads), so a typo would crash or pass as a number."""
    return text.isascii() and text.isdigit()


def _range(found: re.Match[str], pattern: str, where: Where) -> list[str]:
    beg, end, step_text = found[1] or "0", found[2], found[3]
    if not end:
        raise where.error(f"host range in '{pattern}' has no end value")
    try:
        step = int(step_text) if step_text else 1
    except ValueError:
        raise where.error(f"host range in '{pattern}': the step must be a number") from None
    if step < 1:
        raise where.error(f"host range in '{pattern}': the step must be 1 or more")
    letters = string.ascii_letters
    if beg in letters and end in letters and len(beg) == len(end) == 1:
        if letters.index(beg) > letters.index(end):
            raise where.error(f"host range in '{pattern}' must have begin <= end")
        return list(letters[letters.index(beg):letters.index(end) + 1:step])
    if not (_ascii_number(beg) and _ascii_number(end)):
        raise where.error(f"host range in '{pattern}' must be numbers or single letters, not "
                          f"[{found[1]}:{end}]")
    width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
    if width and len(end) != width:
        raise where.error(f"host range in '{pattern}': with a leading zero, begin and end must "
                          f"have the same width ({beg} and {end})")
    first, last = int(beg), int(end)
    if first > last:
        raise where.error(f"host range in '{pattern}' must have begin <= end")
    if (last - first) // step + 1 > MAX_RANGE_HOSTS:
        raise where.error(f"host pattern '{pattern}' names more than {MAX_RANGE_HOSTS} hosts")
    return [str(n).zfill(width) for n in range(first, last + 1, step)]


def vars_map(where: Where) -> YamlMap:
    """An empty mapping of variables that remembers positions, as the YAML loader's do."""
    result = YamlMap()
    result.where, result.key_where = where, {}
    return result


class AnsibleBuilder:
    """Hosts, groups and variables as an Ansible reader meets them, then `finish` to the model."""

    def __init__(self, path: Path):
        self.path = path
        self.hosts: dict[str, Host] = {}
        self.groups: dict[str, Group] = {}
        self.top_vars = vars_map(Where(str(path), 1))

    def add_host(self, name: str, where: Where, group: Optional[str]) -> Host:
        """The host `name` (made at its first mention), added to `group` (None: `all` only)."""
        host = self.hosts.get(name)
        if host is None:
            check_host_name(name, where)
            host = Host(name=name, address=name, where=where, vars=vars_map(where))
            self.hosts[name] = host
        if group is not None and name not in self.groups[group].hosts:
            self.groups[group].hosts.append(name)
        return host

    def add_group(self, name: str, where: Where) -> Group:
        group = self.groups.get(name)
        if group is None:
            check_group_name(name, where)
            group = Group(name=name, where=where, vars=vars_map(where))
            self.groups[name] = group
        return group

    def add_child(self, parent: str, child: str) -> None:
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)

    def set_var(self, owner: Optional[str], key: str, value: Any, where: Where,
                host: bool = False) -> None:
        """Set `key` on a host (`host=True`), a group, or (owner None) the whole inventory."""
        if not isinstance(key, str) or not key:
            raise where.error(f"variable name {key!r} is not a name")
        target = self.top_vars if owner is None else \
            self.hosts[owner].vars if host else self.groups[owner].vars
        target[key] = value
        getattr(target, "key_where")[key] = where  # noqa: B009 - a YamlMap, typed as a dict

    def finish(self) -> Inventory:
        """The inventory, with each host's connection settings taken from its variables."""
        if not self.hosts:
            raise InputError("the inventory defines no hosts", self.path)
        check_graph(self.hosts, self.groups)
        inventory = Inventory(path=self.path, hosts=self.hosts, groups=self.groups,
                              vars=self.top_vars, vars_where=self.top_vars.key_where)
        for host in self.hosts.values():
            merged: dict[str, tuple[Any, Where]] = {}
            for layer, where_of in inventory.layered_vars(host):
                for key, value in layer.items():
                    if key.startswith("ansible_"):
                        merged[key] = (value, where_of.get(key, host.where))
            _apply(host, merged)
        for owner in [self.top_vars, *(g.vars for g in self.groups.values()),
                      *(h.vars for h in self.hosts.values())]:
            for key in [k for k in owner if k.startswith("ansible_")]:
                del owner[key]
        return inventory


def _apply(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    """Set `host`'s connection settings from its merged `ansible_*` variables: each rule of
    APPLY in turn (the first flaw is the one reported)."""
    for rule in APPLY:
        rule(host, merged)


def _refuse_unknown(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    for key, (_, where) in merged.items():
        if key not in KNOWN_VARS:
            raise where.error(
                f"host '{host.name}': {key} is not supported (gpuprov would connect without it); "
                f"supported: {', '.join(KNOWN_VARS)}; give other SSH options in ~/.ssh/config")


def _apply_texts(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    """Address, user, key file and passwords: the first of each one's names given."""
    for names, field in ((ADDRESS_VARS, "address"), (USER_VARS, "user"),
                         (KEY_VARS, "identity_file"), (PASSWORD_VARS, "password"),
                         (BECOME_PASSWORD_VARS, "become_password")):
        given = next((k for k in names if k in merged), None)
        if given is not None:
            setattr(host, field, _text(host, given, *merged[given]))


def _apply_port(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    port_key = next((k for k in PORT_VARS if k in merged), None)
    if port_key is not None:
        value, where = merged[port_key]
        port = int(value) if isinstance(value, str) and _ascii_number(value) else value
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise where.error(f"host '{host.name}': {port_key} must be a number from 1 to 65535")
        host.port = port


def _check_pipelining(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    for key in PIPELINING_VARS:
        if key in merged:
            _boolean(host, key, *merged[key])  # a wrong word is still a typo to report


def _apply_connection(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    if "ansible_connection" in merged:
        connection = _text(host, "ansible_connection", *merged["ansible_connection"])
        if connection not in SSH_CONNECTIONS + ("local",):
            raise merged["ansible_connection"][1].error(
                f"host '{host.name}': ansible_connection={connection} is not supported "
                f"(gpuprov connects over ssh or local)")
        host.connection = "local" if connection == "local" else "ssh"


def _apply_python(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    if "ansible_python_interpreter" in merged:
        value, where = merged["ansible_python_interpreter"]
        python = sys.executable if isinstance(value, str) and PLAYBOOK_PYTHON.fullmatch(value) \
            else _text(host, "ansible_python_interpreter", value, where)
        if not python.startswith("auto"):  # auto, auto_silent, auto_legacy: Ansible's discovery
            host.python = python


def _apply_become(host: Host, merged: dict[str, tuple[Any, Where]]) -> None:
    """`ansible_become` and whom it becomes: `ansible_become_user` (Ansible's default root;
    another user is `sudo -u USER`), through sudo only (`ansible_become_method`)."""
    if "ansible_become" in merged:
        host.become = _boolean(host, "ansible_become", *merged["ansible_become"])
    if "ansible_become_method" in merged:
        method = _text(host, "ansible_become_method", *merged["ansible_become_method"])
        if method != "sudo":
            raise merged["ansible_become_method"][1].error(
                f"host '{host.name}': ansible_become_method={method} is not supported; "
                "gpuprov becomes another user with sudo only")
    if "ansible_become_user" in merged:
        value, where = merged["ansible_become_user"]
        user = _text(host, "ansible_become_user", value, where)
        check_user_name(user, where, f"host '{host.name}': ansible_become_user")
        host.become_user = None if user == "root" else user


# The rules `_apply` applies, in order.
APPLY: tuple[Callable[[Host, dict[str, tuple[Any, Where]]], None], ...] = (
    _refuse_unknown, _apply_texts, _apply_port, _apply_become, _check_pipelining,
    _apply_connection, _apply_python)


def _text(host: Host, key: str, value: Any, where: Where) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool) or value == "":
        raise where.error(f"host '{host.name}': {key} must be a text value, not {value!r}")
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        raise where.error(f"host '{host.name}': {key}={value} is a Jinja template; gpuprov "
                          "takes connection variables as written (give the value itself)")
    return str(value)


def _boolean(host: Host, key: str, value: Any, where: Where) -> bool:
    """Ansible's boolean(): True/False, 1/0 and the words yes/no, on/off, true/false, y/n, t/f."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise where.error(f"host '{host.name}': {key} must be true or false, not {value!r}")
