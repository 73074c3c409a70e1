"""Validating a cluster's nodes through its scheduler instead of over SSH, one node at a time.

A host with `slurm:` in the inventory (config/slurm.py) is the cluster's login node, reached
like any host. `validate` on it asks Slurm for the partition's nodes, runs the validation
package on all of them in one job (one allocation, one srun step per node started from the
login node, the package on each step's stdin), brings each node's results home to `logs/<node>/<run>/`, and,
when asked, drains the nodes that failed and resumes the ones gpuprov drained that now pass.

- `nodes`  what Slurm says about its nodes (every JSON shape from 22.05 to 24.11), and which
           of them a run takes, skips or gives back
- `job`    the command each task runs, the salloc and srun lines, and the labelled output
           split per node
- `gate`   drain reasons, drain and resume, the reservation that keeps users' jobs off the
           nodes while they are validated
- `slurm`  the route itself: `SlurmValidate`, a job for the engine's login-node session

May import: `remote.errors`, `remote.fileio`, `remote.runfolder`, `config`, `output`, `transport` (the line
splitter, storing a pulled tarball), and from the engine the session, results and the validate
job's helpers (the package, its arguments, the verdict). Never `cli`. Only `cli` imports this
package: it sits between the command line and the engine.
"""
