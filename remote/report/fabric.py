"""The latest fabric run (`gpuprov fabric`, issue 33) as the report shows it: each node's
verdict and the suspects, read from the `fabric.json` every node's run folder holds.

The file is read as untrusted as any log: bounded, strict JSON, each field checked; a bad one
is a problem of that host and skipped. The run shown is the newest run id that left a
fabric.json, and only the nodes it measured: an older run's suspect that a later run cleared
is not flagged again. The matrix and the heat map are the fabric command's own outputs; the
report names what an operator acts on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ground.runfolder import FABRIC_RECORD
from .collect import Problem, load_record, short_text
from .tree import LogsTree

MAX_BYTES = 1 << 20  # a node's record of 2 rounds is a few KiB
MAX_TEXT = 500
MAX_DISAGREES = 4000  # a node's figures against each of its partners' (4 at most, 2 rounds)
VERDICTS = ("ok", "suspect", "ok (bad link)", "not measured")


@dataclass
class FabricNode:
    host: str
    run_id: str
    verdict: str
    reason: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)
    disagrees: str = ""  # its figures disagree with every partner's (the fabric run's words)


@dataclass
class Fabric:
    """The newest fabric run: its id and its nodes (empty: no fabric run under logs/)."""

    run_id: str = ""
    nodes: list[FabricNode] = field(default_factory=list)

    @property
    def suspects(self) -> list[FabricNode]:
        return [n for n in self.nodes if n.verdict == "suspect"]

    @property
    def links(self) -> list[tuple[str, str]]:
        return sorted({tuple(sorted(link)) for n in self.nodes for link in n.links})  # type: ignore[misc]

    def lines(self) -> list[str]:
        """The flag lines: a suspect node, a suspect link."""
        out = [f"FABRIC SUSPECT NODE {n.host}: {n.reason or 'slow or failed with every partner'}"
               f", run {self.run_id}" for n in self.suspects]
        out += [f"FABRIC SUSPECT LINK {a} <-> {b}: slow while both nodes are fast with other "
                f"partners, run {self.run_id}" for a, b in self.links]
        out += [f"FABRIC FIGURES DISAGREE {n.host}: {n.disagrees}, run {self.run_id}"
                for n in self.nodes if n.disagrees]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id or None,
                "nodes": {n.host: {"verdict": n.verdict, "reason": n.reason or None}
                          for n in self.nodes},
                "suspect_nodes": [n.host for n in self.suspects],
                "suspect_links": [list(link) for link in self.links],
                "disagreeing_nodes": [n.host for n in self.nodes if n.disagrees]}


def _text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    return short_text(value, what, limit)


def read_record(path: Path, host: str, run_id: str) -> FabricNode:
    """A node's fabric.json as a FabricNode; ValueError (the reason) when it is not one."""
    data = load_record(path, MAX_BYTES)
    # the folder says whose and which run it is: a record naming another node is refused
    if data.get("node") != host or data.get("run") != run_id:
        raise ValueError(f"names node {str(data.get('node'))[:40]!r} run "
                         f"{str(data.get('run'))[:40]!r}, not its own folder's")
    verdict = _text(data.get("verdict"), "verdict")
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict[:40]!r} is none of {', '.join(VERDICTS)}")
    links = data.get("suspect_links") or []
    if not isinstance(links, list) or len(links) > 1000:
        raise ValueError("suspect_links is not a list")
    pairs: list[tuple[str, str]] = []
    for link in links:
        if not (isinstance(link, list) and len(link) == 2 and host in link):
            raise ValueError("a suspect link is not a pair holding this node")
        a, b = (_text(x, "a suspect link's node") for x in link)
        pairs.append((a, b))
    return FabricNode(host, run_id, verdict, _text(data.get("reason"), "reason"), pairs,
                      _text(data.get("disagrees"), "disagrees", MAX_DISAGREES))


def find_fabric(logs: LogsTree | Path, hosts: list[str]) -> tuple[Fabric, list[Problem]]:
    """The newest fabric run under `logs` and the nodes it measured."""
    tree = LogsTree.of(logs)
    found: dict[str, list[tuple[str, Path]]] = {}
    for host in hosts:
        for run_id in tree.runs(host) or []:  # none: collect reports a folder it cannot list
            if tree.has(host, run_id, FABRIC_RECORD):
                found.setdefault(run_id, []).append((host, tree.folder(host, run_id) / FABRIC_RECORD))
    if not found:
        return Fabric(), []
    run_id = max(found)
    nodes, problems = [], []
    for host, path in sorted(found[run_id]):
        try:
            nodes.append(read_record(path, host, run_id))
        except (ValueError, OSError) as exc:
            problems.append(Problem(str(path), f"bad fabric record: {exc}: skipped"))
    return Fabric(run_id, nodes), problems
