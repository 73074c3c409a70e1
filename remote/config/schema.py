"""Checks for loaded YAML: allowed keys (with a 'did you mean'), types, string lists, and the
argument specs of step kinds and of a step's common keys (`Arg`, `check_args`).

An argument spec works like Ansible's `argument_spec`: each name maps to the types it may have,
its default, the values it may take and whether it is required, written once; `check_args`
checks a mapping against it and fills in the defaults.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from ..ground.errors import Where

TYPE_NAMES: dict[type, str] = {str: "a string", int: "a whole number", bool: "true or false", dict: "a mapping",
              list: "a list", float: "a number"}


@dataclass(frozen=True)
class Arg:
    """One argument. `types`: those it may have, the first named in messages (none: any value);
    `choices`: the values it may take; `items`: the type a list's items must have; `valid`: a
    further condition, `must` saying what it asks for ("'retries' must be {must}"); `nullable`:
    an empty value (`key:` or `key: null`) counts as not given."""

    types: tuple[type, ...] = ()
    default: Any = None
    choices: tuple[str, ...] = ()
    required: bool = False
    items: Optional[type] = None
    valid: Optional[Callable[[Any], bool]] = None
    must: str = ""
    nullable: bool = False


def check_args(mapping: Mapping[str, Any], spec: Mapping[str, Arg], where: Where, what: str = "",
               known_keys: bool = True) -> dict[str, Any]:
    """Check `mapping` against `spec` and return its values with the defaults filled in.

    `what` names the owner in messages (`'apt.state'`, `'apt' needs 'packages'`); without it a
    key is named alone (`'retries'`). Values are checked in the spec's order; errors point at the
    key's line when the mapping was loaded with positions, else at `where`. `known_keys=False`
    leaves keys outside the spec to the caller.
    """
    if known_keys:
        check_keys(mapping, spec, f"'{what}'", where)
    out: dict[str, Any] = {}
    for name, arg in spec.items():
        value = mapping.get(name)
        if arg.required and (value is None or value == ""):
            raise where.error(f"'{what}' needs '{name}'")
        if value is None and (arg.nullable or name not in mapping):
            out[name] = arg.default
            continue
        label = f"'{what}.{name}'" if what else f"'{name}'"
        _check_value(value, arg, label, _position(mapping, name, where), where)
        out[name] = value
    out.update((key, value) for key, value in mapping.items() if key not in spec)
    return out


def _check_value(value: Any, arg: Arg, label: str, at: Where, where: Where) -> None:
    """The rules of `arg` on a value given: its type, its items' type, its own check, its
    choices. Errors point at the key's line `at`; a choice's at the step (`where`), like the
    other checks of a value's meaning."""
    if arg.types and not any(_is(value, kind) for kind in arg.types):
        expect(value, arg.types[0], at, label)
    if arg.items is not None and isinstance(value, list):
        expect_list_of(value, arg.items, at, label)
    if arg.valid is not None and not arg.valid(value):
        raise at.error(f"{label} must be {arg.must}")
    if arg.choices and value not in arg.choices:
        raise where.error(f"{label} must be {_one_of(arg.choices)}"
                          f"{suggest(str(value), arg.choices)}")


def suggest(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' hint, or '' when nothing is close."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_keys(mapping: Mapping[str, Any], allowed: Iterable[str], what: str,
               where: Optional[Where] = None) -> None:
    """Refuse keys of `mapping` not in `allowed`, naming the line of the offending key (or
    `where`, for a mapping loaded without positions)."""
    allowed = set(allowed)
    for key in mapping:
        if key not in allowed:
            raise _position(mapping, key, where or Where("<input>", 0)).error(
                f"{what}: unknown key '{key}'{suggest(key, allowed)}; allowed: {', '.join(sorted(allowed))}")


def expect(value: Any, kind: type, where: Where, what: str) -> Any:
    """Return `value` if it is of `kind`; otherwise raise an input error at `where`."""
    if not _is(value, kind):
        raise where.error(f"{what} must be {TYPE_NAMES.get(kind, kind.__name__)}, "
                          f"not {_describe(value)}")
    return value


def expect_str_list(value: Any, where: Where, what: str) -> list[Any]:
    expect(value, list, where, what)
    return expect_list_of(value, str, where, what)


def expect_list_of(value: list[Any], kind: type, where: Where, what: str) -> list[Any]:
    """Return the list `value` if every item is of `kind`; otherwise raise at the item."""
    for index, item in enumerate(value):
        if not _is(item, kind):
            at = value.at(index) if hasattr(value, "at") else where
            raise at.error(f"{what} must be a list of {_plural(kind)}; item {index + 1} is "
                           f"{_describe(item)}")
    return value


def _is(value: Any, kind: type) -> bool:
    """isinstance, except that true/false is no number and a whole number is a number."""
    if kind in (int, float) and isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _position(mapping: Mapping[str, Any], key: str, default: Where) -> Where:
    at = getattr(mapping, "at", None)
    return at(key) if at is not None else default


def _one_of(choices: tuple[str, ...]) -> str:
    return " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"


def _plural(kind: type) -> str:
    return "strings" if kind is str else TYPE_NAMES.get(kind, kind.__name__) + " values"


def _describe(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    if isinstance(value, (dict, list)):
        return TYPE_NAMES[dict if isinstance(value, dict) else list]
    return f"{value!r}"
