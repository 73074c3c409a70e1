"""The SSH route: a `Target` over an inventory's hosts, each call one engine run of a small job
over the nodes it is given (their sessions open in parallel, as `gpuprov validate`'s do).

- Out of service: a quarantine mark, `~/.gpuprov/<host>/quarantine` on the host (the login
  user's gpuprov folder, engine/jobs/logs.remote_root; QUARANTINE_MARK), holding the reason
  (one line). It survives a reboot (under $HOME, not /run). `gpuprov validate` and
  `provision`'s validation on a marked host say so in a warning (engine/jobs/validate.py) and
  go on: the mark is the remediation's record that it holds the node, not a lock; an operator
  validating by hand is what the remediation itself does next. The local record is the
  node's remediation.json (remote/ground/repairs.py). Put back removes the mark.
- Out now: the selected hosts that carry a mark (any mark: an admin's too); the pool is the
  selected hosts.
- Someone else's: a mark whose reason is not one a gpuprov remediation writes
  (`gpuprov <run id>: remediate: ...`).
- Evidence: remote/evidence's CollectEvidence; reboot: the reboot kind's `reboot_and_wait`
  (a new boot_id); re-validation: the validate job with the host's profile, into the same run
  folder; the GPU reset: gpureset.py's fact, then its commands as root.
"""
from __future__ import annotations

import dataclasses
import shlex
import threading
from pathlib import Path
from typing import Callable, Optional

from ..config.inventory import Host
from ..engine.jobs.logs import QUARANTINE_MARK, remote_root
from ..engine.jobs.reboot import reboot_and_wait
from ..engine.jobs.validate import Validate
from ..engine.results import HostResult, StepStatus
from ..engine.results import Outcome as Verdict
from ..engine.run import Run
from ..engine.session import HostSession
from ..ground.runfolder import RESULTS, run_dir
from ..output.term import printable_line
from ..report.collect import Run as LoggedRun
from ..report.collect import read_results
from ..report.history import PASS, verdict
from .gpureset import COMPUTE_APPS, NO_SMI, RESET_TIMEOUT_S, FactError, parse_compute_apps, plan_reset
from .plan import action_of, finding_of
from .reasons import OURS
from .routes import RouteContext
from .target import Outcome, OutNow, Revalidation

MARK_TIMEOUT_S = 60.0  # a mark's read or write (chosen)
OUTCOME = "remediate"


def mark_path(host: Host) -> str:
    return f"{remote_root(host.name)}/{QUARANTINE_MARK}"


class _Answering:
    """A job whose `do(session)` answers for its host; the answers kept by host name."""

    outcome = OUTCOME

    def __init__(self, do: Callable[[HostSession], Outcome]):
        self.do = do
        self.answers: dict[str, Outcome] = {}
        self.lock = threading.Lock()

    def __call__(self, session: HostSession) -> None:
        answer = self.do(session)
        with self.lock:
            self.answers[session.host.name] = answer
        session.conclude(Verdict(OUTCOME, answer.detail, answer.ok))


def _run(session: HostSession, script: str, timeout: float = MARK_TIMEOUT_S,
         become: bool = False) -> tuple[int, str]:
    res = session.conn.run(script, timeout=timeout, become=become)
    text = (res.out + res.err).strip()
    return res.rc, text


