"""Schedulers: a cluster's nodes validated through its scheduler rather than over SSH.

A host whose inventory entry holds a key of `SCHEDULERS` (`slurm:`) is a cluster's login node:
`validate` on it goes `route.ClusterValidate`, which drives the scheduler's `base.Cluster` (list
the nodes, plan, resume, validate, drain, release) and reports a row per node. The command
line names no scheduler: it hands `SCHEDULERS` to the inventory reader (each row reads its own
key's settings) and to the route.

Adding a scheduler: a package here (its `base.Scheduler` row: the inventory key, a settings
reader, `open` returning its `base.Cluster`, the name of its run's `record`) and its row in
`SCHEDULERS` below, declared by its key, where its row class is and its record's name: the
package is imported only when an inventory names the key. A row declared or set in the table
registers its record's name with the run folder (`ground.runfolder.register_cluster_record`): a
pull refuses it and `gpuprov report` reads a folder holding it as the cluster's, no host's run.

- `base`   the protocols, the plan, what the route keeps per node
- `route`  the route itself, whatever the scheduler
- `slurm`  Slurm
"""
from __future__ import annotations

from typing import Optional

from ..ground.rows import Rows
from ..ground.runfolder import register_cluster_record
from .base import Cluster, NodeRecord, Plan, RouteFailed, RunContext, Scheduler
from .slurm import CLUSTER_RECORD as SLURM_RECORD


class SchedulerTable(Rows[Scheduler]):
    """Inventory key -> scheduler, each row's package imported when an inventory first names
    its key (remote/ground/rows.py); declaring or setting a row registers its record's name
    with the run folder (the ground floor names no scheduler: the rows tell it theirs), so a
    pull refuses it whether or not the row was ever loaded."""

    def declare(self, key: str, place: str, record: Optional[str] = None) -> None:
        assert record is not None, "a scheduler's row names its record"
        register_cluster_record(record)
        super().declare(key, place)

    def __setitem__(self, key: str, row: Scheduler) -> None:
        register_cluster_record(row.record)
        super().__setitem__(key, row)


SCHEDULERS = SchedulerTable()
SCHEDULERS.declare("slurm", "remote.scheduler.slurm.row:Slurm", record=SLURM_RECORD)


__all__ = ["SCHEDULERS", "Cluster", "NodeRecord", "Plan", "RouteFailed",
           "RunContext", "Scheduler", "SchedulerTable"]
