"""Stack drift: each host's latest stack manifest (`logs/<host>/<run>/stack.json`, written by
every provision and validate run; `remote/manifest.py`) against the other hosts of its GPU group.
For every item (a component's version, a package's version or files, an apt package) the value
most hosts have is the majority; a host with another value is flagged, naming the item and both
values. Where no value has more hosts than every other (two hosts that differ), each host is
flagged with the others' value and "no majority".

Manifests are untrusted like every log: read bounded and schema-checked, a bad one is a
`Problem` and skipped.

May import: `remote.stack.manifest`, `remote.runfolder`, `collect`.
"""
from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..runfolder import STACK_MANIFEST
from ..stack.manifest import ManifestError, items, parse
from .collect import MAX_FILE_BYTES, Problem

NOT_INSTALLED = "(not installed)"


@dataclass
class HostStack:
    host: str
    run_id: str
    items: dict[tuple[str, str], str]


@dataclass
class DriftFlag:
    host: str
    run_id: str
    what: str        # kernel, driver, cuda, cudnn, nccl, torch, python, package, package-files, apt
    name: str        # the package's name ("" for a component)
    value: str
    majority: str    # the value most hosts of the group have ("" when no value has the most)
    others: list[str]  # every other value in the group, most hosts first
    with_majority: int
    hosts: int

    @property
    def item(self) -> str:
        return f"{self.what} {self.name}" if self.name else self.what

    def describe(self) -> str:
        if self.majority:
            return (f"DRIFT {self.host} {self.item}: {self.value} (majority {self.majority}, "
                    f"{self.with_majority} of {self.hosts} hosts), run {self.run_id}")
        return (f"DRIFT {self.host} {self.item}: {self.value} (no majority: "
                f"{', '.join(self.others)} elsewhere, {self.hosts} hosts), run {self.run_id}")


@dataclass
class Drift:
    stacks: dict[str, HostStack] = field(default_factory=dict)
    flags: list[DriftFlag] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def note(self, host: str) -> str:
        """What a benchmark outlier's line says of its stack."""
        if host not in self.stacks:
            return "no stack manifest"
        mine = [f for f in self.flags if f.host == host]
        if not mine:
            return "stack same as its peers'"
        shown = ", ".join(f"{f.item} {f.value}" for f in mine[:3])
        return f"stack differs in {len(mine)} item{'s' if len(mine) != 1 else ''}: {shown}" + \
            (", ..." if len(mine) > 3 else "")


def _read(path: Path) -> bytes:
    """A log file's bytes: a regular file, not over the size limit (ManifestError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ManifestError("not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise ManifestError(f"over {MAX_FILE_BYTES} bytes")
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read(MAX_FILE_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)


def latest_stacks(logs_dir: Path) -> tuple[dict[str, HostStack], list[Problem]]:
    """Each host's latest run with a readable manifest."""
    stacks: dict[str, HostStack] = {}
    problems: list[Problem] = []
    for host_dir in sorted(p for p in logs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for run_dir in sorted((p for p in host_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
                              reverse=True):
            path = run_dir / STACK_MANIFEST
            if not path.exists() and not path.is_symlink():
                continue
            try:
                manifest = parse(_read(path))
            except (ManifestError, OSError) as exc:
                problems.append(Problem(str(path), f"stack manifest skipped: {exc}"))
                continue
            stacks[host_dir.name] = HostStack(host_dir.name, run_dir.name, items(manifest))
            break
    return stacks, problems


def find_drift(logs_dir: Path, groups: dict[str, str]) -> Drift:
    """Drift within each group of hosts (`groups`: host -> its GPU group; hosts not in it form
    one group of their own)."""
    stacks, problems = latest_stacks(logs_dir)
    drift = Drift(stacks, problems=problems)
    by_group: dict[str, list[HostStack]] = {}
    for host, stack in stacks.items():
        by_group.setdefault(groups.get(host, ""), []).append(stack)
    for members in by_group.values():
        if len(members) < 2:
            continue
        keys = sorted(set().union(*(s.items for s in members)))
        for key in keys:
            values = {s.host: s.items.get(key, NOT_INSTALLED) for s in members}
            counts = Counter(values.values()).most_common()
            if len(counts) == 1:
                continue
            top, top_n = counts[0]
            majority = top if top_n > counts[1][1] else ""
            what, name = key
            for stack in members:
                value = values[stack.host]
                if value == majority:
                    continue
                if what == "package-files" and any(
                        f.host == stack.host and f.what == "package" and f.name == name
                        for f in drift.flags):
                    continue  # its version differs already: the files differ with it
                others = [v for v, _ in counts if v != value]
                drift.flags.append(DriftFlag(stack.host, stack.run_id, what, name, value,
                                             majority, others, top_n if majority else 0,
                                             len(members)))
    drift.flags.sort(key=lambda f: (f.host, f.what, f.name))
    return drift
