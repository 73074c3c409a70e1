"""The routes a remediation runs over, one row each, keyed as the inventory names them: "ssh"
for the hosts without a scheduler, a scheduler's key (remote/scheduler/'s table) for a
cluster's login node. A row names the module, imported only when a selected host needs it,
whose `route(context, hosts)` gives the `Target` and the names of its nodes; a scheduler's
route adds its row here (its module beside this one).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.inventory import Host, Inventory
from ..engine.run import Run
from .target import Target

SSH = "ssh"
TARGETS: dict[str, str] = {
    SSH: "remote.remediation.ssh",
}


@dataclass
class RouteContext:
    """What a route gets: the run (its sessions, its run id: the remediation's), the
    inventory, where the logs go, the suite of the re-validation, the --var values."""

    run: Run
    inventory: Inventory
    logs_dir: Path
    suite: str
    extra_vars: dict[str, Any]


def route(key: str, context: RouteContext, hosts: list[Host]) -> tuple[Target, list[str]]:
    """The Target of the row `key` over `hosts`, and its nodes."""
    module = importlib.import_module(TARGETS[key])
    target, nodes = module.route(context, hosts)
    return target, list(nodes)
