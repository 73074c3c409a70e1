"""A host's `slurm:` key: the host is a cluster's login node, and `validate` on it validates the
nodes of a Slurm partition through the scheduler (remote/scheduler/).

    slurm:
      partition: gpu            # required
      nodes: gpu[01-16]         # a Slurm hostlist; default: every node of the partition
      account: ops              # salloc --account
      qos: maintenance          # salloc --qos
      time: "00:30:00"          # salloc --time (Slurm's time formats; a number is minutes)
      gpus_per_node: 8          # salloc and each srun step: --gpus-per-node ([type:]count)
      extra_args: [--constraint=h100]   # more salloc options, each one argument
      conf: /etc/slurm/slurm.conf       # exported as SLURM_CONF for every Slurm command
      fanout: 32                # no longer used: every node is a task of one step
      sweep_partition: sweep    # validate --sweep: the low-tier, preemptible partition its jobs go to
      sweep_batch: 16           # validate --sweep: nodes per job (default 16)

Values only reach salloc, srun and scontrol as single quoted arguments; their shapes are checked here
so that a typo is one `file:line` error before any host is contacted.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ...config.schema import check_keys, expect
from ...config.yamlfile import YamlMap
from ...ground.errors import Where

# The keys of a host's `slurm:` mapping and what each means (docs/gen_reference.py writes them
# into docs/reference/inventory-keys.md).
SLURM_KEYS = {
    "partition": "the partition whose nodes are validated (required)",
    "nodes": "a Slurm hostlist of its nodes (default: every node of the partition)",
    "account": "salloc --account",
    "qos": "salloc --qos",
    "time": "salloc --time (`[days-]hours:minutes:seconds`)",
    "gpus_per_node": "--gpus-per-node (`[type:]count`), for salloc and each step",
    "extra_args": "more salloc options, one argument each",
    "conf": "exported as SLURM_CONF for every Slurm command",
    "fanout": "no longer used (one srun step runs every node); read so older inventories still load",
    "sweep_partition": "`validate --sweep`: the partition its jobs go to, over the same nodes, "
                       "preemptible (the lowest PriorityTier, PreemptMode CANCEL or REQUEUE)",
    "sweep_batch": "`validate --sweep`: nodes per job (default 16)",
}
# `fanout` was the window of srun steps (one per node) started at once from the login node;
# since the nodes are the tasks of one step (job.launch_step) there is one srun client whatever
# the node count, and the key is only read and checked, so that inventories written for the
# window still load.
DEFAULT_FANOUT = 32
MAX_FANOUT = 4096
# validate --sweep: nodes per job. Chosen: a job preempted for one of its nodes is cancelled
# whole (slurm.conf(5), PreemptMode CANCEL: "The preempted job will be cancelled"), so a batch
# is what one preemption costs; 16 keeps that small and a sweep of 1,000 nodes at 63 jobs.
DEFAULT_SWEEP_BATCH = 16
# Slurm names (partitions, accounts, QOS): no spaces, commas or shell characters. Slurm's own
# rules are looser in places; these cover every name in its documentation's examples.
SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
# A hostlist as `scontrol show hostnames` reads it: names, ranges in brackets, commas.
HOSTLIST = re.compile(r"[A-Za-z0-9_.\-\[\],]+")
# srun(1) --time, "Acceptable time formats include "minutes", "minutes:seconds",
# "hours:minutes:seconds", "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds""
# (doc/man/man1/srun.1 in SchedMD/slurm); plus UNLIMITED/INFINITE, which Slurm also reads.
TIME = re.compile(r"(\d+|\d+:\d+|\d+:\d+:\d+|\d+-\d+|\d+-\d+:\d+|\d+-\d+:\d+:\d+|UNLIMITED|"
                  r"unlimited|INFINITE|infinite)")
# srun(1) --gpus-per-node=[type:]number
GPUS = re.compile(r"([A-Za-z0-9_.-]+:)?[1-9][0-9]*")
# Options gpuprov sets itself: given again in extra_args they would change what a run means
# (one task per node, every GPU of the node, no other job beside it, output labelled per node,
# the script run in the allocation, the job's name that scancel finds it by).
OWN_OPTIONS = ("--no-shell", "--job-name", "-J", "--nodes", "-N", "--ntasks", "-n",
               "--ntasks-per-node", "--nodelist", "-w", "--exclusive", "--label", "-l",
               "--input", "-i", "--output", "-o", "--error", "-e", "--partition", "-p",
               "--reservation", "--no-kill", "-k", "--kill-on-bad-exit", "-K")


@dataclass(frozen=True)
class SlurmSettings:
    """What `slurm:` says; `where` is the key's position, `at` each given key's."""

    partition: str
    where: Where
    at: dict[str, Where]
    nodes: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time: Optional[str] = None
    gpus_per_node: Optional[str] = None
    extra_args: tuple[str, ...] = ()
    conf: Optional[str] = None
    fanout: int = DEFAULT_FANOUT
    sweep_partition: Optional[str] = None
    sweep_batch: int = DEFAULT_SWEEP_BATCH
    host: str = ""  # the login node's name in the inventory, for messages

    def position(self, key: str) -> Where:
        return self.at.get(key, self.where)


def _slurm_name(value: Any, where: Where, what: str) -> str:
    """partition, account, qos: a Slurm name."""
    value = expect(value, str, where, what)
    if not SLURM_NAME.fullmatch(value):
        raise where.error(f"{what} {value!r} is not a Slurm name (letters, digits, '_', '.', "
                          "'+', '-')")
    return str(value)


def _nodes(value: Any, where: Where, what: str) -> str:
    nodes = expect(value, str, where, what)
    if not HOSTLIST.fullmatch(nodes) or nodes.count("[") != nodes.count("]"):
        raise where.error(f"{what} {nodes!r} is not a Slurm hostlist (like gpu[01-16],gpu20)")
    return str(nodes)


def _time(value: Any, where: Where, what: str) -> str:
    return _shaped(value, TIME, where, f"{what} must be a Slurm time limit such as 30, "
                   "\"01:00:00\" or \"1-00:00:00\"")


def _gpus(value: Any, where: Where, what: str) -> str:
    return _shaped(value, GPUS, where, f"{what} must be a count of 1 or more, or TYPE:COUNT "
                   "(like h100:8)")


def _fanout(value: Any, where: Where, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FANOUT:
        raise where.error(f"{what} must be a whole number from 1 to {MAX_FANOUT} (srun steps "
                          f"at once), not {value!r}")
    return value


def _sweep_batch(value: Any, where: Where, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FANOUT:
        raise where.error(f"{what} must be a whole number from 1 to {MAX_FANOUT} (nodes per "
                          f"sweep job), not {value!r}")
    return value


def _conf(value: Any, where: Where, what: str) -> str:
    conf = expect(value, str, where, what)
    if not conf.startswith("/") or "\n" in conf or "\0" in conf:
        raise where.error(f"{what} must be an absolute path on the login node, not {conf!r}")
    return str(conf)


# The reader of each key of `slurm:` but `partition`'s presence, in the order they are checked
# (the first flaw is the one named): value, where it is, `host 'H': slurm.KEY` -> the setting
KEY_READERS: tuple[tuple[str, Callable[[Any, Where, str], Any]], ...] = (
    ("partition", _slurm_name), ("account", _slurm_name), ("qos", _slurm_name),
    ("nodes", _nodes), ("time", _time), ("gpus_per_node", _gpus),
    ("extra_args", lambda value, where, what: _extra_args(value, where, what[:-len(".extra_args")])),
    ("fanout", _fanout), ("conf", _conf),
    ("sweep_partition", _slurm_name),
    ("sweep_batch", lambda value, where, what: _sweep_batch(value, where, what)),
)


def load_slurm(spec: Any, where: Where, host: str) -> SlurmSettings:
    """Check a host's `slurm:` mapping; raise `InputError` (file:line) at the first flaw."""
    what = f"host '{host}': slurm"
    expect(spec, dict, where, what)
    check_keys(spec, SLURM_KEYS, what)
    at: dict[str, Where] = dict(spec.key_where) if isinstance(spec, YamlMap) else {}
    partition = spec.get("partition")
    if partition is None or partition == "":
        raise where.error(f"{what} needs 'partition' (the Slurm partition whose nodes to validate)")
    values = {key: read(spec[key], at.get(key, where), f"{what}.{key}")
              for key, read in KEY_READERS if key in spec}
    return SlurmSettings(where=where, at=at, host=host, **values)


