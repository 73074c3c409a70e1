"""A node's repair record: what `gpuprov remediate` did to it in one run, kept as
`<logs>/<node>/<run>/remediation.json` (REMEDIATION_RECORD, a control file: no pull may bring
or replace it), beside that run's re-validation (its results.json). The remediation writes it
(remote/remediation/), the report counts it (repairs per node, time to repair, repairs that did
not hold). The one owner of its format.

    {"format": 1, "node": "n3", "run_id": "<the remediation run>",
     "trigger": {"run_id": "<the run whose verdict named the action>",
                 "finding": "<check: finding, one line>", "action": "reboot the node"},
     "started_at": <UTC seconds>, "ended_at": <UTC seconds or null while it goes>,
     "steps": [{"action": "reboot the node", "started_at": ..., "duration_s": ...,
                "result": "done" | "refused" | "failed", "detail": "<one line>"}, ...],
     "outcome": "repaired" | "left out" | "waiting" | "stopped",
     "reason": "<one line: why left out, the escalation, or why it waits>"}

- steps: each action carried out, in order, and each re-validation (action VALIDATE_STEP;
  result "done" when the node passed, "failed" when not); an escalation is the next step.
- outcome: "repaired" (passed its re-validation and back in service), "left out" (the last step
  failed or was an RMA: out of service with `reason`), "waiting" (the breaker held it back:
  nothing was done), "stopped" (the run ended during it: Ctrl-C or the control side's failure).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from .runfolder import REMEDIATION_RECORD as REMEDIATION_RECORD

RECORD_FORMAT = 1
VALIDATE_STEP = "validate again"
REPAIRED, LEFT_OUT, WAITING, STOPPED = "repaired", "left out", "waiting", "stopped"
OUTCOMES = (REPAIRED, LEFT_OUT, WAITING, STOPPED)
DONE, REFUSED, FAILED = "done", "refused", "failed"
STEP_RESULTS = (DONE, REFUSED, FAILED)


@dataclass
class Trigger:
    """The verdict that named the action: its run, its finding and the action."""

    run_id: str
    finding: str
    action: str


@dataclass
class Step:
    action: str
    started_at: float
    duration_s: float
    result: str  # DONE, REFUSED or FAILED
    detail: str = ""


@dataclass
class Repair:
    node: str
    run_id: str
    trigger: Trigger
    started_at: float
    ended_at: Optional[float] = None
    steps: list[Step] = field(default_factory=list)
    outcome: str = STOPPED
    reason: str = ""

    @property
    def duration_s(self) -> Optional[float]:
        """Time to repair (or to give up): from the start to the end, None while it goes."""
        return None if self.ended_at is None else max(0.0, self.ended_at - self.started_at)

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, **asdict(self)}, indent=1, sort_keys=True)


class RecordError(ValueError):
    """A remediation.json that is not one this version wrote (the report skips it, naming it)."""


def read_repair(path: Path) -> Repair:
    """The record at `path`; `RecordError` (one line) when it is unreadable or malformed.
    Written by the control side, yet read defensively: a file edited by hand is refused, not
    believed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"{path}: not readable JSON ({exc})") from None
    try:
        return _repair(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{path}: not a remediation record ({exc})") from None


def _repair(data: Any) -> Repair:
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        raise ValueError(f"format is not {RECORD_FORMAT}")
    trigger = data["trigger"]
    steps = [Step(_text(s["action"]), _time(s["started_at"]), _time(s["duration_s"]),
                  _one_of(s["result"], STEP_RESULTS), _text(s.get("detail", "")))
             for s in data["steps"]]
    ended = data.get("ended_at")
    return Repair(_text(data["node"]), _text(data["run_id"]),
                  Trigger(_text(trigger["run_id"]), _text(trigger["finding"]),
                          _text(trigger["action"])),
                  _time(data["started_at"]), None if ended is None else _time(ended), steps,
                  _one_of(data["outcome"], OUTCOMES), _text(data.get("reason", "")))


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise ValueError(f"{value!r} is not a time")
    return float(value)


def _one_of(value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{value!r} is none of {', '.join(allowed)}")
    return str(value)
