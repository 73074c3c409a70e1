"""The commands of gpuprov, one module each, and their table.

Each command module reads its options, checks them (`inputs`), gets its Run from the one run
assembly (`assembly`: the redactor seeded with every secret of the inventory and vars, the
reporter, the run's options, and the exports) when it touches hosts, and calls its part's
package; it returns the exit status (`remote.ground.exitcodes`). `tasks.py` calls a command
through `call`, which imports the command's module only then: the table itself imports
nothing, so `gpuprov --help` and every command pay only for what they use.
"""
from __future__ import annotations

import importlib
from typing import Any

# name -> the module under remote/commands/ that runs it (its `run` function)
COMMANDS = {
    "provision": "provision",
    "facts": "facts",
    "validate": "validate",
    "fabric": "fabric",
    "logs": "logs",
    "evidence": "evidence",
    "report": "report",
    "lock": "lock",
    "bundle": "bundle",
    "sandbox": "sandbox",
    "remediate": "remediate",
}


def call(name: str, **options: Any) -> int:
    """Run the command `name` with `options` (as its module's `run` takes them); its exit status."""
    module = importlib.import_module(f"{__name__}.{COMMANDS[name]}")
    status: int = module.run(**options)
    return status
