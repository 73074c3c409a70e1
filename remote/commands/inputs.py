"""What every command checks before contacting a host: the inventory, the selected hosts, the
recipe and its vars per host, the nodes' profiles, the key files, and the options the commands
share (`--var`, `--tags`, `--suite`, `--forks`, `--serial`, a number of seconds). Each bad value
is an `InputError`: one line, exit 2.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from ..config.inventory import Host, Inventory, load_inventory
from ..config.recipe import Recipe, check_names, load_recipe
from ..config.templating import check_vars
from ..engine.facts import FACT_NAMES
from ..engine.rollout import Rollout, parse_max_fail, parse_serial
from ..engine.varlayers import layered_vars
from ..ground.errors import InputError, Unreachable, Where
from ..ground.forks import DEFAULT_FORKS
from ..kinds import KINDS, Kind
from ..scheduler import SCHEDULERS
from .assembly import Outputs
from .options import check_forks, parse_extra_vars, select_hosts

RESERVED = ("host", "facts", "vars")
Checked = tuple[Inventory, list[Host], Optional[Recipe[Kind[Any]]]]  # what `load_and_check` returns


def parse_vars(pairs: Optional[Iterable[str]]) -> dict[str, Any]:
    """`--var/-e/--extra-vars` values as a dict (`remote.commands.options.parse_extra_vars`)."""
    return parse_extra_vars(pairs)


def parse_tags(text: Optional[str]) -> Optional[set[str]]:
    tags = {t.strip() for t in (text or "").split(",") if t.strip()}
    return tags or None


def load_and_check(inventory_path: str, selection: Optional[str], recipe_path: Optional[str],
                   extra_vars: dict[str, Any], limit: Optional[str] = None) -> Checked:
    """Inventory, selected hosts (`--host` narrowed by `--limit`) and recipe, all checked;
    raises `InputError`."""
    inventory = load_inventory(inventory_path, SCHEDULERS)
    hosts = select_hosts(inventory, selection, limit)
    recipe = load_recipe(recipe_path, KINDS) if recipe_path else None
    if recipe is not None:
        checked: set[frozenset[str]] = set()
        for host in hosts:
            raw, where = layered_vars(inventory, host, extra_vars, recipe)
            for name in RESERVED:
                if name in raw:
                    raise InputError(f"'{name}' is a reserved name and cannot be a variable",
                                     inventory.path)
            key = frozenset(raw)
            if key not in checked:
                check_vars(raw, where, FACT_NAMES)
                check_names(recipe, set(raw), host.name, FACT_NAMES)
                checked.add(key)
    return inventory, hosts, recipe


def check_profiles(inventory: Inventory, hosts: list[Host], extra_vars: dict[str, Any],
                   recipe: Optional[Recipe[Kind[Any]]] = None) -> None:
    """Each selected host's `node_profile` and waivers, checked with validate's own checker
    before any host is contacted (`check_profile_vars`); each distinct set of values once."""
    from ..engine.jobs.validate import PROFILE_VARS, check_profile_vars

    seen: set[tuple[int, ...]] = set()
    for host in hosts:
        raw, where = layered_vars(inventory, host, extra_vars, recipe)
        key = tuple(id(raw.get(name)) for name in PROFILE_VARS)
        if key not in seen:
            seen.add(key)
            check_profile_vars(raw, where, extra_vars)


def check_key_files(hosts: list[Host]) -> None:
    """Each selected host's identity_file exists: else paramiko's "No such file or directory"
    read as a network error, host after host."""
    for host in hosts:
        if host.identity_file and not host.is_local:
            key_file = Path(os.path.expanduser(host.identity_file))
            if not key_file.is_file():
                state = "is not a file" if key_file.exists() else "does not exist"
                raise host.where.error(f"{host.name}: identity_file {key_file} {state}")


def load_for_run(inventory_path: str, selection: Optional[str], recipe_path: Optional[str],
                 extra_vars: dict[str, Any], limit: Optional[str] = None) -> Checked:
    """`load_and_check`, and what must be true on this machine to contact the hosts."""
    checked = load_and_check(inventory_path, selection, recipe_path, extra_vars, limit)
    check_key_files(checked[1])
    resolve_cache_address(checked[0])
    return checked


def resolve_cache_address(inventory: Inventory) -> None:
    """The fleet reaches the cache at its host's address unless `cache.address` says otherwise:
    an ssh_config alias (`Host cachebox` + `HostName 10.0.0.5`) means nothing on the fleet's
    hosts, so the address ssh_config gives it is used (as ssh would connect to it)."""
    cache = inventory.cache
    if cache is None or cache.address_given:
        return
    from ..transport.sshconfig import resolve  # reads ~/.ssh/config: only for a run

    try:
        address = resolve(inventory.hosts[cache.host]).address
    except Unreachable:
        return  # the cache host's connection says what is wrong with ~/.ssh/config
    inventory.cache = dataclasses.replace(cache, address=address)


def check_suite(suite: str) -> str:
    from ..engine.jobs.validate import SUITES

    if suite not in SUITES:
        raise InputError(f"--suite must be one of {', '.join(SUITES)}, not {suite!r}")
    return suite


def run_inputs(inventory: str, host: Optional[str], limit: Optional[str],
               recipe: Optional[str], var: Optional[list[str]], forks: Union[int, str, None],
               suite: str, outputs: Outputs) -> tuple[dict[str, Any], int, str, Checked]:
    """The options every run shares, checked: (vars, forks, suite, (inventory, hosts, recipe))."""
    extra_vars = parse_vars(var)
    outputs.check()
    return (extra_vars, check_forks(DEFAULT_FORKS if forks is None else forks), check_suite(suite),
            load_for_run(inventory, host, recipe, extra_vars, limit))


def rollout_for(serial: Optional[str], max_fail: Union[str, float, None],
                keys: dict[str, tuple[Any, Where]]) -> Optional[Rollout]:
    """The rollout `--serial` and `--max-fail-percentage` ask for, else the recipe's `serial:`
    and `max_fail_percentage:` (`keys`, with their positions); None: every host at once."""
    if serial is None and max_fail is None and not keys:
        return None
    sizes: tuple[Any, ...] = ()
    if serial is not None:
        sizes = parse_serial(str(serial))
    elif "serial" in keys:
        sizes = parse_serial(keys["serial"][0], "serial", keys["serial"][1])
    limit = 0.0
    if max_fail is not None:
        limit = parse_max_fail(max_fail)
    elif "max_fail_percentage" in keys:
        value, where = keys["max_fail_percentage"]
        limit = parse_max_fail(value, "max_fail_percentage", where)
    return Rollout(sizes, limit)


def seconds(flag: str, value: Union[float, str, None]) -> Optional[float]:
    """A positive, finite number of seconds given as `flag`, or None when not given."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{flag} must be a number of seconds, not {value!r}") from None
    if not number > 0:
        raise InputError(f"{flag} must be more than 0, not {value!r}")
    if math.isinf(number):  # no bound at all (1e400 is one too)
        raise InputError(f"{flag} must be a finite number of seconds, not {value!r}")
    return number