def _shaped(value: Any, shape: re.Pattern[str], where: Where, must: str) -> str:
    """`value` as a string of `shape`; a whole number is written out (`time: 30` is minutes,
    as for srun --time)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not shape.fullmatch(value):
        raise where.error(f"{must}, not {value!r}")
    return value


def _extra_args(value: Any, where: Where, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            args = shlex.split(value)
        except ValueError as exc:
            raise where.error(f"{what}.extra_args: {exc}") from None
    elif isinstance(value, list) and all(isinstance(a, str) for a in value):
        args = list(value)
    else:
        raise where.error(f"{what}.extra_args must be a string or a list of strings")
    for arg in args:
        if not arg.startswith("-") or "\n" in arg or "\0" in arg:
            raise where.error(f"{what}.extra_args: {arg!r} is not a salloc option (write "
                              "--name=value as one item)")
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]  # -N3 is -N 3
        if name in OWN_OPTIONS:
            raise where.error(f"{what}.extra_args: {name} is set by gpuprov (one task per "
                              "node, labelled output, the partition and nodes of slurm:)")
    return tuple(args)


def check_sweep(settings: SlurmSettings) -> None:
    """`validate --sweep` needs `sweep_partition`: `InputError` at the `slurm:` key without it."""
    if not settings.sweep_partition:
        raise settings.where.error(
            f"host '{settings.host}': validate --sweep needs slurm.sweep_partition, a partition "
            "over the same nodes whose jobs real work preempts (the lowest PriorityTier, "
            "PreemptMode=CANCEL)")
