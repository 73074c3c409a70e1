"""Where gpuprov finds what it ships (recipes, tasks) and the user's inventory.

Everything is located from the installed package, never from the current folder, so the
`gpuprov` command works from any folder: in a clone (editable install) the shipped files are the
clone's own; after `pip install .` they sit next to the `remote` package in site-packages (the
wheel carries `playbooks/` and `tasks.py`, see pyproject.toml).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from .errors import InputError

# The folder holding `remote/`, `validate/`, `playbooks/` and `tasks.py`: the clone's root in an
# editable install, site-packages in a normal one.
INSTALL_ROOT = Path(__file__).resolve().parents[2]
RECIPES_DIR = INSTALL_ROOT / "playbooks"
TASKS_FILE = INSTALL_ROOT / "tasks.py"
VALIDATE_DIR = INSTALL_ROOT / "validate"  # the payload pushed to hosts
DEFAULT_RECIPE_NAME = "site.yaml"
INVENTORY_NAME = "inventory.yaml"
USER_INVENTORY = Path("~/.config/gpuprov") / INVENTORY_NAME


def recipe_path(given: Optional[str]) -> str:
    """The recipe to load: the path as written when it exists; else, for a bare file name such
    as `cuda-wheels.yaml` (or none given: `site.yaml`), the recipe of that name shipped with the
    package. Anything else is returned unchanged, so the loader reports it missing."""
    if not given:
        return str(RECIPES_DIR / DEFAULT_RECIPE_NAME)
    as_written = Path(given).expanduser()
    if as_written.exists() or len(as_written.parts) != 1:
        return given
    shipped = RECIPES_DIR / given
    return str(shipped) if shipped.is_file() else given


def inventory_path(given: Optional[str]) -> str:
    """The inventory to load: `given` as written; else `./inventory.yaml` when present; else the
    user's own (`~/.config/gpuprov/inventory.yaml`). Neither: an `InputError` saying how to
    make one."""
    if given:
        return given
    if Path(INVENTORY_NAME).is_file():
        return INVENTORY_NAME
    user = USER_INVENTORY.expanduser()
    if user.is_file():
        return str(user)
    example = INSTALL_ROOT / INVENTORY_NAME  # the clone's example; a wheel has none
    start = (f"mkdir -p {USER_INVENTORY.parent} && cp {example} {USER_INVENTORY}, then edit it"
             if example.is_file() else f"write {USER_INVENTORY}")
    raise InputError(f"no inventory: neither ./{INVENTORY_NAME} nor {USER_INVENTORY} exists; "
                     f"{start} (format: docs/reference/inventory.md), or pass --inventory PATH")
