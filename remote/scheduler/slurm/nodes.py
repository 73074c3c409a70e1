"""What Slurm says about its nodes, read from any of its JSON shapes, and what a run does with
each node: validate it, skip it (down, or drained by someone else), or take it back (drained
by gpuprov, with --resume-passed).

Shapes (tests/fixtures/slurm/SOURCES.md):
- 22.05 `sinfo --json` (openapi v0.0.38): `nodes[]`, `state` a lower-case string ("idle",
  "down", "mixed"), `state_flags` a list (["DRAIN"], ["NOT_RESPONDING"]), `partitions` a list.
- 23.02+ `scontrol show nodes --json` (data_parser v0.0.39+): `nodes[]`, `state` a list of
  upper-case words (["IDLE", "DRAIN"]).
- 23.02+ `sinfo --json`: grouped records `sinfo[]`: `node.state`, `nodes.nodes`,
  `partition.name`, `reason.description`.
22.05's `--json` ignores every filter (slurm.md, gotcha 13): everything is filtered here.
What the cluster answers is read defensively: a field of an unexpected type counts as absent.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from validate.shared import DRAIN_PREFIX, HEALTH_PREFIX

from ...ground.runid import RUN_ID_TEXT
from ..base import Plan, natural_order

# A node name becomes a folder, logs/<node>/<run>/: the inventory's own rule for host names.
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# Every reason gpuprov writes starts with DRAIN_PREFIX (validate/shared.py owns it and the health
# check's HEALTH_PREFIX). A drain is gpuprov's own only when its reason is one gpuprov
# writes: `gpuprov <run id>: ...` (gate.drain_reason) or the health check's `gpuprov health: ...`
# (validate/slurm_node.py). An admin's "gpuprov found fan 3 bad, do not resume" starts with the
# same word and is not: taking it for ours would resume the node. gate.drain_command holds the
# same rule as a shell pattern.
GPUPROV_REASON = re.compile(rf"(?:{re.escape(HEALTH_PREFIX)}|{re.escape(DRAIN_PREFIX)}{RUN_ID_TEXT}: )")
# Slurm's node states and flags (slurm.h NODE_STATE_*, and data_parser's NODE_STATES names):
# any of these and no job can start on the node now, so it is reported, not validated.
UNAVAILABLE = {"DOWN", "FUTURE", "UNKNOWN", "ERROR", "NOT_RESPONDING", "POWERED_DOWN",
               "POWERING_DOWN", "POWER_DOWN", "POWERING_UP", "REBOOT_ISSUED",
               "REBOOT_REQUESTED", "INVALID_REG", "INVALID", "MAINTENANCE", "PLANNED",
               "BLOCKED"}
DRAINED = {"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "POWER_DRAIN"}
# A node flagged NOT_RESPONDING but not DOWN missed slurmctld's last ping: right after
# `scontrol update state=resume` (slurm.md gotcha 10), or while its machine was busy. It clears
# at the next ping it answers (pings go SlurmdTimeout/3 apart: src/slurmctld/controller.c,
# `ping_interval`), or turns DOWN after SlurmdTimeout. Reporting it down at once sent such
# nodes home unvalidated (a CI run saw a loaded machine do it): such a node is "late", and
# the node list is asked for again for a few seconds (base.LATE_WAIT_S).


@dataclass(frozen=True)
class Node:
    """One node as Slurm reports it; `states` holds its base state and flags, upper case."""

    name: str
    states: frozenset[str]
    reason: str = ""
    partitions: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """The states as one word for messages, e.g. `IDLE+DRAIN`."""
        return "+".join(sorted(self.states)) or "UNKNOWN"

    @property
    def drained(self) -> bool:
        return bool(self.states & DRAINED)

    @property
    def unavailable(self) -> bool:
        return bool(self.states & UNAVAILABLE)

    @property
    def late(self) -> bool:
        """Kept off only by a missed ping (see above: that may pass in a moment)."""
        return self.states & UNAVAILABLE == {"NOT_RESPONDING"}

    @property
    def drained_by_gpuprov(self) -> bool:
        return self.drained and GPUPROV_REASON.match(self.reason) is not None


class NodeListError(ValueError):
    """The cluster's answer is not a node listing gpuprov can read."""


