"""What the distributed job is and what each node runs: the settings from the inventory's vars,
the stack probe, the torchrun command, the cleanup.

torchrun's options (docs.pytorch.org/docs/stable/elastic/run.html, "Usage", and
docs.pytorch.org/docs/stable/elastic/quickstart.html; torchrun is `python -m
torch.distributed.run`, the same entry point, which a node's own python runs without the console
script on its PATH):

- `--nnodes=N`: exactly N nodes (no elasticity: a missing node is a failure, not a smaller job);
- `--nproc-per-node=G`: one process per GPU, or 1 on a CPU-only node;
- `--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT`: the C10d rendezvous, its TCP store hosted
  on the first node at HOST:PORT;
- `--rdzv-id=RUN`: the job's id (the run id: a stale agent of another run never joins);
- `--rdzv-conf=is_host=...,join_timeout=S,read_timeout=S`: the first node hosts the store and
  no other does (`is_host`, rather than torch's guess from the hostname), the rendezvous must
  complete within S seconds (`join_timeout`, default 600) and a store operation answer within S
  (`read_timeout`, default 60): torch/distributed/elastic/rendezvous/dynamic_rendezvous.py and
  c10d_rendezvous_backend.py ("Rendezvous" page, docs.pytorch.org/docs/stable/elastic/rendezvous.html);
- `--local-addr=ADDR`: the address the other nodes reach this node at (else torch looks up the
  node's FQDN, which names the wrong interface on many nodes: one of the first failures the
  issue lists; the first node's becomes MASTER_ADDR for the process group);
- `--max-restarts=0`: a failed worker fails the job; no restart hides it.
"""
from __future__ import annotations

import math
import secrets
import shlex
from dataclasses import dataclass
from typing import Any, Optional

from validate.checks.multigpu import BIG_BYTES, CPU_BYTES, GPU_BYTES

from ..engine.jobs.logs import remote_root
from ..engine.jobs.validate import choose_python
from ..ground.errors import InputError
from ..transport.connection import unpack_command

# The rendezvous port on the first node (chosen): torchrun's own default for c10d is 29400
# (quickstart: "If no port number is specified HOST_NODE_ADDR defaults to 29400"); gpuprov takes
# another so that a user's job on the default port and this check do not meet.
PORT = 29431
# The rendezvous must complete within this (chosen: torch's default join_timeout is 600 s,
# sized for a scheduler bringing nodes up; here every node is up and its torchrun started at
# once, and the awsome suite budgets 10-20 min for a whole multi-node NCCL run).
JOIN_TIMEOUT_S = 60.0
# Each collective must complete within this (init_process_group's `timeout`; chosen: the
# largest all-reduce of the sweep takes well under a second on a healthy node).
COLLECTIVE_TIMEOUT_S = 60.0
# Slack on top of the rendezvous and the collectives for starting python and torch on a node
# (chosen; `import torch` takes ~2 s here).
START_SLACK_S = 30.0
STACK_TIMEOUT_S = 120.0  # the stack probe: unpack validate/ and import torch (chosen)
CLEANUP_TIMEOUT_S = 30.0
KILL_AFTER_S = 5  # `timeout -k`: SIGKILL this long after the SIGTERM (coreutils timeout(1))
# The exit statuses of `timeout` when the limit passed: 124 after its SIGTERM, 128+9 when it
# had to SIGKILL (coreutils timeout(1), "EXIT STATUS").
TIMED_OUT = (124, 137)
PACKAGE_MISSING = 90  # the launch script's status when the unpacked package is gone


