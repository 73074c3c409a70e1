"""Schedulers: a cluster's nodes validated through its scheduler rather than over SSH.

A host whose inventory entry holds a key of `SCHEDULERS` (`slurm:`) is a cluster's login node:
`validate` on it goes `route.ClusterValidate`, which drives the scheduler's `base.Cluster` (list
the nodes, plan, resume, validate, drain, release) and reports a row per node. The command
line names no scheduler: it hands `SCHEDULERS` to the inventory reader (each row reads its own
key's settings) and to the route.

Adding a scheduler: a package here (its `base.Scheduler` row: the inventory key, a settings
reader, `open` returning its `base.Cluster`, the name of its run's `record`) and its row in
`SCHEDULERS` below. A row set in the table registers its record's name with the run folder
(`ground.runfolder.register_cluster_record`): a pull refuses it and `gpuprov report` reads a
folder holding it as the cluster's, no host's run.

- `base`   the protocols, the plan, what the route keeps per node
- `route`  the route itself, whatever the scheduler
- `slurm`  Slurm
"""
from __future__ import annotations

from typing import Any

from ..ground.runfolder import register_cluster_record
from .base import Cluster, NodeRecord, Plan, RouteFailed, RunContext, Scheduler
from .route import ClusterValidate
from .slurm import Slurm


class SchedulerTable(dict[str, Scheduler]):
    """Inventory key -> scheduler; setting a row registers its record's name with the run
    folder (the ground floor names no scheduler: the rows tell it theirs)."""

    def __setitem__(self, key: str, row: Scheduler) -> None:
        register_cluster_record(row.record)
        super().__setitem__(key, row)

    def update(self, *args: Any, **kwargs: Scheduler) -> None:
        for key, row in dict(*args, **kwargs).items():
            self[key] = row


SCHEDULERS: dict[str, Scheduler] = SchedulerTable()
for _row in (Slurm(),):
    SCHEDULERS[_row.key] = _row

__all__ = ["SCHEDULERS", "Cluster", "ClusterValidate", "NodeRecord", "Plan", "RouteFailed",
           "RunContext", "Scheduler", "SchedulerTable"]
