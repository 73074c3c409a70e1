"""On an SSH host: the shell lines that run the unpacked validate/ package inside the image,
through podman or docker, whichever the host has (podman first: it runs rootless).

The lines run in validate's command (remote/engine/jobs/validate.py) after the package was
unpacked into its folder and `$PY` was set to the host's python; they:
1. find the runtime (RUNTIMES, in order; docker only when its daemon answers);
2. check the image is there and read its digest and id (never pull: `--pull=never`);
3. read the host's own hard limit on open files and give the container that limit, soft and
   hard: where podman's default is above the host's hard limit, runc fails with "error setting
   rlimit type 7" (RLIMIT_NOFILE is resource 7 on Linux, asm-generic/resource.h);
4. give it the GPUs when the host has some (`nvidia-smi -L` lists one): podman through CDI
   (`--device nvidia.com/gpu=all` once a spec exists: "sudo nvidia-ctk cdi generate
   --output=/etc/cdi/nvidia.yaml", https://docs.nvidia.com/datacenter/cloud-native/
   container-toolkit/latest/cdi-support.html), docker with `--gpus all` (docker-run(1)
   "--gpus"); a host with GPUs and no CDI spec says so and runs without them;
5. print the host's own stack from outside (`python -m validate.incontainer` with `$PY`);
6. run `python3 -m validate` in the image on the host's network, the package read-only at
   PKG_MOUNT and the output folder at OUT_MOUNT, as the host's user (rootless podman maps its
   root to that user; docker is given `--user`), with the variables validate/incontainer.py
   names, so that results.json records the image and how it ran.

Exit statuses of the container itself: image.NO_RUNTIME, NO_IMAGE, NO_PYTHON, NOT_STARTED;
podman-run(1) and docker-run(1) "EXIT STATUS": 125 the runtime's own error, 126 the command
cannot be invoked, 127 it cannot be found (then NOT_STARTED); anything else is validate's.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from validate import incontainer

from .image import NO_IMAGE, NO_PYTHON, NO_RUNTIME, NOT_STARTED, Container

PKG_MOUNT = "/gpuprov/pkg"   # where the package is seen inside the container (chosen)
OUT_MOUNT = "/gpuprov/out"   # where its output folder is (chosen)
HOST_STACK_MAX = 2000        # bytes of the host-stack line passed on (chosen; a line is ~80)
SAY = "gpuprov-container:"   # the first word of the lines these commands print


@dataclass(frozen=True)
class Runtime:
    """One container runtime a host may have: how to know it is usable, whether an image is
    there, its digest and id, and what its `run` needs beyond the common options."""

    name: str
    usable: str       # sh: exits 0 when this runtime can run containers here
    exists: str       # sh with {image}: exits 0 when the image is there
    digest: str       # sh with {image}: prints the digest ("" when none)
    ident: str        # sh with {image}: prints the image id
    gpus_cdi: bool    # GPUs through CDI (else `--gpus all`)
    run_extra: str    # more `run` options


RUNTIMES = (
    # podman-image-exists(1): "exits 0 if the image is found, 1 if not"; podman-image-inspect(1)
    # --format Go templates over .Digest and .Id; podman 4.1+ takes CDI names in --device
    # (podman-run(1) "--device": "a Container Device Interface (CDI) qualified device name").
    Runtime("podman", "command -v podman >/dev/null 2>&1",
            "podman image exists {image}",
            "podman image inspect --format '{{{{.Digest}}}}' {image}",
            "podman image inspect --format '{{{{.Id}}}}' {image}", True, ""),
    # docker-image-inspect(1): exit 1 when not found; .RepoDigests is empty for an image built
    # or loaded locally (then the id alone names it). `docker info` fails without a daemon.
    Runtime("docker", "command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1",
            "docker image inspect {image}",
            "docker image inspect --format '{{{{range .RepoDigests}}}}{{{{.}}}} {{{{end}}}}' {image}"
            " 2>/dev/null | sed 's/^[^@]*@//; s/ .*//'",
            "docker image inspect --format '{{{{.Id}}}}' {image}", False,
            '--user "$(id -u):$(id -g)" -e HOME=/tmp'),
)


def _probe(image: str) -> str:
    """sh: set CR to the first usable runtime; then D (digest), I (id), else exit."""
    q = shlex.quote(image)
    lines = ["CR="]
    for rt in RUNTIMES:
        lines.append(f'[ -z "$CR" ] && {{ {rt.usable}; }} && CR={rt.name}')
    lines.append(f'[ -n "$CR" ] || {{ echo "{SAY} no podman or docker on this host" >&2; '
                 f'exit {NO_RUNTIME}; }}')
    lines.append('case "$CR" in')
    for rt in RUNTIMES:
        lines.append(f"{rt.name}) {rt.exists.format(image=q)} >/dev/null 2>&1 || "
                     f'{{ echo "{SAY} image "{q}" is not on this host ({rt.name})" >&2; '
                     f"exit {NO_IMAGE}; }}\n"
                     f"  D=$({rt.digest.format(image=q)} 2>/dev/null); "
                     f"I=$({rt.ident.format(image=q)} 2>/dev/null) ;;")
    lines.append("esac")
    return "\n".join(lines) + "\n"


def _limits_and_gpus() -> str:
    """sh: UL (the --ulimit option, from the host's hard limit), G (how GPUs go in) and GF
    (their option)."""
    cdi = ("{ nvidia-ctk cdi list 2>/dev/null | grep -q 'nvidia.com/gpu=all' || "
           "grep -qs 'nvidia.com/gpu' /etc/cdi/* /var/run/cdi/*; }")
    gpu_cases = []
    for rt in RUNTIMES:
        if rt.gpus_cdi:
            gpu_cases.append(
                f"{rt.name}) if {cdi}; then G=cdi; GF='--device nvidia.com/gpu=all'; else "
                f'echo "{SAY} GPUs here but no CDI spec for nvidia.com/gpu=all (nvidia-ctk cdi '
                f'generate --output=/etc/cdi/nvidia.yaml): the container runs without them" >&2; '
                "fi ;;")
        else:
            gpu_cases.append(f"{rt.name}) G=gpus-all; GF='--gpus all' ;;")
    return ('H=$(ulimit -Hn); case "$H" in ""|*[!0-9]*) UL= ;; *) UL="--ulimit nofile=$H:$H" ;; esac\n'
            "G=none; GF=\n"
            'if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then\n'
            f'  case "$CR" in {" ".join(gpu_cases)} esac\n'
            "fi\n")


def _run_extra() -> str:
    """sh: the positional parameters set to the runtime's own `run` options."""
    cases = " ".join(f"{rt.name}) set -- {rt.run_extra} ;;" for rt in RUNTIMES)
    return f'case "$CR" in {cases} esac\n'


def host_command(container: Container, pkg: str, out: str, args: list[str]) -> str:
    """The lines that run validate/ (unpacked in `pkg`, a shell word) in the image, writing its
    output folder `out` (a shell word): one subshell, whose exit status is validate's, or one
    of the container's own (module docstring), so that the caller's cleanup after it runs."""
    q = shlex.quote(container.image)
    quoted = " ".join(shlex.quote(a) for a in args)
    inner = (f'command -v python3 >/dev/null 2>&1 || {{ echo "{SAY} image "{q}" has no python3" '
             f'>&2; exit {NO_PYTHON}; }}; exec python3 -m validate --out {OUT_MOUNT} "$@"')
    env = {incontainer.IMAGE_ENV: q, incontainer.DIGEST_ENV: '"$D"', incontainer.ID_ENV: '"$I"',
           incontainer.RUNTIME_ENV: '"$CR"', incontainer.GPUS_ENV: '"$G"',
           incontainer.HOST_STACK_ENV: '"$HS"'}
    env_args = " ".join(f"-e {name}={value}" for name, value in env.items())
    return ("(\n" + _probe(container.image) + _limits_and_gpus() + _run_extra()
            + f'HS=$(cd {pkg} && "$PY" -m validate.incontainer 2>/dev/null | head -c {HOST_STACK_MAX})\n'
            + f'echo "validate: in container {q} ($CR, digest ${{D:-none}}, GPUs $G, host python $PY)"\n'
            + f"mkdir -p {out} && cd / || exit {NOT_STARTED}\n"
            + f'"$CR" run --rm --pull=never --network=host $UL $GF "$@" {env_args} '
            + f"-e PYTHONUNBUFFERED=1 -v {pkg}:{PKG_MOUNT}:ro -v {out}:{OUT_MOUNT} "
            + f"-w {PKG_MOUNT} {q} /bin/sh -c {shlex.quote(inner)} sh {quoted}\n"
            + "rc=$?; case $rc in 125|126|127) "
            + f'echo "{SAY} $CR run failed (exit $rc)" >&2; rc={NOT_STARTED} ;; esac\n'
            + "exit $rc\n)\n")
