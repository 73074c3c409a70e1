"""Small checks for loaded YAML: allowed keys (with a 'did you mean'), types, string lists."""
from __future__ import annotations

import difflib
from typing import Any, Iterable

from ..errors import Where

TYPE_NAMES = {str: "a string", int: "a whole number", bool: "true or false", dict: "a mapping",
              list: "a list", float: "a number"}


def suggest(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' hint, or '' when nothing is close."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_keys(mapping, allowed: Iterable[str], what: str) -> None:
    """Refuse keys of `mapping` not in `allowed`, naming the line of the offending key."""
    allowed = set(allowed)
    for key in mapping:
        if key not in allowed:
            raise mapping.at(key).error(
                f"{what}: unknown key '{key}'{suggest(key, allowed)}; allowed: {', '.join(sorted(allowed))}")


def expect(value: Any, kind: type, where: Where, what: str) -> Any:
    """Return `value` if it is of `kind`; otherwise raise an input error at `where`."""
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise where.error(f"{what} must be {TYPE_NAMES.get(kind, kind.__name__)}, "
                          f"not {_describe(value)}")
    return value


def expect_str_list(value: Any, where: Where, what: str) -> list:
    expect(value, list, where, what)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            at = value.at(index) if hasattr(value, "at") else where
            raise at.error(f"{what} must be a list of strings; item {index + 1} is {_describe(item)}")
    return value


def _describe(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    if isinstance(value, (dict, list)):
        return TYPE_NAMES[dict if isinstance(value, dict) else list]
    return f"{value!r}"
