"""The remediation loop over a `Target` (target.py's order), wave after wave under the breaker:

    take out -> (evidence) -> act -> validate again -> put back when it passes,
                                                    else the next step of the ladder;
    after the last step: left out, the escalation in its reason.

A node another party took out (`taken_by_someone_else`) is never touched. A failing node never
stops the others: every call answers per node. Each node's repair record
(remote/ground/repairs.py) is written when its remediation starts and again after each step,
atomically, into `<logs>/<node>/<run>/remediation.json`, so a Ctrl-C leaves it "stopped" with its
end time. The reasons read `gpuprov <run>: remediate: <finding> -> <action>`, the shape a Slurm
drain of gpuprov's has (scheduler/slurm/nodes.GPUPROV_REASON knows it as gpuprov's).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

from validate.actions import DRAIN_RMA, REBOOT_NODE, RESET_GPU

from ..engine.run import RunInterrupted
from ..ground.exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_VALIDATION_FAILED
from ..ground.fileio import write_atomic
from ..ground.repairs import (
    DONE,
    FAILED,
    LEFT_OUT,
    REFUSED,
    REMEDIATION_RECORD,
    REPAIRED,
    STOPPED,
    VALIDATE_STEP,
    WAITING,
    Repair,
    Step,
    Trigger,
)
from ..ground.runfolder import run_dir
from .breaker import MaxOut, wave
from .ladder import LADDER, rung
from .plan import Planned
from .reasons import one_line, reason, step_reason, unsaid
from .target import Outcome, Revalidation, Sick, Target, missing

TAKE_OUT = "take out of service"
PUT_BACK = "return to service"
EVIDENCE = "gather evidence"
# A node passes (and is in service) when its deferred reset waits for it to be idle.
BUSY = "busy: its deferred reset waits until no process holds its GPUs"


class Show(Protocol):
    """Where the lines go (output/recap.Reporter has these)."""

    def step(self, host: str, result: Line) -> None: ...
    def note(self, text: str) -> None: ...
    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]],
              right_aligned: frozenset[int] = frozenset(), title: str = "") -> None: ...


@dataclass
class Line:
    """One progress line, as a step line shows (output/recap.StepLine)."""

    name: str
    status: str
    elapsed_s: float = 0.0
    message: str = ""
    commands: Sequence[str] = ()


@dataclass
class Settings:
    run_id: str
    logs_dir: Path
    max_out: MaxOut
    reboot_timeout_s: float


def escalation(action: str, finding: str) -> str:
    """Why a node is left out: the RMA named at once, or the step that did not help."""
    if action == DRAIN_RMA:
        return f"{unsaid(finding, DRAIN_RMA)} -> {DRAIN_RMA}"
    return f"{action} did not help: {unsaid(finding, action)}; {DRAIN_RMA}"


@dataclass
class Node:
    """One node's remediation as it goes."""

    sick: Sick
    record: Repair
    action: str
    finding: str
    evidence: str = ""  # what the evidence before this step gave, for its step's detail
    gathered: bool = False  # evidence taken in this run (one archive per run folder)


