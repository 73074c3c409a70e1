"""`gpuprov validate --container IMAGE`: validation runs inside the image the jobs use.

- `image`: the image as given, checked before any host is contacted (one line, exit 2), and the
  container's own exit statuses with what each means (a named failure per host).
- `host`: on an SSH host, the command that runs validate/ in the image through podman or
  docker, whichever the host has (probed there), with the host's own open-files hard limit and
  the GPUs through CDI or `--gpus all`.
- `slurm`: on a Slurm cluster, the container support it has (probed on the login node): pyxis
  (`srun --container-image`) or Slurm's native OCI containers (`srun --container BUNDLE`).

What the image holds is recorded by validate/ itself (validate/incontainer.py owns the names of
the variables the container is given): results.json's `host.container`.

Imports only ground.errors and validate.incontainer: the engine's validate job and the
scheduler's Slurm job call it, it calls neither.
"""
from __future__ import annotations

from .image import Container, check_image

__all__ = ["Container", "check_image"]
