"""The distributed job judged: version skew before it starts, then who never joined or
answered, the all-reduce sweep against a floor where one exists, the training step against the
one-process reference. One `Verdict` for the job; each node's record (`distributed.json`)
says it and what that node did."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from validate import expectations

from . import plan
from .parse import Result

# What must be equal across the nodes before any collective starts (issue 44): torch, CUDA and
# NCCL as torch was built with them, the driver; and the GPU count, since torchrun starts one
# process per GPU and NCCL's backend needs one on every rank.
SKEW_KEYS = ("torch", "cuda", "nccl", "driver", "gpus")
# validate/expectations.py's judges (validate/ is untyped), as the control side calls them
_verdict: Callable[..., dict[str, Any]] = expectations.verdict
_judge_allreduce: Callable[..., dict[str, Any]] = expectations.judge_allreduce


@dataclass
class NodeRun:
    """What one node's torchrun did."""

    rc: Optional[int] = None  # None: the command itself did not come back (timed out, lost)
    joined: bool = False
    failure: str = ""  # parse.torchrun_failure's word, or "timeout"
    said: str = ""  # its last line of stderr, or why it did not come back
    started: bool = False  # its workers started: it took part in the completed rendezvous
    tail: str = ""  # the end of its stderr, printable (for the record)


@dataclass
class Verdict:
    ok: bool
    reason: str
    named: dict[str, str] = field(default_factory=dict)  # node -> why it is to blame
    busbw: Optional[dict[str, Any]] = None  # expectations.verdict of the largest size


@dataclass
class Outcome:
    """The job's record, as `distributed.json` holds it (with each node's own part added)."""

    verdict: Verdict
    nodes: list[str]
    endpoint: str = ""
    backend: str = ""
    stacks: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, NodeRun] = field(default_factory=dict)
    result: Optional[Result] = None
    elapsed_s: float = 0.0
    left: dict[str, Optional[int]] = field(default_factory=dict)  # the cleanup's count per node

    def record(self, node: str, run_id: str, settings: plan.Settings) -> dict[str, Any]:
        run = self.runs.get(node)
        res = self.result
        return {"run": run_id, "node": node, "nodes": self.nodes, "ok": self.verdict.ok,
                "reason": self.verdict.reason, "named": self.verdict.named,
                "this_node": self.verdict.named.get(node, ""),
                "backend": self.backend, "endpoint": self.endpoint, "port": settings.port,
                "limits_s": {"join": settings.join_timeout,
                             "collective": settings.collective_timeout,
                             "node": settings.limit_s},
                "stacks": self.stacks,
                "joined": sorted(n for n, r in self.runs.items() if r.joined),
                "left_processes": self.left,
                "torchrun": None if run is None else {"rc": run.rc, "failure": run.failure,
                                                      "said": run.said, "stderr_tail": run.tail},
                "world": res.world if res else None, "sizes": res.sizes if res else [],
                "wrong_elements": res.wrong_elements if res else None,
                "busbw": self.verdict.busbw, "train": res.train if res else None,
                "elapsed_s": round(self.elapsed_s, 3)}