@dataclass
class Loop:
    target: Target
    settings: Settings
    show: Show
    clock: Callable[[], float] = time.time
    nodes: dict[str, Node] = field(default_factory=dict)
    records: dict[str, Repair] = field(default_factory=dict)

    # ------------------------------------------------------------------ records
    def write(self, record: Repair) -> None:
        path = run_dir(self.settings.logs_dir, record.node, self.settings.run_id) / REMEDIATION_RECORD
        write_atomic(path, record.to_json() + "\n")

    def end(self, node: str, outcome: str, why: str = "") -> None:
        record = self.records[node]
        record.outcome, record.reason, record.ended_at = outcome, why, self.clock()
        self.nodes.pop(node, None)
        self.write(record)

    def add_step(self, node: str, action: str, started: float, result: str, detail: str) -> None:
        record = self.records[node]
        record.steps.append(Step(action, started, max(0.0, self.clock() - started), result,
                                 one_line(detail)))
        self.write(record)

    def line(self, node: str, name: str, ok: bool, started: float, detail: str = "") -> None:
        self.show.step(node, Line(name, "changed" if ok else "failed",
                                  max(0.0, self.clock() - started), one_line(detail)))

    # ------------------------------------------------------------------ the run
    def run(self, planned: list[Planned]) -> int:
        """Remediate every node of `planned` that needs it; the exit status."""
        try:
            pending = self.admit(planned)
            while pending:
                pending = self.wave(pending)
        except (KeyboardInterrupt, RunInterrupted):
            self.stop_all()
            self.show.note("interrupted: the nodes being remediated are recorded as stopped")
            self.recap()
            return EXIT_INTERRUPTED
        self.recap()
        left = [r for r in self.records.values() if r.outcome in (LEFT_OUT, WAITING)]
        return EXIT_VALIDATION_FAILED if left else EXIT_OK

    def stop_all(self) -> None:
        for name, record in self.records.items():
            if record.ended_at is None:
                record.outcome, record.ended_at = STOPPED, self.clock()
                record.reason = record.reason or "the run was interrupted during it"
                self.write(record)
                self.nodes.pop(name, None)

    def admit(self, planned: list[Planned]) -> list[Sick]:
        """The sick nodes to remediate: none taken out by someone else, deferred ones only idle."""
        sick = [p for p in planned if p.sick is not None]
        if not sick:
            return []
        names = [p.node for p in sick]
        others = self.target.taken_by_someone_else(names)
        for node, why in others.items():
            self.show.step(node, Line("left alone", "skipped", 0.0,
                                      one_line(f"taken out by someone else: {why}")))
        sick = [p for p in sick if p.node not in others]
        deferred = [p.node for p in sick if p.deferred]
        busy = set(deferred) - idle_nodes(self.target, deferred)
        for node in sorted(busy):
            self.show.step(node, Line("left in service", "skipped", 0.0, BUSY))
        return [p.sick for p in sick if p.node not in busy and p.sick is not None]

    def wave(self, pending: list[Sick]) -> list[Sick]:
        """Take what the breaker allows and carry it to the end; the nodes still pending."""
        now = self.target.out_now()
        names = [s.node for s in pending]
        plan = wave(names, now.out, now.pool, self.settings.max_out)
        if plan.line:
            self.show.note(plan.line)
        by_name = {s.node: s for s in pending}
        if not plan.take:
            for node in plan.wait:
                self.start(by_name[node])
                self.end(node, WAITING, plan.line)
            return []
        self.carry([by_name[n] for n in plan.take])
        return [by_name[n] for n in plan.wait]

    def start(self, sick: Sick) -> None:
        record = Repair(sick.node, self.settings.run_id,
                        Trigger(sick.run_id, sick.finding, sick.action), self.clock())
        self.records[sick.node] = record
        self.write(record)

    # ------------------------------------------------------------------ a wave
    def carry(self, wave_nodes: list[Sick]) -> None:
        for sick in wave_nodes:
            self.start(sick)
        started = self.clock()
        reasons = {s.node: step_reason(self.settings.run_id, s.finding, s.action) for s in wave_nodes}
        taken = missing(self.target.take_out(reasons), list(reasons))
        for sick in wave_nodes:
            answer = taken[sick.node]
            self.line(sick.node, TAKE_OUT, answer.ok, started, answer.detail)
            if answer.ok:
                self.nodes[sick.node] = Node(sick, self.records[sick.node], sick.action, sick.finding)
            else:
                self.end(sick.node, LEFT_OUT, f"not taken out of service ({answer.detail}): nothing done")
        while self.nodes:
            self.round()

    def round(self) -> None:
        """Each node's current step, by action, then the re-validation of those that acted."""
        acted: list[str] = []
        for node in [n for n, state in self.nodes.items() if state.action not in LADDER]:
            self.end(node, LEFT_OUT, f"no step on the ladder for {self.nodes[node].action!r}")
        for action in (RESET_GPU, REBOOT_NODE, DRAIN_RMA):
            group = [n for n, state in self.nodes.items() if state.action == action]
            if group:
                acted += self.act(action, group)
        if acted:
            self.revalidate(acted)

    def act(self, action: str, group: list[str]) -> list[str]:
        """Carry out `action` on `group`: the nodes that did it (to validate again)."""
        step = rung(action)
        if step.evidence_first:
            self.gather([n for n in group if not self.nodes[n].gathered])
        if not step.method:  # the RMA: evidence, then left out for good
            self.leave_out(group)
            return []
        started = self.clock()
        if step.method == "reset_gpu":
            answers = missing(self.target.reset_gpu(group), group)
        else:
            reasons = {n: step_reason(self.settings.run_id, self.nodes[n].finding, action) for n in group}
            answers = missing(self.target.reboot(group, reasons, self.settings.reboot_timeout_s), group)
        done = []
        for node in group:
            answer = answers[node]
            self.report_act(node, action, started, answer)
            if answer.ok:
                done.append(node)
            else:
                self.escalate(node)
        return done

    def report_act(self, node: str, action: str, started: float, answer: Outcome) -> None:
        state = self.nodes[node]
        result = DONE if answer.ok else (REFUSED if answer.escalate else FAILED)
        detail = "; ".join(t for t in (answer.detail, state.evidence) if t)
        state.evidence = ""
        self.add_step(node, action, started, result, detail)
        self.line(node, action, answer.ok, started,
                  ("refused: " if answer.escalate else "") + answer.detail)

    def gather(self, group: list[str]) -> None:
        """Each node's evidence, once per run: the one taken before a reboot (the kernel's
        Xid lines still there) serves the RMA after it."""
        if not group:
            return
        started = self.clock()
        answers = missing(self.target.evidence(group), group)
        for node in group:
            answer = answers[node]
            state = self.nodes[node]
            state.evidence = f"evidence: {answer.detail or ('gathered' if answer.ok else 'not gathered')}"
            state.gathered = True
            self.line(node, EVIDENCE, answer.ok, started, answer.detail)

    def escalate(self, node: str) -> None:
        """The next step of the ladder; after the last, left out."""
        state = self.nodes[node]
        following = rung(state.action).next
        if following is None:
            self.leave_out([node])
            return
        state.action = following

    def leave_out(self, group: list[str]) -> None:
        texts = {n: self.why_out(n) for n in group}
        answers = missing(self.target.leave_out({n: reason(self.settings.run_id, t) for n, t in texts.items()}),
                          group)
        started = self.clock()
        for node in group:
            state = self.nodes[node]
            if state.action == DRAIN_RMA:
                self.add_step(node, DRAIN_RMA, started, DONE if answers[node].ok else FAILED,
                              state.evidence or answers[node].detail)
            self.line(node, "left out", answers[node].ok, started, texts[node])
            self.end(node, LEFT_OUT, reason(self.settings.run_id, texts[node]))

    def why_out(self, node: str) -> str:
        state = self.nodes[node]
        record = state.record
        tried = [s.action for s in record.steps if s.action != VALIDATE_STEP]
        if state.action == DRAIN_RMA and tried:
            return escalation(tried[-1], state.finding)
        if state.action == DRAIN_RMA:
            return escalation(DRAIN_RMA, state.finding)
        return escalation(state.action, state.finding)

    def revalidate(self, nodes: list[str]) -> None:
        started = self.clock()
        answers = self.target.revalidate(nodes, self.settings.run_id)
        passed = []
        for node in nodes:
            answer = answers.get(node) or Revalidation(False, self.settings.run_id, "no answer")
            state = self.nodes[node]
            detail = "passed" if answer.ok else one_line(answer.finding or "did not pass")
            self.add_step(node, VALIDATE_STEP, started, DONE if answer.ok else FAILED, detail)
            self.line(node, VALIDATE_STEP, answer.ok, started, "" if answer.ok else detail)
            if answer.ok:
                passed.append(node)
            else:
                state.finding = one_line(answer.finding) or state.finding
                self.escalate(node)
        if passed:
            self.put_back(passed)

    def put_back(self, nodes: list[str]) -> None:
        started = self.clock()
        answers = missing(self.target.put_back(nodes), nodes)
        for node in nodes:
            answer = answers[node]
            self.line(node, PUT_BACK, answer.ok, started, answer.detail)
            if answer.ok:
                self.end(node, REPAIRED)
            else:
                self.end(node, LEFT_OUT, reason(self.settings.run_id, "passed its validation, "
                                                f"yet could not be returned to service ({answer.detail})"))

    # ------------------------------------------------------------------ the recap
    def recap(self) -> None:
        if not self.records:
            return
        rows = [[r.node, r.trigger.action, r.outcome, _took(r), r.reason or "-"]
                for r in sorted(self.records.values(), key=lambda r: r.node)]
        self.show.table(["node", "action", "outcome", "time to repair", "reason"], rows, title="RECAP")


