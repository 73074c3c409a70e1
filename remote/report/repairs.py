"""Each node's repairs: what `gpuprov remediate` did to it, run by run, from its records
(`<logs>/<node>/<run>/remediation.json`, remote/ground/repairs.py owns the format), and whether
a repair held.

Definitions (what the report, flags.json and the Prometheus file say):

- A repair: one record, in run-id order. Counted by the action its trigger named (the verdict's
  action: "reboot the node"), and by outcome (repaired, left out, waiting, stopped).
- Time to repair: `Repair.duration_s` (start to end) of the repaired ones: their median and the
  latest's. A record still going (no end) has none.
- A repair that did not hold ("keeps coming back"): one that worked (outcome repaired) followed
  by a failed verdict within the node's next N runs with a verdict after its own run (the
  remediation run's own re-validation is that run, not one of the N). Default N:
  `REPAIR_WINDOW`; `--repair-window N`. A node with fewer than N runs since is judged on those.
- A record that is not a regular file, is over `MAX_RECORD_BYTES`, does not read
  (`repairs.read_repair`) or names another node or run than its folder is a problem of that
  node, named and skipped.
"""
from __future__ import annotations

import bisect
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..ground.errors import InputError
from ..ground.repairs import OUTCOMES, REMEDIATION_RECORD, REPAIRED, RecordError, Repair, read_repair
from .collect import Problem
from .history import FAIL, MAX_QUARANTINE_RUNS, HostHistory, format_age
from .tree import LogsTree

# N, chosen: the quarantine's window (history.QUARANTINE, 2 of the last 3: NVSentinel#127). A
# node that fails again within the runs that would quarantine it again was not repaired; a
# failure later than that is counted as a new fault. No public source names a figure for it.
REPAIR_WINDOW = 3
# A record holds a few steps of one-line texts (under 10 KiB); one far larger is no record of
# ours (chosen: 1 MiB, the bound fabric.json and distributed.json get, collect.load_record).
MAX_RECORD_BYTES = 1 << 20
SHOWN_TEXT = 160  # characters of a record's finding or reason shown on a line


@dataclass
class DidNotHold:
    """A repair that worked, then a failed verdict `after` runs with a verdict later."""

    repair: Repair
    failed_run: str
    after: int