def skew(stacks: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The nodes whose stack differs from the most common one, with what differs (a tie goes
    to the first node's value)."""
    named: dict[str, list[str]] = {}
    order = list(stacks)
    for key in SKEW_KEYS:
        values = [stacks[n].get(key) for n in order]
        counts = Counter(values)
        top = max(counts.values())
        common = next(v for v in values if counts[v] == top)
        for name, value in zip(order, values):
            if value != common:
                named.setdefault(name, []).append(
                    f"{key} {_shown(value)} (the others: {_shown(common)})")
    return {name: ", ".join(diffs) for name, diffs in named.items()}


def _shown(value: Any) -> str:
    return "none" if value is None else str(value)


def never_joined(runs: dict[str, NodeRun], endpoint: str, limit_s: float) -> dict[str, str]:
    """The nodes to blame when the job did not complete: those that never reached the
    rendezvous, or never answered within the limit; when every node reached it and none is
    to blame that way, those whose processes never joined the process group."""
    named = {}
    for name, run in runs.items():
        if run.joined:
            continue
        if run.failure == "connect":
            named[name] = f"never joined: could not reach the rendezvous at {endpoint}"
        elif run.failure == "timeout":
            named[name] = f"never answered within {limit_s:g} s"
    if named:
        return named
    for name, run in runs.items():
        if run.started and not run.joined:
            named[name] = ("reached the rendezvous, but its processes never joined the process "
                           f"group: torchrun exit {run.rc}" + (f": {run.said}" if run.said else ""))
        elif not run.joined and run.failure != "rendezvous":
            named[name] = f"never joined: torchrun exit {run.rc}" + (
                f": {run.said}" if run.said else "")
    if named:
        return named
    return {name: "never joined: the rendezvous did not complete" for name, run in runs.items()
            if not run.joined}


def node_sku(stacks: dict[str, dict[str, Any]]) -> Optional[str]:
    """The table's row every node's GPUs are (validate/checks/multigpu.py node_sku), or None."""
    from validate.checks import multigpu

    sku_of: Callable[[list[str]], Optional[str]] = multigpu.node_sku
    names = [n for s in stacks.values() for n in s.get("gpu_names") or []]
    found: Optional[str] = sku_of(names) if names else None
    return found


def table_bytes(sku: Optional[str]) -> Optional[int]:
    """The message size the table's all-reduce floor for `sku` was measured at (NCCL reaches its
    peak only at several GiB: nccl-tests#212), or None."""
    cell: Callable[..., Optional[dict[str, Any]]] = expectations.cell
    found = cell(sku, "nccl_busbw_gbs") if sku else None
    return int(found["bytes"]) if found and found.get("bytes") else None


def judge_busbw(result: Result, floor_gbs: Optional[float], sku: Optional[str] = None) -> dict[str, Any]:
    """The largest size's busbw against the inventory's `distributed_busbw_floor`, else the
    table's floor where it holds for this many GPUs at this size
    (validate/expectations.py judge_allreduce: the table's floors are one 8-GPU node's, so a
    multi-node job has none); gloo on CPUs is not judged."""
    top = max(result.sizes, key=lambda row: row["bytes"])
    busbw, nbytes = top["busbw_gbs"], int(top["bytes"])
    if result.backend == "gloo":
        return _verdict(None, busbw, "gloo on CPUs: not judged (no floor exists)")
    if floor_gbs is not None:
        return _verdict({"floor": floor_gbs, "rule": f"busbw >= {floor_gbs:g}",
                                     "source": "inventory distributed_busbw_floor"}, busbw)
    return _judge_allreduce(sku, busbw, nbytes, result.world)


def judge(result: Optional[Result], runs: dict[str, NodeRun], endpoint: str, limit_s: float,
          floor_gbs: Optional[float], sku: Optional[str] = None) -> Verdict:
    """The job's verdict from rank 0's result and every node's run."""
    if result is None or not all(r.joined for r in runs.values()) or any(
            r.rc != 0 for r in runs.values()):
        named = never_joined(runs, endpoint, limit_s)
        if all(r.joined for r in runs.values()):  # all joined; one hung or failed after
            named = {n: (f"never answered within {limit_s:g} s" if r.failure == "timeout" else
                         f"torchrun exit {r.rc}" + (f": {r.said}" if r.said else ""))
                     for n, r in runs.items() if r.rc != 0} or named
        return Verdict(False, "; ".join(f"{n}: {why}" for n, why in named.items())
                       or "the job printed no result", named)
    busbw = judge_busbw(result, floor_gbs, sku)
    problems = []
    if result.wrong_elements:
        problems.append(f"all-reduce wrong in {result.wrong_elements} elements")
    if busbw["verdict"] == expectations.FAIL:
        problems.append(f"busbw {busbw['value']:.3g} GB/s below {busbw['floor']:g} "
                        f"({busbw['source']})")
    train = result.train
    if not train["match"]:
        problems.append(f"training step differs from the one-process reference: loss "
                        f"{train['loss']:.17g} vs {train['reference_loss']:.17g}, gradients "
                        f"up to {train['grad_max_abs_diff']:.3g} apart (rtol {train['rtol']:g}, "
                        f"atol {train['atol']:g})")
    if problems:
        return Verdict(False, "; ".join(problems), {}, busbw)
    return Verdict(True, summary(result, busbw), {}, busbw)


def summary(result: Result, busbw: dict[str, Any]) -> str:
    top = max(result.sizes, key=lambda row: row["bytes"])
    judged = ("not judged" if busbw["verdict"] == expectations.NO_REFERENCE
              else f"floor {busbw['floor']:g}")
    return (f"{result.backend}, {result.world} ranks, all-reduce up to {_size(int(top['bytes']))}: "
            f"busbw {top['busbw_gbs']:.3g} GB/s ({judged}); training step matches the "
            f"one-process reference (gradients within {result.train['grad_max_abs_diff']:.2g})")


def _size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"
