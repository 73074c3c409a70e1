"""On a Slurm cluster: the container support the cluster has, probed on its login node, and what
each validation step then gets.

- pyxis (NVIDIA's SPANK plugin over enroot) adds `--container-image` to srun: its options show
  in `srun --help` ("pyxis ... options are added to srun", https://github.com/NVIDIA/pyxis,
  README "Usage"). The image is `[USER@][REGISTRY#]IMAGE[:TAG]|PATH` (same README): a
  reference's registry is written before a '#'. Pyxis imports the image on the node itself.
- Slurm's native OCI containers (Slurm 21.08+; Debian 12's 22.05.8 here): `srun --container
  PATH`, PATH an OCI bundle that "must already exist on the requested path on the execution
  node", and the runtime set up in oci.conf, "located in the same directory as the slurm.conf"
  (https://slurm.schedmd.com/containers.html "Known limitations"; oci.conf(5)). "oci.conf must
  be configured on the execution node for the job, otherwise the requested container will be
  ignored by Slurm" (same page): the probe reads the login node's, as the nodes' own are not
  visible from it. Tried on Debian 12's Slurm 22.05.8 with runc 1.1.5 (tests/test_container_slurm.py):
  the whole task runs in the container, its stdin included, so the task script needs sh, tar,
  base64, mktemp and a writable TMPDIR (or /tmp) there, which a bundle's config.json gives
  with a tmpfs mount; a bundle that is not there fails the step ("container setup failed").

Pyxis is preferred for an image reference, native OCI for a path (a bundle); a cluster with
neither, or only the one that cannot run what was given, fails its login node's row with the
reason, before any job is started.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from validate import incontainer

from ..ground.errors import GpuprovError
from .host import SAY
from .image import NO_PYTHON, Container

MARK = "@@gpuprov-container"
PYXIS, OCI = "pyxis", "slurm-oci"
# The name the task script runs validate with: a shell function the task defines (`task`), which
# says so in one line when the image has no python3.
PYTHON = "gpuprov_python3"


class Unsupported(GpuprovError):
    """The cluster cannot run this image (no container support, or not the kind it needs)."""


def probe_script() -> str:
    """sh for the login node (SLURM_CONF already exported where the inventory gives `conf`):
    prints `MARK pyxis` and/or `MARK oci`."""
    return (f"srun --help 2>&1 | grep -q -- '--container-image' && echo '{MARK} {PYXIS}'\n"
            'C="${SLURM_CONF:-/etc/slurm/slurm.conf}"\n'
            f'[ -f "${{C%/*}}/oci.conf" ] && echo \'{MARK} {OCI}\'\n'
            "exit 0\n")


def found(output: str) -> set[str]:
    """The kinds `probe_script` found, from its output (the login node's: untrusted, only the
    marker lines count)."""
    kinds = set()
    for line in output.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == MARK and words[1] in (PYXIS, OCI):
            kinds.add(words[1])
    return kinds


def pyxis_image(image: str) -> str:
    """A reference as pyxis reads it: a registry (a first component with '.', ':' or
    `localhost`) written before '#' (pyxis README: `[REGISTRY#]IMAGE[:TAG]`)."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


@dataclass(frozen=True)
class SlurmContainer:
    """How each step runs in the image: srun's options, and the task script's prefix."""

    container: Container
    kind: str

    @property
    def srun_args(self) -> list[str]:
        if self.kind == OCI:
            return [f"--container={self.container.image}"]
        # --container-writable: the task unpacks the package into TMPDIR (pyxis README lists
        # it; whether a fresh container is writable by default is not said there)
        return [f"--container-image={pyxis_image(self.container.image)}", "--container-writable"]

    def task(self, script: str) -> str:
        """`script` (run with PYTHON as its python) with the variables results.json records
        and the function that runs python3 or says that the image has none."""
        image = shlex.quote(self.container.image)
        env = {incontainer.IMAGE_ENV: image, incontainer.RUNTIME_ENV: self.kind,
               incontainer.GPUS_ENV: "slurm"}
        exports = "".join(f"{name}={value}; export {name}\n" for name, value in env.items())
        # In the container of Slurm 22.05's native OCI support, the task's environment is
        # srun's: no SLURMD_NODENAME, SLURM_NODEID or SLURM_PROCID (measured on the test
        # cluster), so the task names no node and srun's label says which it is
        # (remote/scheduler/slurm/job.py task_script).
        return (exports
                + f"{PYTHON}() {{ command -v python3 >/dev/null 2>&1 || {{ "
                + f'echo "{SAY} image "{image}" has no python3"; return {NO_PYTHON}; }}; '
                + 'python3 "$@"; }\n' + script)


def choose(container: Container, kinds: set[str]) -> SlurmContainer:
    """The support to use for `container` among `kinds` (module docstring); `Unsupported`
    with the reason when none fits."""
    if container.is_path and OCI in kinds:
        return SlurmContainer(container, OCI)
    if PYXIS in kinds:
        return SlurmContainer(container, PYXIS)
    if OCI in kinds:
        raise Unsupported(f"the cluster runs only OCI bundles (oci.conf, srun --container): "
                          f"--container {container.image!r} must be the bundle's path on the nodes")
    raise Unsupported("the cluster has no container support gpuprov can use: no pyxis "
                      "(srun --help lists no --container-image) and no oci.conf beside slurm.conf")
