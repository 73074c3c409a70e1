"""`validate --distributed`'s jobs as the report shows them: each job's verdict, its backend,
the all-reduce's bus bandwidth at the largest size, and whether the training step matched the
one-process reference, read from the `distributed.json` each node's run folder holds
(remote/distributed/verdict.py `Outcome.record` writes it).

The file is read as untrusted as any log (as fabric.py reads fabric.json): bounded, strict
JSON, each field checked; a bad one is a problem of that host and skipped. A job is a run id:
its nodes' records say the same verdict; the first readable one (in host order) speaks for it,
and the node it names is shown with it. The newest MAX_JOBS jobs are shown (chosen: the
section names what an operator acts on, the files hold the rest).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..ground.runfolder import DISTRIBUTED_RECORD
from .collect import Problem, load_record, short_text
from .tree import LogsTree

MAX_BYTES = 1 << 20  # a node's record is a few KiB (its stacks, 6 to 12 sizes)
MAX_TEXT = 2000
MAX_JOBS = 10  # chosen
BACKENDS = ("nccl", "gloo", "")  # "": the job never started (version skew, a stack probe)


@dataclass
class DistJob:
    run_id: str
    nodes: list[str]
    ok: bool
    reason: str
    backend: str
    top_bytes: Optional[int] = None
    busbw_gbs: Optional[float] = None
    train: Optional[bool] = None  # None: no training step ran
    named: dict[str, str] = field(default_factory=dict)

    def row(self) -> list[str]:
        """run, nodes, verdict, backend, busbw at the top size, training step, nodes named."""
        busbw = ("-" if self.busbw_gbs is None or self.top_bytes is None else
                 f"{self.busbw_gbs:.3g} GB/s at {_size(self.top_bytes)}")
        train = {None: "-", True: "matches", False: "DIFFERS"}[self.train]
        named = "; ".join(f"{n}: {why}" for n, why in self.named.items()) or "-"
        return [self.run_id, str(len(self.nodes)), "passed" if self.ok else "FAILED",
                self.backend or "-", busbw, train, named]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _text(value: Any, what: str) -> str:
    return short_text(value, what, MAX_TEXT)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(f"{what} is not a number")
    return float(value)


def read_record(path: Path, host: str, run_id: str) -> DistJob:
    """A node's distributed.json as its job; ValueError (the reason) when it is not one."""
    data = load_record(path, MAX_BYTES)
    if data.get("node") != host or data.get("run") != run_id:  # the folder says whose
        raise ValueError(f"names node {str(data.get('node'))[:40]!r} run "
                         f"{str(data.get('run'))[:40]!r}, not its own folder's")
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or len(nodes) > 10000:
        raise ValueError("nodes is not a list")
    named = data.get("named") or {}
    if not isinstance(named, dict) or len(named) > 10000:
        raise ValueError("named is not an object")
    backend = _text(data.get("backend"), "backend")
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend[:40]!r} is none of nccl, gloo")
    job = DistJob(run_id, [_text(n, "a node") for n in nodes], data.get("ok") is True,
                  _text(data.get("reason"), "reason"), backend,
                  named={_text(k, "a named node"): _text(v, "why a node is named")
                         for k, v in named.items()})
    sizes = data.get("sizes") or []
    if not isinstance(sizes, list) or len(sizes) > 1000 or \
            not all(isinstance(s, dict) for s in sizes):
        raise ValueError("sizes is not a list of objects")
    if sizes:
        top = max(sizes, key=lambda s: _number(s.get("bytes"), "a size's bytes"))
        job.top_bytes = int(_number(top.get("bytes"), "a size's bytes"))
        job.busbw_gbs = _number(top.get("busbw_gbs"), "a size's busbw_gbs")
    train = data.get("train")
    if train is not None:
        if not isinstance(train, dict) or not isinstance(train.get("match"), bool):
            raise ValueError("train has no match")
        job.train = train["match"]
    return job


def find_jobs(logs: LogsTree | Path, hosts: list[str]) -> tuple[list[DistJob], list[Problem]]:
    """The newest MAX_JOBS distributed jobs under `logs`, newest first."""
    tree = LogsTree.of(logs)
    found: dict[str, list[tuple[str, Path]]] = {}
    for host in sorted(hosts):
        for run_id in tree.runs(host) or []:  # none: collect reports a folder it cannot list
            if tree.has(host, run_id, DISTRIBUTED_RECORD):
                found.setdefault(run_id, []).append(
                    (host, tree.folder(host, run_id) / DISTRIBUTED_RECORD))
    jobs: list[DistJob] = []
    problems: list[Problem] = []
    for run_id in sorted(found, reverse=True):
        job = None
        for host, path in found[run_id]:
            try:
                job = job or read_record(path, host, run_id)
            except (ValueError, OSError) as exc:
                problems.append(Problem(str(path), f"bad distributed record: {exc}: skipped"))
        if job is not None and len(jobs) < MAX_JOBS:
            jobs.append(job)
    return jobs, problems
