"""Real Ansible inventories (DeepOps, kubespray, Ansible's own tests: tests/fixtures/
ansible_inventories/SOURCES.md names each file's repository, path and commit) read by gpuprov
as `ansible-inventory --list` reads them: the answer ansible-core 2.19.14 gave for each file is
recorded beside it, and gpuprov must find the same hosts, groups, top-level groups,
addresses, users, ports, become settings and vars."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from remote.config.inventory import load_inventory
from remote.config.inventory.model import Inventory
from remote.ground.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "ansible_inventories"
ANSWER = ".ansible-inventory.json"
INVENTORIES = sorted(p.name[:-len(ANSWER)] for p in FIXTURES.glob(f"*{ANSWER}"))
NO_HOSTS = {"deepops-config.example-inventory"}  # every host line is commented out
# Ansible's boolean() words (lib/ansible/module_utils/parsing/convert_bool.py)
TRUE_WORDS = {"y", "yes", "on", "1", "true", "t"}


def _plain(value: Any) -> Any:
    """A value of the answer without its serialisation marks: the legacy profile writes a
    string Ansible holds as unsafe (an INI `b'...'` literal) as {"__ansible_unsafe": text}."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _first(hostvars: dict[str, Any], *names: str) -> Any:
    return next((hostvars[n] for n in names if n in hostvars), None)


def _ansible_host(name: str, hostvars: dict[str, Any]) -> dict[str, Any]:
    """What a host is to Ansible, from its merged vars in the answer."""
    port = _first(hostvars, "ansible_port", "ansible_ssh_port")
    interpreter = hostvars.get("ansible_python_interpreter", "auto")
    if interpreter.replace(" ", "") == "{{ansible_playbook_python}}":
        interpreter = sys.executable  # Ansible's own Python on the controller
    return {"address": _first(hostvars, "ansible_host", "ansible_ssh_host") or name,
            "user": _first(hostvars, "ansible_user", "ansible_ssh_user"),
            "port": None if port is None else int(port),
            "become": str(hostvars.get("ansible_become", False)).lower() in TRUE_WORDS,
            "become_user": hostvars.get("ansible_become_user", "root"),
            "local": hostvars.get("ansible_connection") == "local",
            "python": "python3" if interpreter.startswith("auto") else interpreter,
            "vars": {k: _plain(v) for k, v in hostvars.items() if not k.startswith("ansible_")}}


def _gpuprov_host(inventory: Inventory, name: str) -> dict[str, Any]:
    host = inventory.hosts[name]
    merged: dict[str, Any] = {}
    for layer, _ in inventory.layered_vars(host):
        merged.update(layer)
    return {"address": host.address, "user": host.user, "port": host.port,
            "become": host.become, "become_user": host.become_user or "root",
            "local": host.is_local, "python": host.python, "vars": merged}


def _ansible_groups(answer: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Each group the answer prints (one with hosts or children), and `ungrouped`."""
    return {name: {"hosts": group.get("hosts", []), "children": group.get("children", [])}
            for name, group in answer.items() if name not in ("_meta", "all")}


def _gpuprov_groups(inventory: Inventory) -> dict[str, dict[str, list[str]]]:
    groups = {name: {"hosts": g.hosts, "children": g.children}
              for name, g in inventory.groups.items() if g.hosts or g.children}
    grouped = {h for g in inventory.groups.values() for h in g.hosts}
    ungrouped = [h for h in inventory.hosts if h not in grouped]
    if ungrouped:
        groups["ungrouped"] = {"hosts": ungrouped, "children": []}
    return groups


def _top_level(inventory: Inventory) -> set[str]:
    children = {c for g in inventory.groups.values() for c in g.children}
    return {"ungrouped"} | {name for name in inventory.groups if name not in children}


@pytest.mark.parametrize("name", INVENTORIES)
def test_gpuprov_reads_a_real_inventory_as_ansible_inventory_does(name):
    answer = json.loads((FIXTURES / (name + ANSWER)).read_text())
    hostvars = answer["_meta"]["hostvars"]
    if name in NO_HOSTS:
        assert hostvars == {}
        with pytest.raises(InputError, match="the inventory defines no hosts"):
            load_inventory(FIXTURES / name)
        return
    inventory = load_inventory(FIXTURES / name)
    # hostvars holds the hosts that have vars; the groups name every host
    hosts = set(hostvars) | {h for group in _ansible_groups(answer).values()
                             for h in group["hosts"]}
    assert sorted(inventory.hosts) == sorted(hosts)
    for host in hosts:
        assert _gpuprov_host(inventory, host) == _ansible_host(host, hostvars.get(host, {})), host
    assert _gpuprov_groups(inventory) == _ansible_groups(answer)
    assert _top_level(inventory) == set(answer["all"]["children"])


def test_deepops_all_section_hosts_carry_their_address_into_every_group():
    """DeepOps's own sample inventory, its hosts uncommented as its header says: the `[all]`
    section gives each host its `ansible_host`, the group sections name the hosts again, and
    a group of the Slurm cluster reaches them through `[...:children]`."""
    inventory = load_inventory(FIXTURES / "deepops-config.example-inventory-uncommented")
    assert [h.address for h in inventory.select("slurm-cluster")] == ["10.0.1.1", "10.0.2.1",
                                                                       "10.0.2.2"]
    assert [h.name for h in inventory.select("k8s_cluster")] == ["mgmt01", "mgmt02", "mgmt03",
                                                                 "gpu01", "gpu02"]