def parse_nodes(text: str) -> dict[str, Node]:
    """Node name -> `Node` from any of the JSON shapes above; a node in several records (one
    per partition in grouped output) gathers all its partitions."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NodeListError(f"not JSON ({exc})") from None
    except RecursionError:  # the login node's answer is untrusted: 100,000 "[" (issue 41)
        raise NodeListError("not JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise NodeListError("not a JSON object")
    found: dict[str, Node] = {}
    records = data.get("nodes")
    grouped = data.get("sinfo")
    if isinstance(records, list):
        for record in records:
            if isinstance(record, dict):
                _add(found, _from_node_record(record))
    elif isinstance(grouped, list):
        for record in grouped:
            if isinstance(record, dict):
                for node in _from_sinfo_record(record):
                    _add(found, node)
    else:
        errors = data.get("errors")
        why = f": {errors}" if errors else ""
        raise NodeListError(f"neither 'nodes' nor 'sinfo' in the answer{why}")
    return found


def _add(found: dict[str, Node], node: Optional[Node]) -> None:
    if node is None:
        return
    old = found.get(node.name)
    if old is not None:
        parts = tuple(dict.fromkeys(old.partitions + node.partitions))
        node = Node(node.name, old.states | node.states, old.reason or node.reason, parts)
    found[node.name] = node


def _words(value: Any) -> set[str]:
    """State words from a string ("idle", "IDLE+DRAIN", "down*") or a list of them."""
    items = value if isinstance(value, list) else [value]
    words: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            continue
        text = item.strip().upper()
        if text.endswith("*"):  # sinfo's mark for a node that does not respond
            words.add("NOT_RESPONDING")
            text = text[:-1]
        words |= {w for w in re.split(r"[+\s,]+", text) if w}
    return words


def _text(value: Any) -> str:
    if isinstance(value, dict):  # 23.02+ grouped records: {"description": ..., "user": ...}
        value = value.get("description")
    return value.strip() if isinstance(value, str) else ""


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list):
        return ()
    return tuple(v.strip() for v in value if isinstance(v, str) and v.strip())


def _from_node_record(record: dict[str, Any]) -> Optional[Node]:
    name = record.get("name")
    if not isinstance(name, str) or not name:
        return None
    states = _words(record.get("state")) | _words(record.get("state_flags"))
    return Node(name, frozenset(states), _text(record.get("reason")),
                _names(record.get("partitions")))


def _from_sinfo_record(record: dict[str, Any]) -> list[Node]:
    node = record.get("node")
    states = frozenset(_words(node.get("state") if isinstance(node, dict) else None))
    nodes = record.get("nodes")
    names = _names(nodes.get("nodes") if isinstance(nodes, dict) else None)
    partition = record.get("partition")
    part = partition.get("name") if isinstance(partition, dict) else partition
    parts = (part,) if isinstance(part, str) and part else ()
    reason = _text(record.get("reason"))
    return [Node(name, states, reason, parts) for name in names]


def plan_nodes(nodes: dict[str, Node], partition: str, wanted: Optional[Iterable[str]],
               resume_passed: bool) -> Plan:
    """Sort the partition's nodes (only `wanted` ones when given; both already checked to
    exist) into those validated, taken back, skipped and down."""
    chosen = [n for n in nodes.values() if partition in n.partitions]
    if wanted is not None:
        keep = set(wanted)
        chosen = [n for n in chosen if n.name in keep]
    plan = Plan([], [], [], [])
    for node in sorted(chosen, key=lambda n: natural_order(n.name)):
        reason = f" ({node.reason})" if node.reason else ""
        if not NODE_NAME.fullmatch(node.name):
            plan.skipped.append((node, "its name cannot be a folder name"))
        elif node.unavailable:
            plan.down.append((node, f"{node.state}{reason}"))
        elif node.drained_by_gpuprov:
            if resume_passed:
                plan.validate.append(node)
                plan.resume.append(node)
            else:
                plan.skipped.append((node, f"drained by gpuprov{reason}; --resume-passed "
                                           "validates it again"))
        elif node.drained:
            plan.skipped.append((node, f"{node.state}, drained by someone else{reason}: left "
                                       "alone"))
        else:
            plan.validate.append(node)
    return plan


_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_ADDRESS = re.compile(r"[A-Za-z0-9.:-]{1,253}")
# Base states a node runs a new job in, and flags that keep jobs off it (scontrol(1), "NODE
# STATE CODES"; sinfo(1)); a trailing '*' is "not responding".
_RUNS = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
_KEEPS_OFF = {"DRAIN", "FAIL", "NOT_RESPONDING", "MAINTENANCE", "POWERED_DOWN",
              "POWERING_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED"}
ONE_LINE_MAX_NODES = 100_000


@dataclass(frozen=True)
class ListedNode:
    """One line of `scontrol show nodes -o`: what `gpuprov fabric` needs of a node."""

    name: str
    address: str
    base: str              # the base state, e.g. IDLE
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, ...
    partitions: tuple[str, ...]

    @property
    def usable(self) -> bool:
        return self.base in _RUNS and not _KEEPS_OFF & self.flags

    @property
    def late(self) -> bool:
        return self.base in _RUNS and _KEEPS_OFF & self.flags == {"NOT_RESPONDING"}


def one_line_nodes(text: str) -> list[ListedNode]:
    """Each node of `scontrol show nodes -o` (one line per node), once; a line whose name or
    address is not plain is left out (what the login node printed is untrusted), as is
    everything after `Reason=` (free text). A trailing '*' (sinfo's way) is the flag
    NOT_RESPONDING."""
    found: dict[str, ListedNode] = {}
    for line in text.splitlines()[:ONE_LINE_MAX_NODES]:
        fields = dict(word.split("=", 1) for word in line.split(" Reason=")[0].split()
                      if "=" in word)
        name, address = fields.get("NodeName", ""), fields.get("NodeAddr", "")
        state = fields.get("State", "")
        words = state.rstrip("*").split("+")
        flags = set(words[1:]) | ({"NOT_RESPONDING"} if state.endswith("*") else set())
        if not _NAME.fullmatch(name) or not _ADDRESS.fullmatch(address) or name in found:
            continue
        found[name] = ListedNode(name, address, words[0], frozenset(flags),
                                 tuple(p for p in fields.get("Partitions", "").split(",") if p))
    return list(found.values())


def _chosen(text: str, partition: str, wanted: Optional[Iterable[str]]) -> Iterator[ListedNode]:
    """The listed nodes of `partition`, only the `wanted` ones when given, in Slurm's order."""
    keep = set(wanted) if wanted is not None else None
    for node in one_line_nodes(text):
        if partition in node.partitions and (keep is None or node.name in keep):
            yield node


def usable_nodes(text: str, partition: str,
                 wanted: Optional[Iterable[str]] = None) -> list[tuple[str, str]]:
    """(NodeName, NodeAddr) of each node of `scontrol show nodes -o` in `partition` (and
    `wanted`, the inventory's hostlist expanded, when given) that can run a job now."""
    return [(n.name, n.address) for n in _chosen(text, partition, wanted) if n.usable]


def late_nodes(text: str, partition: str, wanted: Optional[Iterable[str]] = None) -> list[str]:
    """The nodes of `scontrol show nodes -o` in `partition` (and `wanted`) kept off only by a
    missed ping (`Node.late`)."""
    return [n.name for n in _chosen(text, partition, wanted) if n.late]
