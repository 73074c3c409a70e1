"""Each host's history: every run of it under ``logs/<host>/``, oldest first, with its verdict
and whether its stack changed since the run before.

Definitions (what the report, flags.json and the Prometheus file say):

- A run's verdict comes from its results.json (read by `collect`): ``pass`` when ``ok`` is
  true and at least one check ran, ``fail`` otherwise.
- A run without a readable results.json in which the control side started a validation (its
  record, runfolder.VALIDATION_ATTEMPT, which no pull may bring or replace) is ``fail``: the
  validation timed out, crashed, had its archive refused or sent no usable results.json
  (issue 41: a hang is the commonest symptom of a sick GPU node). Its mark says why
  (`Mark.no_verdict`). Not after Ctrl-C, nor for a cluster node whose scheduler never started
  its task: the record says so, and the run has no verdict.
- Any other run without a readable results.json has no verdict (``none``: provisioning only,
  `--no-validate`, benchmark logs only, or a run recorded before the control side kept the
  record): it is on the timeline and counts in nothing else. A host with neither a verdict
  nor a stack manifest has no history.
- runs, passes, failures: over the runs with a verdict; first and last failure: run ids.
- The current streak: how many of the latest runs with a verdict had the latest one's.
- Flapping: at least `FLAP_CHANGES` changes between pass and fail among the host's last
  `FLAP_WINDOW` runs with a verdict (pass, fail, pass, fail is flapping).
- Last validated: the latest run with a verdict, and when its validation was started (the
  control side's record, runfolder.VALIDATION_ATTEMPT's `started`; for a run recorded before
  it, the run id's time, also the control side's): the host's age is the time since then. The
  start, not the end, so an age is never younger than the validation it names (`validate
  --sweep --max-age` skips a node only while its age is within the bound).
- Quarantine: at least K of the host's last N runs with a verdict failed (default 2 of 3,
  NVSentinel#127; ``--quarantine K/N``). A host with fewer than N runs is judged on those.
- A stack change: the run's stack.json (remote/stack/manifest.py) differs from the one of the
  host's latest earlier run that has one; the timeline names the items, components first.
  A bad manifest is a problem of that host and skipped.
"""
from __future__ import annotations

import functools
import re
import time
from calendar import timegm
from dataclasses import dataclass, field
from pathlib import Path

from validate.shared import counted

from ..ground.errors import InputError
from ..ground.runfolder import NOT_STARTED, RESULTS, STACK_MANIFEST, VALIDATION_ATTEMPT, never_started
from .collect import Attempt, Problem, Run, read_attempt, read_results
from .drift import NOT_INSTALLED, StackReader, item_order
from .tree import LogsTree

PASS, FAIL, NONE = "pass", "fail", "none"
FLAP_WINDOW = 6   # runs with a verdict looked at for flapping
FLAP_CHANGES = 3  # pass<->fail changes among them that make a host flapping
QUARANTINE = (2, 3)  # (K, N): failed K of its last N runs (NVSentinel#127, issue 34)
MAX_QUARANTINE_RUNS = 1000  # N above this is no policy but a typo
CHANGES_NAMED = 3  # stack items named on a timeline cell; the rest counted
NO_VERDICT_SHOWN = 5  # runs without a verdict named on a host's line; the rest counted


@dataclass
class Mark:
    """One run on a host's timeline."""

    run_id: str
    verdict: str  # PASS, FAIL or NONE
    stack_change: str = ""  # what changed since the previous manifest ("" when nothing)
    no_verdict: str = ""  # a validation was started and gave no verdict: why (collect.Attempt)
    at: float | None = None  # when its validation was started, UTC seconds (`started_at`)


