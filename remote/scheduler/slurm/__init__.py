"""Slurm: a cluster's nodes validated through the scheduler instead of over SSH, one at a time.

A host with `slurm:` in the inventory (`settings`) is the cluster's login node, reached like any
host. `validate` on it asks Slurm for the partition's nodes, runs the validation package on all
of them in one job (one allocation, one srun step whose tasks are the nodes, the package on
the step's stdin), brings each node's results home to `logs/<node>/<run>/`, and, when asked,
drains the nodes that failed and resumes the ones gpuprov drained that now pass.

- `settings` the inventory's `slurm:` key, checked before any host is contacted
- `hostlist` the `nodes:` hostlist, expanded by Slurm and checked against its nodes (validate
             and fabric)
- `nodes`    what Slurm says about its nodes (every JSON shape from 22.05 to 24.11), and which
             of them a run takes, skips or gives back
- `job`      the command each task runs, the salloc and srun lines (`launch_step`), and the
             labelled output split per node
- `gate`     drain reasons, drain and resume, the reservation that keeps users' jobs off the
             nodes while they are validated
- `cluster`  `SlurmCluster`, the `base.Cluster` the route drives
- `sweep`    `SweepCluster`, the one it drives for `validate --sweep`: idle nodes only, in
             batches, as preemptible jobs of `sweep_partition`, nodes validated within
             --max-age skipped
- `row`      the row of `SCHEDULERS` for `slurm:` (imported when an inventory has a `slurm:` host)
- `reboot`   `scontrol reboot` and the wait until Slurm says each node rebooted (`gpuprov
             remediate`, remote/remediation/slurm.py)
"""
from __future__ import annotations

# A Slurm run's record, logs/<cluster>/<run>/slurm.json (the name runs recorded before this row
# owned it were written with, kept so they stay readable)
CLUSTER_RECORD = "slurm.json"