@dataclass
class NodeRepairs:
    node: str
    repairs: list[Repair]  # oldest first (run id)
    did_not_hold: list[DidNotHold] = field(default_factory=list)

    def by_action(self) -> dict[str, int]:
        """How many repairs each action (the trigger's) had, most first."""
        counts: dict[str, int] = {}
        for r in self.repairs:
            counts[r.trigger.action] = counts.get(r.trigger.action, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def outcomes(self) -> dict[str, int]:
        """How many repairs had each outcome, every outcome named (0 when none)."""
        return {o: sum(r.outcome == o for r in self.repairs) for o in OUTCOMES}

    @property
    def repaired(self) -> list[Repair]:
        return [r for r in self.repairs if r.outcome == REPAIRED]

    def times(self) -> list[float]:
        """The repaired ones' times to repair, oldest first."""
        return [d for d in (r.duration_s for r in self.repaired) if d is not None]

    @property
    def median_s(self) -> float | None:
        times = self.times()
        return statistics.median(times) if times else None

    @property
    def latest_s(self) -> float | None:
        times = self.times()
        return times[-1] if times else None

    @property
    def last(self) -> Repair:
        return self.repairs[-1]


@dataclass
class Repairs:
    nodes: list[NodeRepairs] = field(default_factory=list)  # nodes with a record, by name
    window: int = REPAIR_WINDOW

    @property
    def repaired_nodes(self) -> list[NodeRepairs]:
        return [n for n in self.nodes if n.repaired]

    @property
    def coming_back(self) -> list[NodeRepairs]:
        return [n for n in self.nodes if n.did_not_hold]

    @property
    def count(self) -> int:
        return sum(len(n.repairs) for n in self.nodes)

    def times(self) -> list[float]:
        return [t for n in self.nodes for t in n.times()]

    @property
    def median_s(self) -> float | None:
        times = self.times()
        return statistics.median(times) if times else None


def parse_repair_window(text: str) -> int:
    """``N`` as an int, 1 <= N <= history.MAX_QUARANTINE_RUNS; InputError otherwise."""
    match = re.fullmatch(r"\s*(\d{1,4})\s*", text)
    if match and 1 <= int(match.group(1)) <= MAX_QUARANTINE_RUNS:
        return int(match.group(1))
    raise InputError(f"--repair-window must be N (a repair that worked must hold for the node's "
                     f"next N runs, 1 <= N <= {MAX_QUARANTINE_RUNS}), not {text!r}")


def shown(text: str, limit: int = SHOWN_TEXT) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def read_record(folder: Path) -> tuple[Repair | None, Problem | None]:
    """The record in run folder `folder` (None without one), or the problem it is."""
    path = folder / REMEDIATION_RECORD
    if not (path.exists() or path.is_symlink()):
        return None, None
    try:
        if path.is_symlink() or not path.is_file():
            raise RecordError(f"{path}: not a regular file")
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise RecordError(f"{path}: over {MAX_RECORD_BYTES} bytes")
        repair = read_repair(path)
    except (OSError, RecordError) as exc:
        return None, Problem(str(path), _why(exc, path))
    if (repair.node, repair.run_id) != (folder.parent.name, folder.name):
        return None, Problem(str(path), f"remediation record of {shown(repair.node)}/"
                             f"{shown(repair.run_id)}, not of its folder: skipped")
    return repair, None


def _why(exc: Exception, path: Path) -> str:
    text = str(exc).removeprefix(f"{path}: ") if isinstance(exc, RecordError) else \
        f"unreadable ({getattr(exc, 'strerror', None) or exc})"
    return f"bad remediation record: {shown(' '.join(text.split()))}: skipped"


def did_not_hold(repairs: list[Repair], history: HostHistory | None, window: int) -> list[DidNotHold]:
    """Each repaired one of `repairs` followed by a failed verdict within the node's next
    `window` runs with a verdict after the repair's own run."""
    judged = history.judged if history is not None else []
    run_ids = [m.run_id for m in judged]
    out = []
    for repair in repairs:
        if repair.outcome != REPAIRED:
            continue
        start = bisect.bisect_right(run_ids, repair.run_id)
        for n, mark in enumerate(judged[start:start + window], 1):
            if mark.verdict == FAIL:
                out.append(DidNotHold(repair, mark.run_id, n))
                break
    return out


def find_repairs(logs: LogsTree | Path, history: list[HostHistory], window: int = REPAIR_WINDOW
                 ) -> tuple[Repairs, list[Problem]]:
    """Every record of each host with a history (its timeline's run folders)."""
    tree = LogsTree.of(logs)
    problems: list[Problem] = []
    nodes = []
    for record in history:
        repairs = []
        for mark in record.timeline:
            if not tree.has(record.host, mark.run_id, REMEDIATION_RECORD):
                continue
            repair, problem = read_record(tree.folder(record.host, mark.run_id))
            if problem is not None:
                problems.append(problem)
            elif repair is not None:
                repairs.append(repair)
        if repairs:
            nodes.append(NodeRepairs(record.host, repairs, did_not_hold(repairs, record, window)))
    return Repairs(nodes, window), problems


def hold_line(node: NodeRepairs, window: int) -> str:
    """The repairs of `node` that did not hold, in one line ("" when all held)."""
    if not node.did_not_hold:
        return ""
    return (f"REPAIR DID NOT HOLD {node.node}: "
            + "; ".join(f"repaired in {d.repair.run_id} ({d.repair.trigger.action}), failed "
                        f"again in {d.failed_run} ({d.after} run{'s' if d.after != 1 else ''} "
                        "later)" for d in node.did_not_hold)
            + f" (window: its next {window} runs)")


format_duration = format_age  # a duration in its two largest units: `45s`, `12m 5s`, `5h 12m`
