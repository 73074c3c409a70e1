"""The checks every inventory gets, whatever its format: names, the group graph (unknown
children, cycles, depth) and jump hosts (unknown, itself, local, cycles, chains too long).
Each raises `InputError` at the definition's own file and line (`Where`).
"""
from __future__ import annotations

import re

from ...ground.errors import Where
from .model import NAME, Group, Host

MAX_GROUP_DEPTH = 50
MAX_JUMPS = 10  # jump hosts in a chain (each hop is one more SSH connection)


def check_host_name(name: str, where: Where) -> None:
    if not NAME.fullmatch(name):
        raise where.error(f"host name {name!r} may hold only letters, digits, '.', '_' and '-'")


# A user name as POSIX means it (IEEE Std 1003.1-2017, 3.437 User Name: characters of the
# portable filename character set, letters, digits, '.', '_', '-', the hyphen not first; nor
# a dot here, as busybox's die_if_bad_username), with the final '$' of Samba machine
# accounts; at most 32 bytes, glibc's UT_NAMESIZE (utmp).
USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?")
USER_NAME_MAX = 32


def check_user_name(name: str, where: Where, what: str) -> None:
    if not USER_NAME.fullmatch(name) or len(name.encode()) > USER_NAME_MAX:
        raise where.error(f"{what}: {name!r} is not a user name (letters, digits, '.', '_' and "
                          "'-', at most 32, not starting with '-' or '.')")


def check_group_name(name: str, where: Where) -> None:
    if not NAME.fullmatch(name):
        raise where.error(f"group name {name!r} may hold only letters, digits, '.', '_' and '-'")
    if name == "all":
        raise where.error("'all' is reserved: it already means every host")


def check_graph(hosts: dict[str, Host], groups: dict[str, Group]) -> None:
    """What no inventory may hold, in this order: a name both a host and a group, unknown or
    cyclic child groups, wrong jump hosts."""
    for name in groups:
        if name in hosts:
            raise groups[name].where.error(f"'{name}' is both a host and a group")
    _check_children(groups)
    _check_jumps(hosts)
    _check_jump_chains(hosts)


def _check_jumps(hosts: dict[str, Host]) -> None:
    for host in hosts.values():
        if host.jump is not None:
            if host.jump not in hosts:
                raise host.where.error(f"host '{host.name}': jump host '{host.jump}' is not in the inventory")
            if host.jump == host.name:
                raise host.where.error(f"host '{host.name}' cannot be its own jump host")
            if hosts[host.jump].is_local:
                raise host.where.error(f"host '{host.name}': jump host '{host.jump}' has "
                                       "connection: local (a jump host is reached over SSH)")


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
