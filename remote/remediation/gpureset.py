"""Resetting a node's GPUs: a fact (who holds a GPU), its parser, and the commands, as data
(arguments + facts -> commands, pyinfra's habit): ssh.py runs them on the host.

NVIDIA's conditions for `nvidia-smi -r` / `--gpu-reset` (nvidia-smi(1), "-r, --gpu-reset":
manpages.ubuntu.com/manpages/focal/en/man1/nvidia-smi.1.html, and docs.nvidia.com/deploy/
nvidia-smi/index.html): it needs root, and no application may be using the GPU (a CUDA
program, an X server, a monitoring tool holding it) or the reset is refused. On NVSwitch
systems (HGX A100/H100 8-GPU boards) the GPUs and NVSwitches of the board reset together: "all
the GPUs and NVSwitches must be reset together" (docs.nvidia.com/datacenter/tesla/
fabric-manager-user-guide, "GPU Reset"), so a node is reset whole (`nvidia-smi -r`, no `-i`),
and `-i` per GPU is only for a board without NVSwitches.

Here a reset is refused (`escalate`: the ladder's next step, a reboot) as soon as any process
holds any GPU of the node: the fact `nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid
--format=csv,noheader` (nvidia-smi(1), "--query-compute-apps": the compute processes with an
active context), one line per process and GPU, nothing when none.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from ..output.term import printable_line

COMPUTE_APPS = "nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid --format=csv,noheader"
NO_SMI = 127  # the shell's "command not found" (POSIX sh, 2.8.2 Exit Status for Commands)
RESET_TIMEOUT_S = 120.0  # ladder.py's row names it; chosen
PROCESSES_NAMED = 3  # processes named in a refusal's line; the rest counted (chosen)


@dataclass(frozen=True)
class GpuProcess:
    pid: str
    name: str
    gpu_uuid: str


class FactError(ValueError):
    """nvidia-smi's answer is not the table asked for (one line, the host's text made safe)."""


def parse_compute_apps(text: str) -> list[GpuProcess]:
    """The processes in `COMPUTE_APPS`' answer (untrusted: a line that is not `pid, name,
    uuid` is a FactError, never guessed at). "No running processes found" (older drivers
    print it for an idle GPU even with --format=csv) is none."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.lower().startswith("no running"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            raise FactError(f"not a compute process line: {printable_line(line)[:120]}")
        # a process name may hold commas: the uuid is the last field
        out.append(GpuProcess(parts[0], ", ".join(parts[1:-1]), parts[-1]))
    return out


def refusal(processes: list[GpuProcess]) -> Optional[str]:
    """Why a reset is refused (None: every GPU is idle)."""
    if not processes:
        return None
    shown = "; ".join(f"pid {p.pid} {p.name} on {p.gpu_uuid}" for p in processes[:PROCESSES_NAMED])
    more = len(processes) - PROCESSES_NAMED
    text = f"{len(processes)} process(es) hold a GPU: {shown}" + (f"; {more} more" if more > 0 else "")
    return printable_line(text)


def reset_commands(gpus: Optional[list[str]] = None) -> list[str]:
    """The reset: every GPU at once (None: the node's board, NVSwitch systems' only way), else
    one `-i` per GPU (an index or a UUID)."""
    if gpus is None:
        return ["nvidia-smi -r"]
    return [f"nvidia-smi -r -i {shlex.quote(g)}" for g in gpus]


def plan_reset(compute_apps: str, gpus: Optional[list[str]] = None) -> tuple[list[str], str]:
    """Facts -> commands: (the reset's commands, "" ) when idle, else ([], why refused)."""
    try:
        why = refusal(parse_compute_apps(compute_apps))
    except FactError as exc:
        return [], str(exc)
    if why is not None:
        return [], why
    return reset_commands(gpus), ""
