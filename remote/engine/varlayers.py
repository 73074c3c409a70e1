"""A host's vars in their layers (recipe defaults, inventory, `--var`) and the facts they read:
what a run works out once for every host (`run`, `jobs/apply`) and each session resolves.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from ..config.inventory import Host, Inventory
from ..config.recipe import Recipe
from ..config.templating import facts_read
from ..ground.errors import Where

Vars = dict[str, Any]
VarPositions = dict[str, Where]


def layered_vars(inventory: Inventory, host: Host, extra_vars: Vars,
                 recipe: Optional[Recipe[Any]] = None) -> tuple[Vars, VarPositions]:
    """(raw vars, where each is defined) for `host`, low to high precedence: the recipe's vars
    (its defaults), the inventory's layers (everywhere, groups parents first, the host's),
    `--var`."""
    raw: Vars = dict(recipe.vars) if recipe is not None else {}
    where: VarPositions = dict(recipe.vars_where) if recipe is not None else {}
    for layer, layer_where in inventory.layered_vars(host):
        raw.update(layer)
        where.update(layer_where)
    raw.update(extra_vars)
    return raw, where


def facts_read_by_vars(layers: Iterable[Vars]) -> Optional[set[str]]:
    """Fact names the values of these var layers can read; None means all of them."""
    used: set[str] = set()
    pending: list[Any] = [value for layer in layers for value in layer.values()]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending += value.values()
        elif isinstance(value, list):
            pending += value
        else:
            found = facts_read(value)
            if found is None:
                return None
            used |= found
    return used


def union(*names: Optional[set[str]]) -> Optional[set[str]]:
    """Fact names several readers need together; None (all) wins."""
    total: set[str] = set()
    for part in names:
        if part is None:
            return None
        total |= part
    return total
