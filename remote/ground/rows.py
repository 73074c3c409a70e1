"""A table of rows whose modules are imported when a row is first used.

The kinds and the schedulers are tables: a recipe names the kinds it uses, an inventory the
scheduler it has, and a run should import those alone (a no-op `provision` of a shell-only
recipe imports no apt or pip code, and no Slurm code without a `slurm:` host). A row is
declared by its key and where its class is (`"package.module:Class"`); the class is imported and
instantiated with no arguments on the first look-up of its key. Keys, `in` and `len` never
import anything; `values()` and `items()` load every row (the reference pages list them all).
A row set directly (`table[key] = row`, as a test plugs one in) is used as it is.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Optional, TypeVar

V = TypeVar("V")


class Rows(MutableMapping[str, V]):
    """Key -> row, each row loaded from its declared place when first looked up."""

    def __init__(self, declared: Optional[Mapping[str, str]] = None):
        self._places: dict[str, str] = dict(declared or {})
        self._rows: dict[str, V] = {}

    def declare(self, key: str, place: str) -> None:
        """Row `key` is the class at `place` ("package.module:Class"), made when first used."""
        self._rows.pop(key, None)
        self._places[key] = place

    def __getitem__(self, key: str) -> V:
        if key not in self._rows:
            place = self._places[key]  # KeyError for an unknown key, as a dict's
            module, _, name = place.partition(":")
            row: V = getattr(importlib.import_module(module), name)()
            self._rows[key] = row
        return self._rows[key]

    def __setitem__(self, key: str, row: V) -> None:
        self._places.pop(key, None)
        self._rows[key] = row

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._places.pop(key, None)
        self._rows.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._places) + [k for k in self._rows if k not in self._places])

    def __len__(self) -> int:
        return len(set(self._places) | set(self._rows))

    def __contains__(self, key: Any) -> bool:
        return key in self._places or key in self._rows

    def loaded(self) -> list[str]:
        """The keys whose row has been made (tests: what a run imported)."""
        return [k for k in self if k in self._rows]