@dataclass(frozen=True)
class Settings:
    """One distributed job's settings (inventory vars, the first node's layer, checked before
    any host is contacted)."""

    port: int = PORT
    join_timeout: float = JOIN_TIMEOUT_S
    collective_timeout: float = COLLECTIVE_TIMEOUT_S
    floor_gbs: Optional[float] = None  # `distributed_busbw_floor`: the job's busbw floor, GB/s

    @property
    def limit_s(self) -> float:
        """How long a node's torchrun may run in all: the rendezvous, the collectives (the
        sweep, the check and the step each get their own time limit from torch; two of them
        in a row at most before a hang is seen), and the start."""
        return self.join_timeout + 2 * self.collective_timeout + START_SLACK_S


def _number(vars_: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    given = value = vars_.get(name, default)
    if isinstance(value, str):  # `--var name=N` gives text
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise InputError(f"{name}: {given!r} is not a number from {low:g} to {high:g}")
    return float(value)


def read_settings(vars_: dict[str, Any]) -> Settings:
    """The settings from a node's vars; `InputError` naming the var that is wrong."""
    port = _number(vars_, "distributed_port", PORT, 1, 65535)
    if port != int(port):
        raise InputError(f"distributed_port: {port!r} is not a whole port number")
    floor = vars_.get("distributed_busbw_floor")
    return Settings(int(port), _number(vars_, "distributed_timeout", JOIN_TIMEOUT_S, 1, 3600),
                    _number(vars_, "distributed_collective_timeout", COLLECTIVE_TIMEOUT_S, 1, 3600),
                    None if floor in (None, "") else
                    _number(vars_, "distributed_busbw_floor", 0, 0, 1e6))


def new_token() -> str:
    """A token of the job, on every process it starts (`--run-token`): the cleanup finds them
    by it, and by nothing broader."""
    return secrets.token_hex(8)


def package_dir(host_name: str, run_id: str) -> str:
    """Where the job unpacks validate/ on a node (a shell word), until the cleanup."""
    return f"{remote_root(host_name)}/dist-{shlex.quote(run_id)}"


def max_bytes(gpus: int, table_bytes: Optional[int]) -> int:
    """The sweep's largest all-reduce: on the CPU the nccl check's gloo size; on GPUs the
    table's size for the floor where one applies (NCCL reaches its peak only at several GiB:
    nccl-tests#212), else the nccl check's (validate/checks/multigpu.py)."""
    if gpus <= 0:
        return CPU_BYTES
    if table_bytes:
        return int(table_bytes)
    return BIG_BYTES if gpus >= 8 else GPU_BYTES


def stack_script(host_name: str, python: str, run_id: str) -> str:
    """Unpack validate/ (on stdin) where the job will run it, and print the node's stack."""
    pkg = package_dir(host_name, run_id)
    return (f"mkdir -p {remote_root(host_name)} && {unpack_command(pkg)} || exit {PACKAGE_MISSING}\n"
            f"{choose_python(host_name, python)}"
            f'cd {pkg} && PYTHONDONTWRITEBYTECODE=1 "$PY" -m validate.dist_job --stack')


@dataclass(frozen=True)
class Launch:
    """One node's place in the job."""

    host_name: str
    python: str
    run_id: str
    nnodes: int
    nproc: int
    node_rank: int
    endpoint: str  # HOST:PORT of the rendezvous
    local_addr: str  # the address the other nodes reach this one at
    backend: str
    max_bytes: int
    token: str


def torchrun_words(nnodes: str, nproc: str, endpoint: str, rdzv_id: str, is_host: str,
                   local_addr: str, host_name: str, token: str, backend: str, nbytes: int,
                   settings: Settings) -> list[str]:
    """torchrun's options (module docstring), then the worker's, as shell words: each value
    given is already one (quoted, or a variable the script sets: the Slurm step's)."""
    join = f"{settings.join_timeout:g}"
    return ["-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}",
            f"--rdzv-conf=is_host={is_host},join_timeout={join},read_timeout={join}",
            f"--local-addr={local_addr}", "--max-restarts=0", "-m", "validate.dist_job",
            "--host-name", host_name, "--run-token", token, "--backend", backend,
            "--max-bytes", str(nbytes), "--collective-timeout", f"{settings.collective_timeout:g}"]


def torchrun_args(launch: Launch, settings: Settings) -> list[str]:
    """`torchrun_words` for one node of an SSH run, as shell words; the token as `"$a$b"`
    (the halves the script sets: its text never holds the token whole)."""
    q = shlex.quote
    return torchrun_words(str(launch.nnodes), str(launch.nproc), q(launch.endpoint),
                          q(f"gpuprov-{launch.run_id}"),
                          "true" if launch.node_rank == 0 else "false", q(launch.local_addr),
                          q(launch.host_name), '"$a$b"', launch.backend, launch.max_bytes,
                          settings)


def launch_script(launch: Launch, settings: Settings) -> str:
    """Run torchrun on the node from the unpacked package, bounded by `timeout` (its SIGTERM,
    then SIGKILL `KILL_AFTER_S` later: coreutils timeout(1)), then stop what outlived it:
    torch's workers start in sessions of their own, out of `timeout`'s process group
    (torch/distributed/elastic/multiprocessing/subprocess_handler), and one still holding the
    command's output would keep it from ending.

    The collectives' traffic leaves by the interface that holds the node's address: gloo and
    NCCL take theirs from GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (docs.pytorch.org/docs/
    stable/distributed.html, "Choosing the network interface to use"), else from what the
    node's hostname resolves to, which is often loopback or another network."""
    pkg = package_dir(launch.host_name, launch.run_id)
    argv = " ".join(torchrun_args(launch, settings))
    return (f"cd {pkg} 2>/dev/null || exit {PACKAGE_MISSING}\n{halves(launch.token)}"
            f"{choose_python(launch.host_name, launch.python)}"
            f"IF=$(ip -o addr show 2>/dev/null | awk -v a={shlex.quote(launch.local_addr)} "
            "'{split($4, p, \"/\"); if (p[1] == a) {print $2; exit}}')\n"
            'if [ -n "$IF" ]; then export GLOO_SOCKET_IFNAME="$IF" NCCL_SOCKET_IFNAME="$IF"; '
            'echo "@@ifname $IF"; fi\n'
            f"PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 timeout -k {KILL_AFTER_S} "
            f'{settings.limit_s:g} "$PY" {argv}\n'
            f"rc=$?\n{kill_token(shlex.quote(launch.host_name), launch.token)}exit $rc")


def halves(token: str) -> str:
    """Shell lines that set $a and $b, the token's two halves."""
    half = len(token) // 2
    return f"a={shlex.quote(token[:half])}; b={shlex.quote(token[half:])}\n"


def kill_token(host_word: str, token: str) -> str:
    """Shell lines that stop, by PID, every process of the node whose command line holds the
    job's token after this node's name (`host_word`, a shell word) (torchrun, its workers and `timeout` all carry
    `--host-name NODE --run-token TOKEN`; nodes that share one PID namespace, as the test's
    do, stop only their own), and say how many (`@@left N`). The token is split in the script
    so that the script's own shell (and its subshells) never match."""
    return (f"{halves(token)}n=0; h={host_word}\n"
            'pat="--host-name $h --run-token $a$b"\n'
            "for d in /proc/[0-9]*; do\n"
            '  p=${d#/proc/}; [ "$p" = "$$" ] && continue\n'
            '  c=$(tr "\\0" " " 2>/dev/null < "$d/cmdline") || continue\n'
            '  case "$c" in *"$pat"*) kill -9 "$p" 2>/dev/null && n=$((n+1));; esac\n'
            "done\n"
            'echo "@@left $n"\n')


def cleanup_script(host_name: str, run_id: str, token: str) -> str:
    """Stop every process of the job still on the node (`kill_token`: by PID, found by the
    job's token and nothing broader), say how many there were, remove the package."""
    return f"{kill_token(shlex.quote(host_name), token)}rm -rf {package_dir(host_name, run_id)}"