@dataclass
class HostHistory:
    host: str
    timeline: list[Mark] = field(default_factory=list)
    quarantine: tuple[int, int] = QUARANTINE

    @property
    def judged(self) -> list[Mark]:
        return [m for m in self.timeline if m.verdict != NONE]

    @property
    def runs(self) -> int:
        return len(self.judged)

    @property
    def passes(self) -> int:
        return sum(m.verdict == PASS for m in self.judged)

    @property
    def failures(self) -> list[str]:
        return [m.run_id for m in self.judged if m.verdict == FAIL]

    @property
    def first_failure(self) -> str | None:
        return self.failures[0] if self.failures else None

    @property
    def last_failure(self) -> str | None:
        return self.failures[-1] if self.failures else None

    @property
    def streak(self) -> tuple[str, int]:
        """(verdict, how many of the latest runs had it); (NONE, 0) without a verdict."""
        judged = self.judged
        if not judged:
            return NONE, 0
        last, count = judged[-1].verdict, 0
        for mark in reversed(judged):
            if mark.verdict != last:
                break
            count += 1
        return last, count

    @property
    def flap_changes(self) -> int:
        window = [m.verdict for m in self.judged[-FLAP_WINDOW:]]
        return sum(a != b for a, b in zip(window, window[1:]))

    @property
    def flapping(self) -> bool:
        return self.flap_changes >= FLAP_CHANGES

    @property
    def recent_failures(self) -> list[str]:
        """The failed runs among the last N with a verdict."""
        return [m.run_id for m in self.judged[-self.quarantine[1]:] if m.verdict == FAIL]

    @property
    def quarantined(self) -> bool:
        return len(self.recent_failures) >= self.quarantine[0]

    @property
    def last_validated(self) -> Mark | None:
        """The latest run with a verdict (None without one)."""
        judged = self.judged
        return judged[-1] if judged else None

    def age_s(self, now: float) -> float | None:
        """Seconds from the start of its latest validation with a verdict to `now`."""
        last = self.last_validated
        return None if last is None or last.at is None else max(0.0, now - last.at)

    @property
    def stack_changes(self) -> list[Mark]:
        return [m for m in self.timeline if m.stack_change]

    @property
    def without_verdict(self) -> list[Mark]:
        """The failed runs whose validation was started and gave no verdict."""
        return [m for m in self.judged if m.verdict == FAIL and m.no_verdict]

    def no_verdict_line(self, shown: int = NO_VERDICT_SHOWN) -> str:
        """One line: each of the latest `shown` such runs and why; "" when there is none."""
        marks = self.without_verdict
        if not marks:
            return ""
        more = len(marks) - shown
        return (f"{len(marks)} validation{'s' if len(marks) != 1 else ''} started without a "
                "verdict, counted as failed: "
                + (f"{more} earlier, " if more > 0 else "")
                + "; ".join(f"{m.run_id} {m.no_verdict}" for m in marks[-shown:]))

    def quarantine_line(self) -> str:
        k, n = self.quarantine
        recent = min(n, self.runs)
        return (f"QUARANTINE {self.host}: failed {len(self.recent_failures)} of its last "
                f"{recent} run{'s' if recent != 1 else ''} (limit {k} of {n}): "
                + ", ".join(self.recent_failures))

    def summary(self) -> str:
        """The host's history in one line."""
        verdict, count = self.streak
        text = (f"{self.runs} run{'s' if self.runs != 1 else ''}, {self.passes} passed, "
                f"{len(self.failures)} failed; "
                + (f"streak {count} {verdict}" if count else "no verdict yet"))
        if self.failures:
            text += f"; first failure {self.first_failure}, last {self.last_failure}"
        if self.without_verdict:
            text += f"; {len(self.without_verdict)} of them without a verdict"
        if self.flapping:
            text += f"; FLAPPING ({self.flap_changes} changes in its last {FLAP_WINDOW} runs)"
        if self.quarantined:
            text += "; QUARANTINE"
        return text


def parse_quarantine(text: str) -> tuple[int, int]:
    """``K/N`` as (K, N), 1 <= K <= N <= MAX_QUARANTINE_RUNS; InputError otherwise."""
    match = re.fullmatch(r"\s*(\d{1,4})\s*/\s*(\d{1,4})\s*", text)
    if match:
        k, n = int(match.group(1)), int(match.group(2))
        if 1 <= k <= n <= MAX_QUARANTINE_RUNS:
            return k, n
    raise InputError(f"--quarantine must be K/N (failed K of the last N runs, "
                     f"1 <= K <= N <= {MAX_QUARANTINE_RUNS}), not {text!r}")


def verdict(run: Run) -> str:
    if run.results is None:
        return NONE
    ok, checks = run.results.get("ok"), run.results.get("checks")
    # nothing counted is no pass, whatever an older validate wrote in ok (issue 45)
    return PASS if ok is True and counted(checks) else FAIL


def judge(run: Run | None, attempt: Attempt | None) -> tuple[str, str]:
    """(verdict, why it has none though a validation was started) of one run folder."""
    if run is not None and run.results is not None:
        return verdict(run), ""
    if attempt is None:
        return NONE, ""
    return (FAIL if attempt.counts else NONE), attempt.why


def started_at(run_id: str, attempt: Attempt | None) -> float | None:
    """When a run's validation was started, UTC seconds: the control side's record of it, else
    the run id's time (runid.RUN_ID_TEXT: `20261122T055742.123Z-14af`); None when neither
    reads (a folder not named by gpuprov)."""
    for text, shape in ((attempt.started if attempt else "", "%Y-%m-%dT%H:%M:%SZ"),
                        (run_id[:15], "%Y%m%dT%H%M%S")):
        seconds = _utc_seconds(text, shape) if text else None  # "" never reads
        if seconds is not None:
            return seconds
    return None


