"""Schedulers: a cluster's nodes validated through its scheduler rather than over SSH.

A host whose inventory entry holds a key of `SCHEDULERS` (`slurm:`) is a cluster's login node:
`validate` on it goes `route.ClusterValidate`, which drives the scheduler's `base.Cluster` (list
the nodes, plan, resume, validate, drain, release) and reports a row per node. The command
line names no scheduler: it hands `SCHEDULERS` to the inventory reader (each row reads its own
key's settings) and to the route.

Adding a scheduler: a package here (its `base.Scheduler` row: the inventory key, a settings
reader, `open` returning its `base.Cluster`) and its row in `SCHEDULERS` below.

- `base`   the protocols, the plan, what the route keeps per node
- `route`  the route itself, whatever the scheduler
- `slurm`  Slurm
"""
from __future__ import annotations

from .base import Cluster, NodeRecord, Plan, RouteFailed, RunContext, Scheduler
from .route import ClusterValidate
from .slurm import Slurm

# inventory key -> scheduler
SCHEDULERS: dict[str, Scheduler] = {s.key: s for s in (Slurm(),)}

__all__ = ["SCHEDULERS", "Cluster", "ClusterValidate", "NodeRecord", "Plan", "RouteFailed",
           "RunContext", "Scheduler"]
