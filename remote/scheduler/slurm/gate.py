"""Gating nodes: the drain reason gpuprov writes, and the scontrol commands that drain, resume,
and hold nodes in a reservation while they are validated.

A reason reads `gpuprov <run>: <check>: <finding and action>`, e.g.
`gpuprov 20261125T093000.123Z-ab12: system: nvidia-smi not found (no NVIDIA driver installed?)`.
That shape is how a later run knows the drain as its own (nodes.GPUPROV_REASON); a node
drained with any other reason is never touched, one whose reason merely starts "gpuprov" included.

Taking a drained node back without letting users' jobs onto it first: Slurm starts no job on a
drained node, not even root's (srun: "Required node not available (down, drained or
reserved)"), so the nodes go into a reservation for the run's user first ("When cores or nodes
are reserved, then jobs using that reservation can use only those resources ... and no other
jobs can use those resources", slurm.schedmd.com/reservations.html), are resumed, validated in
the reservation, and the reservation is deleted only after every node that did not pass was
drained again. Creating reservations, draining and resuming need root or SlurmUser (same page;
slurm.md gotcha 11): with `become: true` on the login node they run through sudo.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from validate.shared import DRAIN_PREFIX, HEALTH_PREFIX
from validate.shared import DRAIN_REASON_MAX as REASON_MAX

from ...ground.resultsfile import first_failure
from ...output.term import printable_line

# REASON_MAX: the reason's cut, the same as `validate --health --slurm-drain`'s (validate/shared.py
# owns it, with why).
RESULTS_MAX_BYTES = 16 << 20  # as the engine's summarize: a larger results.json is not read


def drain_reason(run_id: str, results_path: Optional[Path], fallback: str) -> str:
    """`gpuprov <run>: <check>: <finding and action>` from the node's results.json (its first
    failing required check), else `gpuprov <run>: <fallback>`; one printable line, cut."""
    check = _first_failure(results_path) if results_path is not None else None
    if check is not None:
        name, finding = check
        text = f"{DRAIN_PREFIX}{run_id}: {name}: {finding}"
    else:
        text = f"{DRAIN_PREFIX}{run_id}: {fallback}"
    text = " ".join(printable_line(text).split())
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3] + "..."


def _first_failure(path: Path) -> Optional[tuple[str, str]]:
    import json

    try:
        if path.stat().st_size > RESULTS_MAX_BYTES:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return first_failure(data.get("checks")) if isinstance(data, dict) else None


def each_node_command(commands: dict[str, str]) -> str:
    """One script running a command per node, each answered by a line `@@rc NODE RC` after its
    output, so one round trip does them all and each node's outcome is known."""
    lines = []
    for node, command in commands.items():
        lines.append(f"{command} 2>&1; echo \"@@rc {node} $?\"")
    return "\n".join(lines) + "\n"


def parse_each_node(out: str) -> dict[str, tuple[int, str]]:
    """Node -> (rc, what its command printed) from `each_node_command`'s output."""
    result: dict[str, tuple[int, str]] = {}
    said: list[str] = []
    for line in out.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "@@rc" and words[2].isascii() and words[2].isdigit():
            result[words[1]] = (int(words[2]), " ".join(said).strip())
            said = []
        else:
            said.append(line)
    return result


# nodes.GPUPROV_REASON as a `case` pattern: the health check's reasons, and a run's (a run id
# starts with its 8-digit date and a T).
_OURS_GLOB = f"{shlex.quote(HEALTH_PREFIX)}*|{shlex.quote(DRAIN_PREFIX)}" + "[0-9]" * 8 + "T*"


# The reason slurmctld itself gives a node it set DOWN for missing its pings
# (src/slurmctld/ping_nodes.c: set_node_down_ptr(node_ptr, "Not responding")); scontrol shows
# it followed by " [user@time]". No one's note: with ReturnToService=1 or 2 such a node comes
# back to service by itself once its slurmd answers (slurm.conf(5)), so a node that failed
# validation meanwhile must be drained over it, or it would take jobs again.
_SLURMS_OWN_GLOB = "'Not responding'|'Not responding ['*"


def drain_command(node: str, reason: str) -> str:
    """Drain `node` with `reason`, unless someone else drained it meanwhile (an admin during
    the run): a reason that is not gpuprov's is never overwritten, as LBNL NHC does not
    "overwrite notes which were not placed by NHC" (github.com/mej/nhc,
    helpers/node-mark-offline). Else a later --resume-passed would take the admin's node for
    gpuprov's. Such a node is left alone: the command says so and fails. Slurm's own "Not
    responding" is no one's note and is drained over."""
    node_q = shlex.quote(node)
    return (f"held=$(scontrol show node {node_q} | sed -n 's/^ *Reason=//p'); "
            f"case \"$held\" in ''|{_OURS_GLOB}|{_SLURMS_OWN_GLOB}) "
            f"scontrol update nodename={node_q} state=drain reason={shlex.quote(reason)};; "
            f"*) echo \"left alone, drained by someone else meanwhile: $held\"; false;; esac")


def resume_command(nodes: list[str]) -> str:
    return f"scontrol update nodename={shlex.quote(','.join(nodes))} state=resume"


def run_name(run_id: str) -> str:
    """The run's name in Slurm (its job and its reservation): letters, digits, '-', '_'."""
    return "gpuprov-" + "".join(c if c.isalnum() else "_" for c in run_id)


def cancel_command(job_name: str, user: str) -> str:
    """Cancel the run's job: srun killed before it could (a cancelled run's command is
    stopped hard) leaves its allocation behind, and the reservation cannot go while it runs."""
    return f"scancel --name={shlex.quote(job_name)} --user={shlex.quote(user)}"


def reserve_command(name: str, user: str, nodes: list[str], minutes: int) -> str:
    """Hold `nodes` for `user`'s jobs only, from now, `minutes` long: IGNORE_JOBS lets nodes
    still running jobs be reserved (gpuprov's own job waits for them), so the reservation ends
    by itself should gpuprov die before deleting it."""
    return (f"scontrol create reservation reservationname={shlex.quote(name)} "
            f"users={shlex.quote(user)} nodes={shlex.quote(','.join(nodes))} starttime=now "
            f"duration={minutes} flags=ignore_jobs")


def unreserve_command(name: str) -> str:
    return f"scontrol delete reservationname={shlex.quote(name)}"
