"""Stack drift: each host's latest stack manifest (`logs/<host>/<run>/stack.json`, written by
every provision and validate run; `remote/stack/manifest.py`) against the other hosts of its GPU group.
For every item (a component's version, a package's version or files, an apt package) the value
most hosts have is the majority; a host with another value is flagged, naming the item and both
values. Where no value has more hosts than every other (two hosts that differ), each host is
flagged with the others' value and "no majority".

A host with more than `MAX_DRIFT_LINES` items flagged gets one line (how many, a few of them,
components first, and where the full list is: `DRIFT_CSV` in the report's folder), so a host
whose whole stack differs (30,000 items across a fleet) cannot bury the other flags.

Manifests are untrusted like every log: read bounded and schema-checked, a bad one (or a folder
that cannot be listed) is a `Problem` of that host and skipped.
"""
from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..ground.runfolder import STACK_MANIFEST
from ..stack.manifest import COMPONENTS, ManifestError, items, parse
from .collect import MAX_FILE_BYTES, Problem
from .tree import LogsTree

NOT_INSTALLED = "(not installed)"
DRIFT_CSV = "drift.csv"  # every item flagged, one row each (written by `export`)
MAX_DRIFT_LINES = 5  # more items than this on one host: one line for the host
EXAMPLES = 3         # items named on that line
MAX_OTHERS = 3       # other values named when no value has a majority
# The order a host's items are named in: the components (kernel, driver, CUDA...) first.
_WHAT_ORDER = {what: n for n, what in enumerate(COMPONENTS + ("package", "package-files", "apt"))}


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
    others: list[str]  # other values in the group, most hosts first: at most MAX_OTHERS
    with_majority: int
    hosts: int
    other_values: int = 0  # how many other values there are (len(others) when all are kept)

    @property
    def item(self) -> str:
        return f"{self.what} {self.name}" if self.name else self.what

    def describe(self) -> str:
        if self.majority:
            return (f"DRIFT {self.host} {self.item}: {self.value} (majority {self.majority}, "
                    f"{self.with_majority} of {self.hosts} hosts), run {self.run_id}")
        more = ", ..." if self.other_values > len(self.others) else ""
        return (f"DRIFT {self.host} {self.item}: {self.value} (no majority: "
                f"{', '.join(self.others)}{more} elsewhere, {self.hosts} hosts), run {self.run_id}")

    def example(self) -> str:
        """The item in a few words, for a host's summary line."""
        return f"{self.item} {self.value} " + \
            (f"(majority {self.majority})" if self.majority else "(no majority)")


@dataclass
class Drift:
    stacks: dict[str, HostStack] = field(default_factory=dict)
    flags: list[DriftFlag] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def by_host(self) -> dict[str, list[DriftFlag]]:
        """The flags of each host, in the order of `flags`."""
        hosts: dict[str, list[DriftFlag]] = {}
        for flag in self.flags:
            hosts.setdefault(flag.host, []).append(flag)
        return hosts

    def lines(self) -> list[str]:
        """The DRIFT lines: a line per item, or one per host that has more than
        MAX_DRIFT_LINES (how many, EXAMPLES of them, where the full list is)."""
        out: list[str] = []
        for host, mine in self.by_host().items():
            if len(mine) <= MAX_DRIFT_LINES:
                out += [f.describe() for f in mine]
                continue
            first = sorted(mine, key=lambda f: item_order((f.what, f.name)))[:EXAMPLES]
            out.append(f"DRIFT {host}: {len(mine)} stack items differ from its GPU group's "
                       f"({mine[0].hosts} hosts), run {mine[0].run_id}: "
                       + "; ".join(f.example() for f in first)
                       + f"; ... every one in {DRIFT_CSV}")
        return out

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


def item_order(key: tuple[str, str]) -> tuple[int, str]:
    """The order a host's items are named in: components first, then packages, then apt."""
    what, name = key
    return _WHAT_ORDER.get(what, len(_WHAT_ORDER)), name


class StackReader:
    """A stack.json's items (`read`: None and the problem when it is not a readable manifest),
    a file whose bytes are the last good one's not checked again: a host's
    manifests mostly repeat run after run, and checking one (remote/stack/manifest.py `parse`,
    a pure function of the bytes) was most of reading a 1,000-host history. One manifest's
    bytes kept at a time; the items handed out are shared, read only."""

    def __init__(self) -> None:
        self.raw: bytes | None = None
        self.items: dict[tuple[str, str], str] = {}

    def read(self, path: Path) -> tuple[dict[tuple[str, str], str] | None, Problem | None]:
        try:
            raw = _read(path)
            if raw != self.raw:
                self.items = items(parse(raw))
                self.raw = raw
            return self.items, None
        except (ManifestError, OSError) as exc:
            return None, Problem(str(path), f"stack manifest skipped: {exc}")


def latest_stacks(tree: LogsTree) -> tuple[dict[str, HostStack], list[Problem]]:
    """Each host's latest run with a readable manifest, and the problems of the newer ones."""
    stacks: dict[str, HostStack] = {}
    problems: list[Problem] = []
    reader = StackReader()  # a fleet's hosts mostly share one stack
    for host in tree.hosts():
        for run_id in reversed(tree.runs(host) or []):
            if not tree.has(host, run_id, STACK_MANIFEST):
                continue
            path = tree.folder(host, run_id) / STACK_MANIFEST
            stack, problem = reader.read(path)
            if stack is None:
                problems += [problem] if problem else []
                continue
            stacks[host] = HostStack(host, run_id, stack)
            break
    return stacks, problems


def find_drift(logs: LogsTree | Path, groups: dict[str, str]) -> Drift:
    """Drift within each group of hosts (`groups`: host -> its GPU group; hosts not in it form
    one group of their own)."""
    stacks, problems = latest_stacks(LogsTree.of(logs))
    drift = Drift(stacks, problems=problems)
    by_group: dict[str, list[HostStack]] = {}
    for host, stack in stacks.items():
        by_group.setdefault(groups.get(host, ""), []).append(stack)
    for members in by_group.values():
        if len(members) < 2:
            continue
        keys = sorted(set().union(*(s.items for s in members)))
        version_differs: set[tuple[str, str]] = set()  # (host, package) flagged for its version
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
                if what == "package-files" and (stack.host, name) in version_differs:
                    continue  # its version differs already: the files differ with it
                if what == "package":
                    version_differs.add((stack.host, name))
                others = [v for v, _ in counts if v != value]
                drift.flags.append(DriftFlag(stack.host, stack.run_id, what, name, value,
                                             majority, others[:MAX_OTHERS],
                                             top_n if majority else 0, len(members),
                                             len(others)))
    drift.flags.sort(key=lambda f: (f.host, f.what, f.name))
    return drift
