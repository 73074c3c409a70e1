"""Command-line values with the meaning Ansible gives them: host patterns (`--host`, `-l/--limit`)
and extra vars (`-e/--extra-vars`). Every bad value is an `InputError`: one line, exit 2.
"""
from __future__ import annotations

import json
import shlex
from typing import Any, Iterable, Optional, Union

from ..config.inventory import Host, Inventory
from ..config.yamlfile import YamlMap, load_yaml
from ..container import Container, check_image
from ..ground.errors import InputError

_BOOLEANS = {"true": True, "false": False}


def parse_extra_vars(values: Optional[Iterable[str]]) -> dict[str, Any]:
    """`-e/--extra-vars/--var` values, later ones winning, as Ansible reads them
    (https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_variables.html, "Defining
    variables at runtime"): `k=v` pairs (several in one value, split as a shell would, when
    every word is one; else the whole value is one `k=v`, as `--var` always took it), a JSON
    object (`{"k": 1}`), or `@FILE` (a YAML or JSON mapping). Unlike Ansible, a `k=v` value of
    true/false becomes a boolean, so that `when: with_torch` means what it says; every other
    `k=v` value stays the string typed (12.8 stays "12.8")."""
    out: dict[str, Any] = {}
    for value in values or []:
        text = value.strip()
        if text.startswith("@"):
            out.update(_vars_file(text[1:]))
        elif text.startswith("{"):
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise InputError(f"--var {value!r} is not valid JSON: {exc}") from None
            if not isinstance(data, dict):
                raise InputError(f"--var {value!r} must be a JSON object")
            out.update({_name(k, value): v for k, v in data.items()})
        else:
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise InputError(f"--var {value!r}: {exc}") from None
            if not words:
                raise InputError(f"--var {value!r} must look like NAME=VALUE")
            if not all(_is_pair(word) for word in words):
                words = [text]  # `validate_args=--checks system`: one NAME=VALUE, as typed
            for word in words:
                key, sep, item = word.partition("=")
                if not sep:
                    raise InputError(f"--var {word!r} must look like NAME=VALUE")
                out[_name(key.strip(), word)] = _BOOLEANS.get(item.strip().lower(), item)
    return out


def _is_pair(word: str) -> bool:
    key, sep, _ = word.partition("=")
    return bool(sep) and key.strip().isidentifier()


def _name(key: Any, given: str) -> str:
    if not isinstance(key, str) or not key:
        raise InputError(f"--var {given!r} must look like NAME=VALUE")
    if not key.isidentifier():
        raise InputError(f"--var {given!r}: {key!r} is not a valid variable name")
    return key


VARS_FILE_MAPPING = "an extra vars file must be a mapping of NAME: VALUE"


def _vars_file(path: str) -> dict[str, Any]:
    if not path:
        raise InputError("--var @FILE needs a file name after @")
    try:
        data: Optional[YamlMap] = load_yaml(path, "extra vars file", mapping=VARS_FILE_MAPPING)
    except OSError as exc:
        raise InputError(f"--var @{path}: cannot read it: {exc.strerror}") from None
    if data is None:
        return {}
    for key in data:
        if not isinstance(key, str) or not key.isidentifier():
            raise data.at(key).error(f"{key!r} is not a valid variable name")
    return dict(data)


def select_hosts(inventory: Inventory, host: Optional[str], limit: Optional[str]) -> list[Host]:
    """The hosts `--host PATTERN` selects, narrowed by `--limit PATTERN`: Ansible's host patterns
    (https://docs.ansible.com/ansible/latest/inventory_guide/intro_patterns.html): terms split on
    `,` or `:`; a plain term adds hosts (a name, a group, a glob, `all`), `!term` removes them,
    `&term` keeps only hosts also in it. `all` leaves out a `localhost` with `connection: local`
    (as Ansible's implicit localhost is outside `all`): name it to act on this machine. With
    only `--limit`, its pattern alone selects. Inventory order."""
    if host is None and limit is None:
        raise InputError("--host (or --limit) is required, e.g. --host gpu1")
    if host is None:
        chosen = _pattern(inventory, str(limit), "--limit")
    else:
        chosen = _pattern(inventory, host, "--host")
        if limit is not None:
            chosen &= _pattern(inventory, limit, "--limit")
    hosts = [h for name, h in inventory.hosts.items() if name in chosen]
    if not hosts:
        given = " ".join(f"{flag} {value!r}" for flag, value in (("--host", host),
                                                                  ("--limit", limit)) if value)
        raise InputError(f"{given} selects no host", inventory.path)
    return hosts


def _pattern(inventory: Inventory, pattern: str, flag: str) -> set[str]:
    terms = [t.strip() for t in pattern.replace(":", ",").split(",")]
    if not any(terms):
        raise InputError(f"{flag} needs a host, group, glob or 'all'", inventory.path)
    added: Optional[set[str]] = None
    removed: set[str] = set()
    kept: list[set[str]] = []
    for term in terms:
        if not term:
            continue
        if term[0] in "!&":
            names = _term(inventory, term[1:], flag, term)
            if term[0] == "!":
                removed |= names
            else:
                kept.append(names)
        else:
            added = (added or set()) | _term(inventory, term, flag, term)
    result = added if added is not None else _term(inventory, "all", flag, "all")
    for names in kept:
        result &= names
    return result - removed


def _term(inventory: Inventory, term: str, flag: str, given: str) -> set[str]:
    if not term:
        raise InputError(f"{flag} {given!r}: a name must follow ! or &", inventory.path)
    if term == "all":
        return {name for name, h in inventory.hosts.items()
                if not (name == "localhost" and h.is_local)}
    try:
        return {h.name for h in inventory.select(term)}
    except InputError as exc:
        raise InputError(str(exc.message).replace("--host", flag, 1), exc.file) from None


def check_forks(forks: Union[int, str]) -> int:
    """`-f/--forks N`: a whole number of 1 or more."""
    try:
        value = int(forks)
    except (TypeError, ValueError):
        raise InputError(f"--forks must be a whole number, not {forks!r}") from None
    if value < 1:
        raise InputError("--forks must be 1 or more")
    return value


def container_option(given: Optional[str], hosts: list[Host]) -> Optional[Container]:
    """`--container IMAGE` (remote/container/): None without it; an image path (an OCI bundle
    or squashfs on a cluster's nodes) only where every selected host is a cluster's login
    node, as podman and docker on an SSH host run images by name."""
    container = check_image(given)
    if container is not None and container.is_path:
        plain = [h.name for h in hosts if not h.scheduler]
        if plain:
            raise InputError(f"--container {container.image!r}: a path is an OCI bundle or image on "
                             f"a cluster's nodes (srun); {plain[0]} is an SSH host: give it an image "
                             "name that podman or docker there knows")
    return container
