"""What a run produced per host: the steps' statuses, the job's outcome, and the `--json`
document (docs/how-to/own-gpu-host.md, "What a run leaves") built from them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

from ..ground.fileio import write_atomic

Redact = Callable[[str], str]


class StepStatus(str, Enum):
    """How a step ended; the value is what the recap prints and `--json` holds."""

    OK = "ok"            # succeeded and changed nothing
    CHANGED = "changed"  # succeeded and changed the host (in check mode: would change it)
    SKIPPED = "skipped"  # `when` was false
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass
class StepResult:
    name: str
    status: StepStatus
    elapsed_s: float = 0.0
    message: str = ""
    commands: list[str] = field(default_factory=list)  # what ran (or would run), as shown
    diff: str = ""  # with --diff: a unified diff of the file content the step writes

    def to_json(self, redact: Redact) -> dict[str, Any]:
        return {"name": redact(self.name), "status": self.status.value,
                "elapsed_s": round(self.elapsed_s, 4), "message": redact(self.message)}


@dataclass(frozen=True)
class Outcome:
    """A job's verdict beyond its steps (a validation, a pull of logs): `text` goes in the
    recap's `name` column and under `name` in `--json`; a host whose outcome is not `ok` failed."""

    name: str
    text: str
    ok: bool
    # neither passed nor failed: it did not count (a sweep's node preempted by real work);
    # JUnit reads it as a skipped testcase
    skipped: bool = False


@dataclass
class HostResult:
    name: str
    steps: list[StepResult] = field(default_factory=list)
    unreachable: bool = False
    message: str = ""
    elapsed_s: float = 0.0
    facts: Optional[dict[str, Any]] = None
    outcome: Optional[Outcome] = None
    interrupted: bool = False
    warnings: list[str] = field(default_factory=list)  # shown, but the host did not fail
    cache: str = ""  # how the host reached the fleet cache ("" : no cache used)
    not_started: str = ""  # why a rollout never started this host ("" : it was started)
    evidence: str = ""  # the evidence archive an RMA verdict brought home (remote/evidence/)

    def counts(self) -> dict[str, int]:
        counts = {status.value: 0 for status in StepStatus}
        for step in self.steps:
            counts[step.status.value] += 1
        return counts

    @property
    def ok(self) -> bool:
        return (not self.unreachable and not self.interrupted and not self.not_started
                and not any(s.status is StepStatus.FAILED for s in self.steps)
                and (self.outcome is None or self.outcome.ok))

    def to_json(self, redact: Redact) -> dict[str, Any]:
        data: dict[str, Any] = dict(self.counts())
        data.update(unreachable=self.unreachable, elapsed_s=round(self.elapsed_s, 3),
                    steps=[s.to_json(redact) for s in self.steps])
        if self.message:
            data["message"] = redact(self.message)
        if self.outcome is not None:
            data[self.outcome.name] = redact(self.outcome.text)
        if self.interrupted:
            data["interrupted"] = True
        if self.warnings:
            data["warnings"] = [redact(w) for w in self.warnings]
        if self.cache:
            data["cache"] = self.cache
        if self.not_started:
            data["not_started"] = redact(self.not_started)
        if self.evidence:
            data["evidence"] = redact(self.evidence)
        return data


def json_document(results: dict[str, HostResult], redact: Redact,
                  rollout: Optional[dict[str, Any]] = None) -> str:
    """The `--json` result document (docs/how-to/own-gpu-host.md); `rollout`: the batches of a run
    with `--serial`, and where and why it stopped."""
    data: dict[str, Any] = {"hosts": {name: r.to_json(redact) for name, r in results.items()}}
    if rollout is not None:
        data["rollout"] = rollout
    return json.dumps(data, indent=2) + "\n"


def write_json(path: Path, results: dict[str, HostResult], redact: Redact,
               rollout: Optional[dict[str, Any]] = None) -> None:
    """Write the `--json` result document atomically."""
    write_atomic(Path(path), json_document(results, redact, rollout))