def _took(record: Repair) -> str:
    if record.outcome != REPAIRED or record.duration_s is None:
        return "-"
    return f"{record.duration_s:.0f}s"


def idle_nodes(target: Target, nodes: list[str]) -> set[str]:
    """The nodes of `nodes` the route finds idle (its optional `idle(nodes) -> {node: bool}`);
    a route without it finds none idle, so a deferred reset never stops work."""
    if not nodes:
        return set()
    ask: Optional[Callable[[list[str]], dict[str, bool]]] = getattr(target, "idle", None)
    if ask is None:
        return set()
    answers = ask(nodes)
    return {n for n in nodes if answers.get(n) is True}


def show_plan(target: Target, planned: list[Planned], max_out: MaxOut, show: Show) -> int:
    """`--check`: each node, its finding, its action and the step after it, and who would wait
    for the breaker; reads the route (who is out, who is someone else's), changes nothing."""
    sick = [p for p in planned if p.sick is not None]
    others = target.taken_by_someone_else([p.node for p in sick]) if sick else {}
    rows = []
    for item in planned:
        if item.sick is None:
            rows.append([item.node, item.why, "-", "-"])
            continue
        action = item.sick.action + (" (when idle)" if item.deferred else "")
        following = rung(item.sick.action).next
        then = "left alone: taken out by someone else" if item.node in others else (
            f"{following}, if it does not help" if following else "left out (evidence first)")
        rows.append([item.node, item.sick.finding, action, then])
    show.table(["node", "finding", "action", "next step"], rows, title="PLAN (--check: nothing changed)")
    names = [p.node for p in sick if p.node not in others]
    if names:
        now = target.out_now()
        plan = wave(names, now.out, now.pool, max_out)
        show.note(f"first wave: {', '.join(plan.take) or 'none'}" + (f"; {plan.line}" if plan.line else ""))
    return EXIT_OK
