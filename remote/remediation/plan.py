"""Which nodes need what: each selected node's latest run with a verdict (the report's reader,
`report.history.last_validation`), its worst action and its finding.

- The action: the worst (validate/actions.py `worst`, in its ORDER) of the run's own `action`
  (results.json schema 2: the worst action of the checks that failed) and the failing checks'.
  A node whose verdict is a failure with an action of the SICK set (reset the GPU, reboot the
  node, drain and replace) is remediated; one whose action is none or restart the job is not
  (the GPU itself is fine: the job, or the admin, acts), nor one whose failure names no action
  (a validation that gave no verdict: it is validated again, not repaired blind).
- A node that passed with a *deferred* "reset the GPU" (a pending row remap, results.json
  `deferred_action`, validate/actions.py `deferred`) is remediated only when idle: the plan
  marks it `deferred`, and the loop asks the route first (ssh.py: no compute process on any
  of its GPUs, gpureset.py's fact); a busy one is left in service and named.
- The finding: the first failing required check's `check: finding` (remote/ground/resultsfile
  `first_failure`, the one a Slurm drain reason quotes).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from validate.actions import SICK, deferred, worst

from ..ground.resultsfile import first_failure
from ..ground.runfolder import RESULTS, run_dir
from ..output.term import printable_line
from ..report.collect import read_results
from ..report.history import FAIL, PASS, last_validation
from .target import Sick

FINDING_MAX = 200  # the finding's cut in a reason and a line (chosen: one terminal line and more)


@dataclass(frozen=True)
class Planned:
    """One node of the plan: `sick` is what to do (None: nothing; `why` says why not)."""

    node: str
    sick: Optional[Sick]
    why: str = ""
    deferred: bool = False  # passed with a deferred reset: only when idle


def finding_of(results: dict[str, object]) -> str:
    """`check: finding`, one printable line, cut (the first failing required check)."""
    first = first_failure(results.get("checks"))
    text = f"{first[0]}: {first[1]}" if first else "failed"
    text = " ".join(printable_line(text).split())
    return text if len(text) <= FINDING_MAX else text[:FINDING_MAX - 3] + "..."


def action_of(results: dict[str, object]) -> Optional[str]:
    """The worst action of a failed run: its own and its failing checks'."""
    checks = results.get("checks")
    failing = [c.get("action") for c in checks if isinstance(c, dict) and c.get("status") == "fail"] \
        if isinstance(checks, list) else []
    named = [results.get("action"), *failing]
    return worst(a for a in named if isinstance(a, str))


def deferred_of(results: dict[str, object]) -> Optional[str]:
    """A passing run's deferred action (results.json `deferred_action`, else its findings')."""
    given = results.get("deferred_action")
    if isinstance(given, str) and given in SICK:
        return given
    checks = results.get("checks")
    findings = [f for c in checks if isinstance(c, dict) for f in (c.get("findings") or [])
                if isinstance(f, dict) and isinstance(f.get("action"), str)] if isinstance(checks, list) else []
    return deferred(findings)


def plan_node(logs_dir: Path, node: str) -> Planned:
    """What `node` needs, from its latest run with a verdict under `logs_dir`."""
    mark = last_validation(logs_dir, node)
    if mark is None:
        return Planned(node, None, "no validation with a verdict yet")
    path = run_dir(logs_dir, node, mark.run_id) / RESULTS
    results, _ = read_results(path, str(path)) if path.exists() else (None, [])
    if results is None:
        return Planned(node, None, f"run {mark.run_id} failed without a verdict "
                                   f"({mark.no_verdict or 'no results'}): validate it again")
    if mark.verdict == PASS:
        later = deferred_of(results)
        if later is None:
            return Planned(node, None, f"passed in run {mark.run_id}")
        return Planned(node, Sick(node, mark.run_id, _deferred_finding(results, later), later),
                       deferred=True)
    assert mark.verdict == FAIL
    action = action_of(results)
    if action not in SICK:
        return Planned(node, None, f"run {mark.run_id}: action {action or 'none named'}: "
                                   "nothing to repair on the node")
    return Planned(node, Sick(node, mark.run_id, finding_of(results), str(action)))


def _deferred_finding(results: dict[str, object], action: str) -> str:
    """The first finding that does not fail yet names `action` (a pending row remap)."""
    checks = results.get("checks")
    for check in checks if isinstance(checks, list) else []:
        for f in (check.get("findings") or []) if isinstance(check, dict) else []:
            if isinstance(f, dict) and not f.get("fails") and f.get("action") == action \
                    and isinstance(f.get("what"), str):
                text = " ".join(printable_line(f"{check.get('name')}: {f['what']}").split())
                return text[:FINDING_MAX]
    return f"deferred: {action}"


def plan(logs_dir: Path, nodes: list[str]) -> list[Planned]:
    """Each of `nodes`, in the order given."""
    return [plan_node(Path(logs_dir), node) for node in nodes]