@functools.lru_cache(maxsize=4096)
def _utc_seconds(text: str, shape: str) -> float | None:
    """`text` read with strptime's `shape` as UTC seconds, None when it does not read; kept:
    the runs of a sweep share their run ids' seconds, and strptime is slow (12,000 calls took
    a tenth of a 1,000-node report's reading)."""
    try:
        return float(timegm(time.strptime(text, shape)))
    except ValueError:
        return None


def format_age(seconds: float) -> str:
    """An age in its two largest units: `45s`, `12m 5s`, `5h 12m`, `3d 4h`."""
    left = int(max(0.0, seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join(parts[:2])


def started_runs(tree: LogsTree, host: str) -> list[str]:
    """`host`'s run folders a run started in (not a rollout's note of a host it never
    started), in run-id order; none when its folder cannot be listed (collect says so)."""
    return [run_id for run_id in tree.runs(host) or []
            if not (tree.has(host, run_id, NOT_STARTED)
                    and never_started(tree.folder(host, run_id)))]


def attempt_of(tree: LogsTree, host: str, run_id: str) -> tuple[Attempt | None, list[Problem]]:
    """The record of the validation started in that run folder (collect.read_attempt), read
    only when the folder holds one."""
    if not tree.has(host, run_id, VALIDATION_ATTEMPT):
        return None, []
    return read_attempt(tree.folder(host, run_id))


def last_validation(logs: LogsTree | Path, host: str) -> Mark | None:
    """The latest run of `host` under `logs` with a verdict, with when it was started
    (`Mark.at`), as `find_history` judges it: newest first, each run folder read only until one
    has a verdict. None when it has none (no folder, no verdict yet, only runs without one: a
    preempted sweep, Ctrl-C)."""
    tree = LogsTree.of(logs)
    for run_id in reversed(started_runs(tree, host)):
        attempt, _ = attempt_of(tree, host, run_id)
        folder = tree.folder(host, run_id)
        run = Run(host=host, run_id=run_id, path=folder)
        if tree.has(host, run_id, RESULTS) and (folder / RESULTS).exists():
            run.results, _ = read_results(folder / RESULTS, str(folder / RESULTS))
        judged, why = judge(run, attempt)
        if judged != NONE:
            return Mark(run_id, judged, no_verdict=why, at=started_at(run_id, attempt))
    return None


def describe_change(before: dict[tuple[str, str], str], after: dict[tuple[str, str], str]) -> str:
    """What differs between two manifests' items, components first: 'driver 580 -> 590; ...'."""
    changed = sorted((key for key in set(before) | set(after) if before.get(key) != after.get(key)),
                     key=item_order)
    named = [f"{what} {name} ".lstrip() if name else f"{what} " for what, name in changed]
    parts = [f"{label}{before.get(key, NOT_INSTALLED)} -> {after.get(key, NOT_INSTALLED)}"
             for label, key in zip(named, changed)][:CHANGES_NAMED]
    more = len(changed) - len(parts)
    return "; ".join(parts) + (f"; {more} more" if more > 0 else "")


def find_history(logs: LogsTree | Path, runs: list[Run], hosts: list[str],
                 quarantine: tuple[int, int] = QUARANTINE) -> tuple[list[HostHistory], list[Problem]]:
    """The history of each of `hosts` (folders under `logs`): its run folders in run-id
    order, each with a verdict (from `runs`, collect's) and a stack change."""
    tree = LogsTree.of(logs)
    by_key = {(r.host, r.run_id): r for r in runs}
    problems: list[Problem] = []
    reader = StackReader()
    out: list[HostHistory] = []
    for host in sorted(hosts):
        history = HostHistory(host, quarantine=quarantine)
        previous: dict[tuple[str, str], str] | None = None
        manifests = 0
        for run_id in started_runs(tree, host):
            attempt, attempt_problems = attempt_of(tree, host, run_id)
            problems += attempt_problems
            judged, why = judge(by_key.get((host, run_id)), attempt)
            mark = Mark(run_id, judged, no_verdict=why, at=started_at(run_id, attempt))
            if tree.has(host, run_id, STACK_MANIFEST):
                manifests += 1
                stack, problem = reader.read(tree.folder(host, run_id) / STACK_MANIFEST)
                if problem is not None:
                    problems.append(problem)
                elif stack is not None:
                    if previous is not None and stack != previous:
                        mark.stack_change = describe_change(previous, stack)
                    previous = stack
            history.timeline.append(mark)
        if history.runs or manifests:  # a folder of benchmark logs alone has no history
            out.append(history)
    return out, problems
