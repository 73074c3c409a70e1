"""`gpuprov validate --distributed`: after each node's own validation, one multi-node PyTorch
job across the nodes that passed (issue 44 item 1).

- `plan`: the settings (port, time limits, floor) from the inventory's vars, and the commands
  each node runs: the stack probe, torchrun, the cleanup;
- `parse`: what a node said (`@@` lines of validate/dist_job.py), read as untrusted;
- `verdict`: version skew across the nodes, who never joined or answered, the all-reduce sweep
  and the training step judged; the record written as `distributed.json` per node;
- `ssh`: the job over the engine's connections (SSH or local hosts);
- `slurm`: the same job as one `srun` step in a Slurm allocation (command and parsing);
- `job`: the validate job's wrapper that runs it after every node's own validation, and
  `SlurmAfter`, the Slurm route's: `slurm`'s steps in the validation's own allocation.

The host side is validate/dist_job.py; validate/dist_worker.py is the single-node nccl check's.
"""
