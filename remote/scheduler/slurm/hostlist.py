"""The inventory's `slurm.nodes` hostlist (`gpu[01-16],gpu20`), expanded by Slurm itself on the
login node (`scontrol show hostnames`) and checked against the cluster's nodes. Both runs that
list a cluster's nodes take only these: `validate` (cluster.SlurmCluster.survey) and
`gpuprov fabric` (the Slurm row's `usable_nodes`). A hostlist Slurm cannot read, a name the
cluster has not, or a node outside the partition is bad input: one line at the key's
file:line, exit status 2, before any node runs anything.

The login node's answer comes in `@@name` sections (`split_sections`): `@@hostnames` holds the
names, one a line, and what scontrol said on stderr (`@@said ` lines).
"""
from __future__ import annotations

import shlex
from typing import Mapping, Optional, Sequence

from .settings import SlurmSettings

SECTIONS = ("@@user", "@@hostnames", "@@nodes")
SAID = "@@said "  # a line scontrol wrote on stderr, in the `@@hostnames` section
SHOWN = 10  # names a message lists at most


def hostnames_lines(settings: SlurmSettings) -> list[str]:
    """Shell lines that print the `@@hostnames` section (none without `nodes:`): the names,
    and what scontrol said on stderr, each line marked `@@said ` (fd 3 keeps the names apart
    from the pipe). scontrol 22.05.8 of Debian 12 exits 0 on a hostlist it cannot read
    (`n[3-1]`: "Invalid hostlist: n[3-1]" on stderr, no names; tried on the test cluster,
    tests/slurm_cluster.py): no names is the failure, not the exit status."""
    if not settings.nodes:
        return []
    return [f'echo "@@hostnames"; {{ scontrol show hostnames {shlex.quote(settings.nodes)} '
            f'2>&1 >&3 3>&- | sed "s/^/{SAID}/"; }} 3>&1']


def split_sections(out: str) -> dict[str, str]:
    """`@@name` lines start sections: {name: the text up to the next one}."""
    sections: dict[str, list[str]] = {}
    current: Optional[list[str]] = None
    for line in out.splitlines():
        if line in SECTIONS:
            current = sections.setdefault(line[2:], [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def wanted_nodes(settings: SlurmSettings, host: str, sections: Mapping[str, str],
                 partitions: Mapping[str, Sequence[str]]) -> Optional[list[str]]:
    """The names `slurm.nodes` asks for, as Slurm expanded them (None: no `nodes:`, the whole
    partition); `partitions` is every node of the cluster -> its partitions. `InputError` at
    the key's file:line when Slurm could not read the hostlist or it names a node the cluster
    has not, or one outside the partition."""
    if not settings.nodes:
        return None
    where = settings.position("nodes")
    lines = sections.get("hostnames", "").splitlines()
    names = [word for line in lines if not line.startswith(SAID) for word in line.split()]
    if not names:
        said = last_line("\n".join(line[len(SAID):] for line in lines if line.startswith(SAID)))
        raise where.error(f"host '{host}': slurm.nodes '{settings.nodes}' is not a hostlist "
                          f"Slurm reads ({said or 'no names'})")
    unknown = [n for n in names if n not in partitions]
    outside = [n for n in names if n in partitions
               and settings.partition not in partitions[n]]
    if unknown:
        raise where.error(f"host '{host}': slurm.nodes names nodes the cluster does not have: "
                          f"{', '.join(unknown[:SHOWN])}")
    if outside:
        raise where.error(f"host '{host}': slurm.nodes names nodes outside partition "
                          f"'{settings.partition}': {', '.join(outside[:SHOWN])}")
    return names


def last_line(text: str) -> str:
    """The last line of `text` that says something, cut to 300 characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