class SshTarget:
    """A `Target` over `hosts` of the run `run` (its run id is the remediation's)."""

    name = "ssh"

    def __init__(self, run: Run, hosts: list[Host], logs_dir: Path, suite: str = "quick",
                 evidence_job: Optional[Callable[[HostSession], tuple[str, Optional[Path]]]] = None):
        self.run = run
        # the reads (marks, idle GPUs) of every selected host leave no run folder behind: only
        # the nodes the run works on get one
        self.reader = Run(run.inventory, run.hosts, dataclasses.replace(run.options, logs_dir=None),
                          run.reporter, run.redact)
        self.hosts = {h.name: h for h in hosts}
        self.logs_dir = Path(logs_dir)
        self.suite = suite
        self._evidence = evidence_job

    # ------------------------------------------------------------------ plumbing
    def _each(self, nodes: list[str], do: Callable[[HostSession], Outcome],
              read_only: bool = False) -> dict[str, Outcome]:
        job = _Answering(do)
        hosts = [self.hosts[n] for n in nodes if n in self.hosts]
        run = self.reader if read_only else self.run
        results = run.execute(job, hosts) if hosts else {}
        return {n: job.answers.get(n) or Outcome(False, _why(results.get(n))) for n in nodes}

    def _marks(self, nodes: list[str]) -> dict[str, Optional[str]]:
        """Each node's mark (None: none; a node that did not answer is left out)."""
        def read(session: HostSession) -> Outcome:
            rc, text = _run(session, f"cat {mark_path(session.host)} 2>/dev/null")
            return Outcome(rc == 0, printable_line(text)[:500] if rc == 0 else "")
        answers = self._each(nodes, read, read_only=True)
        return {n: (a.detail if a.ok else None) for n, a in answers.items()
                if a.ok or a.detail == ""}

    # ------------------------------------------------------------------ the protocol
    def out_now(self) -> OutNow:
        marks = self._marks(list(self.hosts))
        return OutNow(frozenset(n for n, m in marks.items() if m is not None), len(self.hosts))

    def taken_by_someone_else(self, nodes: list[str]) -> dict[str, str]:
        marks = self._marks(nodes)
        return {n: m for n, m in marks.items() if m is not None and not OURS.match(m)}

    def take_out(self, reasons: dict[str, str]) -> dict[str, Outcome]:
        return self._each(list(reasons), lambda s: self._mark(s, reasons[s.host.name]))

    def leave_out(self, reasons: dict[str, str]) -> dict[str, Outcome]:
        return self.take_out(reasons)

    def put_back(self, nodes: list[str]) -> dict[str, Outcome]:
        def unmark(session: HostSession) -> Outcome:
            rc, text = _run(session, f"rm -f {mark_path(session.host)}")
            return Outcome(rc == 0, "" if rc == 0 else printable_line(text)[:200])
        return self._each(nodes, unmark)

    @staticmethod
    def _mark(session: HostSession, reason: str) -> Outcome:
        path = mark_path(session.host)
        line = shlex.quote(printable_line(reason).replace("\n", " "))
        rc, text = _run(session, f"mkdir -p {remote_root(session.host.name)} && "
                                 f"printf '%s\\n' {line} > {path}.tmp && mv -f {path}.tmp {path}")
        return Outcome(rc == 0, "" if rc == 0 else printable_line(text)[:200])

    def evidence(self, nodes: list[str]) -> dict[str, Outcome]:
        def collect(session: HostSession) -> Outcome:
            session.gather_facts(session.var_facts)
            session.build_context()
            job = self._evidence or _collector(self.logs_dir)
            text, path = job(session)
            return Outcome(path is not None, printable_line(str(path) if path else text)[:300])
        return self._each(nodes, collect)

    def reset_gpu(self, nodes: list[str]) -> dict[str, Outcome]:
        return self._each(nodes, _reset)

    def reboot(self, nodes: list[str], reasons: dict[str, str], timeout_s: float) -> dict[str, Outcome]:
        def boot(session: HostSession) -> Outcome:
            status, message = reboot_and_wait(session, timeout_s)
            return Outcome(status is not StepStatus.FAILED, message)
        return self._each(nodes, boot)

    def revalidate(self, nodes: list[str], run_id: str) -> dict[str, Revalidation]:
        job = Validate(self.suite, self.logs_dir)
        hosts = [self.hosts[n] for n in nodes if n in self.hosts]
        self.run.execute(job, hosts)
        return {n: self._judge(n, run_id) for n in nodes}

    def _judge(self, node: str, run_id: str) -> Revalidation:
        path = run_dir(self.logs_dir, node, run_id) / RESULTS
        results, _ = read_results(path, str(path)) if path.exists() else (None, [])
        if results is None:
            return Revalidation(False, run_id, "validate: no results came home")
        run = LoggedRun(node, run_id, path.parent, results=results)
        if verdict(run) == PASS:
            return Revalidation(True, run_id)
        return Revalidation(False, run_id, finding_of(results), action_of(results) or "")

    def idle(self, nodes: list[str]) -> dict[str, bool]:
        """Whether no compute process holds any GPU of each node (gpureset's fact): a deferred
        reset waits for it (run.idle_nodes)."""
        def ask(session: HostSession) -> Outcome:
            rc, text = _run(session, COMPUTE_APPS, timeout=RESET_TIMEOUT_S)
            try:
                return Outcome(rc == 0 and not parse_compute_apps(text))
            except FactError:
                return Outcome(False)
        return {n: a.ok for n, a in self._each(nodes, ask, read_only=True).items()}

    def close(self) -> None:
        self.run.cache_link.close()
        self.reader.cache_link.close()


def _collector(logs_dir: Path) -> Callable[[HostSession], tuple[str, Optional[Path]]]:
    from ..evidence import CollectEvidence

    return CollectEvidence(logs_dir).run


def _reset(session: HostSession) -> Outcome:
    """The fact, then the reset as root when every GPU is idle; refused (escalate) otherwise."""
    rc, text = _run(session, COMPUTE_APPS, timeout=RESET_TIMEOUT_S)
    if rc == NO_SMI:
        return Outcome(False, "nvidia-smi not found", escalate=True)
    if rc != 0:
        return Outcome(False, f"nvidia-smi --query-compute-apps failed: {printable_line(text)[:200]}",
                       escalate=True)
    commands, why = plan_reset(text)
    if not commands:
        return Outcome(False, why, escalate=True)
    for command in commands:
        session.log.event(f"reset: {command}")
        rc, said = _run(session, command, timeout=RESET_TIMEOUT_S, become=True)
        if rc != 0:
            return Outcome(False, f"{command}: exit {rc}: {printable_line(said)[:200]}")
    return Outcome(True, "reset")


def _why(result: Optional[HostResult]) -> str:
    if result is None:
        return "no answer"
    if result.unreachable:
        return f"unreachable: {result.message}"
    failed = next((s for s in result.steps if s.status is StepStatus.FAILED), None)
    if failed is not None:
        return f"{failed.name}: {failed.message}"
    return result.message or "failed"


def route(context: RouteContext, hosts: list[Host]) -> tuple[SshTarget, list[str]]:
    """routes.TARGETS' "ssh" row: the hosts themselves are the nodes."""
    return SshTarget(context.run, hosts, context.logs_dir, context.suite), [h.name for h in hosts]
