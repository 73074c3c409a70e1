"""The Slurm route of `validate`: `SlurmValidate` runs on the login node's session (the engine
opens it like any host's) and validates the partition's nodes through the scheduler.

One run on a cluster, each step one command on the login node:
1. survey: who we are, the node list (`scontrol show nodes --json`, or `sinfo --json` where
   scontrol has no --json: 22.05), the inventory's hostlist expanded by Slurm itself;
2. plan: validate the partition's nodes that can run jobs; list the down ones and the ones
   drained by someone else with their state and reason; take back gpuprov's drained ones
   with --resume-passed;
3. gate (--drain-failed or --resume-passed): reserve the nodes for this run, resume gpuprov's;
4. one allocation (salloc), one srun step per node started together from the login node,
   the package on each step's stdin; lines streamed back per node;
5. each node's results into logs/<node>/<run>/ (as the SSH route: `gpuprov report` reads them);
6. gate: drain the nodes that failed, drop the reservation; 7. logs/<cluster>/<run>/slurm.json.
"""
from __future__ import annotations

import json
import secrets
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..config.slurm import SlurmSettings
from ..engine.jobs.logs import OUTCOME, summarize
from ..engine.jobs.validate import Validate, suite_args
from ..engine.results import HostResult, Outcome
from ..engine.session import HostSession
from ..errors import CommandTimeout, InputError, Interrupted, PullError
from ..fileio import write_atomic
from ..runfolder import CLUSTER_RECORD, run_dir
from ..transport.connection import COMMIT_FILE, LineSplitter, PullLimits, publish_pull
from . import gate
from .job import JobOutput, job_command, salloc_options, step_options, task_script, with_conf
from .nodes import Node, NodeListError, natural_order, parse_nodes, plan_nodes

RECORD = CLUSTER_RECORD
SURVEY_TIMEOUT_S = 120.0
GATE_TIMEOUT_S = 120.0


def survey_script(settings: SlurmSettings) -> str:
    """Who runs the jobs, the nodes' hostlist expanded, the node listing: one round trip."""
    lines = ['echo "@@user"; id -un']
    if settings.nodes:
        lines.append(f'echo "@@hostnames"; scontrol show hostnames {shlex.quote(settings.nodes)} '
                     '|| echo "@@failed"')
    # 23.02+ lists nodes one by one in scontrol's JSON; 22.05's scontrol has no --json
    lines.append('echo "@@nodes"; scontrol show nodes --json 2>/dev/null || sinfo --json')
    return with_conf(settings, "\n".join(lines) + "\n")


def split_sections(out: str) -> dict[str, str]:
    """`@@name` lines start sections: {name: the text up to the next one}."""
    sections: dict[str, list[str]] = {}
    current: Optional[list[str]] = None
    for line in out.splitlines():
        if line in ("@@user", "@@hostnames", "@@nodes", "@@failed"):
            current = sections.setdefault(line[2:], [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


@dataclass
class NodeRecord:
    """What the run learned of one validated node (for the recap and slurm.json)."""

    node: Node
    verdict: str = "not validated: the job did not start"
    ok: bool = False
    rc: Optional[int] = None
    step_rc: Optional[int] = None  # its srun step's exit status
    elapsed_s: float = 0.0
    validate_s: Optional[float] = None
    resumed: bool = False
    judged: bool = False     # its task ran (or its node failed): the verdict is the node's
    drained: str = ""        # the reason it was drained with
    gate_error: str = ""     # why draining it failed
    results: Optional[Path] = None

    def to_json(self) -> dict[str, Any]:
        return {"state_before": self.node.state, "reason_before": self.node.reason,
                "verdict": self.verdict, "ok": self.ok, "exit_status": self.rc,
                "srun_exit_status": self.step_rc,
                "elapsed_s": round(self.elapsed_s, 3),
                "validate_s": None if self.validate_s is None else round(self.validate_s, 3),
                "taken_back": self.resumed,
                "drained_with": self.drained or None, "drain_error": self.gate_error or None}


@dataclass
class ClusterState:
    rows: list[HostResult] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


class SlurmValidate:
    """`validate` on a selection holding clusters: hosts with `slurm:` go the scheduler route,
    the others to `inner` (the SSH route). Per-node rows are collected here for `with_nodes`
    (one entry per cluster, written by that cluster's worker only)."""

    outcome = OUTCOME

    def __init__(self, inner: Validate, drain_failed: bool = False, resume_passed: bool = False):
        self.inner = inner
        self.drain_failed = drain_failed
        self.resume_passed = resume_passed
        self._lock = threading.Lock()
        self._clusters: dict[str, ClusterState] = {}
        self._input_errors: list[InputError] = []

    def __call__(self, session: HostSession) -> None:
        if session.host.slurm is None:
            self.inner(session)
            return
        state = ClusterState()
        with self._lock:
            self._clusters[session.host.name] = state
        try:
            _ClusterRun(self, session, session.host.slurm, state).run()
        except _SlurmFailed as exc:
            session.conclude(Outcome(OUTCOME, f"not validated: {exc}", False))
            session.log.event(f"slurm: {exc}")
        except InputError as exc:
            with self._lock:
                self._input_errors.append(exc)
            session.conclude(Outcome(OUTCOME, f"bad input: {exc}", False))

    def run(self, session: HostSession) -> None:
        """The same after `provision`'s recipe (its context is built): a cluster's login node
        validates the nodes through Slurm, any other host over SSH."""
        if session.host.slurm is None:
            self.inner.run(session)
        else:
            self(session)

    def with_nodes(self, results: dict[str, HostResult]) -> dict[str, HostResult]:
        """The run's results with each cluster's node rows after its own; raises the first
        `InputError` a cluster found (an unknown partition or node: exit status 2)."""
        if self._input_errors:
            raise self._input_errors[0]
        out: dict[str, HostResult] = {}
        for name, result in results.items():
            out[name] = result
            state = self._clusters.get(name)
            for row in state.rows if state else []:
                key = row.name if row.name not in out else f"{name}/{row.name}"
                out[key] = row
        return out


class _ClusterRun:
    """One cluster's run, on its login node's session."""

    def __init__(self, job: SlurmValidate, session: HostSession, settings: SlurmSettings,
                 state: ClusterState):
        self.job, self.session, self.settings, self.state = job, session, settings, state
        self.name = session.host.name
        self.run_id = session.options.run_id
        self.logs_dir = job.inner.logs_dir
        self.reservation: Optional[str] = None
        self.records: dict[str, NodeRecord] = {}
        self.failure = ""  # why the Slurm side failed, once it did
        self.user = "root"
        self.srun_running = False  # the job started and did not end by itself (Ctrl-C, timeout)
        self.started = time.time()
        self.record: dict[str, Any] = state.record
        self.record.update(cluster=self.name, run=self.run_id, partition=settings.partition,
                           nodes_asked=settings.nodes, started=_stamp(self.started))

    # ------------------------------------------------------------------ the run
    def run(self) -> None:
        session = self.session
        if session.var_facts != set():  # the login node's facts, only when a var reads one
            session.gather_facts(session.var_facts)
        session.build_context()
        user, nodes, wanted = self.survey()
        plan = plan_nodes(nodes, self.settings.partition, wanted, self.job.resume_passed)
        # the node names join the host names in the first column of every line
        shown = [n.name for n in plan.validate] + [n.name for n, _ in plan.skipped + plan.down]
        session.reporter.width = max([session.reporter.width] + [len(n) for n in shown])
        self.record_skips(plan.skipped, plan.down)
        self.record["user"] = self.user = user
        if not plan.validate:
            self.conclude("no node of the partition can be validated now", False)
            return
        for node in plan.validate:
            self.records[node.name] = NodeRecord(node, resumed=node in plan.resume)
        try:
            if self.job.drain_failed or self.job.resume_passed:
                self.reserve(user, plan.validate, plan.resume)
            self.run_job([n.name for n in plan.validate])
        except _SlurmFailed as exc:
            self.failure = str(exc)
        except Interrupted:
            self.failure = "interrupted"
            for record in self.records.values():
                record.verdict = "not validated: interrupted"
            raise
        finally:
            self.gate_after()
            self.finish()

    def conclude(self, text: str, ok: bool) -> None:
        self.session.conclude(Outcome(OUTCOME, text, ok))
        self.record.update(outcome=text, ok=ok)
        self.write_record()

    def write_record(self) -> None:
        self.record["nodes"] = {name: r.to_json() for name, r in self.records.items()}
        self.record["ended"] = _stamp(time.time())
        path = run_dir(self.logs_dir, self.name, self.run_id) / RECORD
        write_atomic(path, json.dumps(self.record, indent=2) + "\n")

    def timeout(self) -> float:
        """The job's bound: the validate job's own, else the inventory's timeouts.command. No
        idle bound: a job may wait in the queue without a line for as long as it takes."""
        return self.job.inner.timeout or self.session.inventory.timeouts.command

    # ------------------------------------------------------------------ 1. survey
    def survey(self) -> tuple[str, dict[str, Node], Optional[list[str]]]:
        res = self.session.conn.run(survey_script(self.settings), timeout=SURVEY_TIMEOUT_S)
        self.session.log.command("slurm", "survey: id -un; scontrol show hostnames; "
                                 "scontrol show nodes --json || sinfo --json",
                                 res.rc, res.elapsed_s, "", res.err)
        parts = split_sections(res.out)
        if res.rc != 0 or "nodes" not in parts:
            raise _SlurmFailed(f"Slurm did not list its nodes on {self.name} (exit {res.rc}: "
                               f"{_last_line(res.err) or 'no output'}); is Slurm's client "
                               "installed there, and slurm.conf (conf:) right?")
        try:
            nodes = parse_nodes(parts["nodes"])
        except NodeListError as exc:
            raise _SlurmFailed(f"Slurm's node list on {self.name} cannot be read: {exc}") from None
        partitions = sorted({p for n in nodes.values() for p in n.partitions})
        settings = self.settings
        if settings.partition not in partitions:
            raise settings.position("partition").error(
                f"host '{self.name}': slurm.partition '{settings.partition}' is not a "
                f"partition of the cluster (it has: {', '.join(partitions) or 'none'})")
        wanted: Optional[list[str]] = None
        if settings.nodes:
            if "failed" in parts or not parts.get("hostnames", "").strip():
                raise settings.position("nodes").error(
                    f"host '{self.name}': slurm.nodes '{settings.nodes}' is not a hostlist "
                    f"Slurm reads ({_last_line(res.err) or 'no names'})")
            wanted = parts["hostnames"].split()
            unknown = [n for n in wanted if n not in nodes]
            outside = [n for n in wanted if n in nodes
                       and settings.partition not in nodes[n].partitions]
            if unknown or outside:
                what = (f"names nodes the cluster does not have: {', '.join(unknown[:10])}"
                        if unknown else f"names nodes outside partition "
                        f"'{settings.partition}': {', '.join(outside[:10])}")
                raise settings.position("nodes").error(f"host '{self.name}': slurm.nodes {what}")
        user = parts.get("user", "").strip() or "root"
        return user, nodes, wanted

    def record_skips(self, skipped: list[tuple[Node, str]], down: list[tuple[Node, str]]) -> None:
        reporter = self.session.reporter
        self.record["skipped"] = {n.name: {"state": n.state, "reason": n.reason, "why": why}
                                  for n, why in skipped}
        self.record["down"] = {n.name: {"state": n.state, "reason": n.reason} for n, _ in down}
        for node, why in skipped:
            reporter.warning(node.name, f"skipped: {why}")
            self.state.rows.append(HostResult(node.name, outcome=Outcome(
                OUTCOME, f"skipped: {why}", True)))
        for node, why in down:
            reporter.unreachable(node.name, f"down: {why}")
            self.state.rows.append(HostResult(node.name, unreachable=True,
                                              message=f"down: {why}", outcome=Outcome(
                                                  OUTCOME, f"not validated: down: {why}", False)))

    # ------------------------------------------------------------------ 3. gate before
    def reserve(self, user: str, nodes: list[Node], resume: list[Node]) -> None:
        name = gate.run_name(self.run_id)
        minutes = int(self.timeout() // 60) + 10
        script = gate.reserve_command(name, user, [n.name for n in nodes], minutes)
        if resume:
            script += " && " + gate.resume_command([n.name for n in resume])
        res = self.session.conn.run(with_conf(self.settings, script),
                                    become=self.session.host.become, timeout=GATE_TIMEOUT_S)
        self.session.log.command("slurm", script, res.rc, res.elapsed_s, res.out, res.err)
        if res.rc != 0:
            # the reservation may exist even though the resume failed: removed in gate_after
            self.reservation = name if "Reservation created" in res.out else None
            raise _SlurmFailed(f"could not reserve the nodes for this run (needs root or "
                               f"SlurmUser, or become: true): {_last_line(res.err + res.out)}")
        self.reservation = name
        self.record["reservation"] = name
        for node in resume:
            self.session.reporter.running(node.name, f"taken back for validation (was drained: "
                                                     f"{node.reason})")

    # ------------------------------------------------------------------ 4. the job
    def run_job(self, names: list[str]) -> None:
        session, settings = self.session, self.settings
        context = session.context
        python = str(context.get("validate_python") or "python3")
        args = suite_args(self.job.inner.suite, context)
        token = secrets.token_hex(8)
        job_name = gate.run_name(self.run_id)
        command = job_command(settings, names, task_script(token, python, args), job_name,
                              token, self.reservation)
        limits = PullLimits.from_env()
        reporter = session.reporter
        output = JobOutput(token, names, limits.archive_bytes,
                           on_start=lambda node, job_id: reporter.running(
                               node, f"running (job {job_id or '?'})"),
                           on_line=reporter.output,
                           on_srun=lambda line: reporter.output(self.name, line))
        splitters = {"stdout": LineSplitter(output.stdout), "stderr": LineSplitter(output.stderr)}
        for name in names:
            reporter.running(name, f"pending: validate ({self.job.inner.suite}) through Slurm, "
                                   f"partition {settings.partition}")
        self.record["salloc"] = " ".join(salloc_options(settings, names, job_name,
                                                         self.reservation))
        self.record["srun"] = " ".join(step_options(settings)) + " --nodelist=NODE (one per node)"
        started = time.monotonic()
        rc: Optional[int] = None
        self.srun_running = True
        try:
            res = session.conn.run(with_conf(settings, command), stdin=self.job.inner.package,
                                   timeout=self.timeout(),
                                   on_output=lambda stream, text: splitters[stream](stream, text))
            rc = res.rc
            self.srun_running = False
        except CommandTimeout as exc:
            output.messages.append(f"gpuprov: {exc}")
        finally:
            for splitter in splitters.values():
                splitter.flush()
            session.log.command("slurm", f"{self.record['salloc']}; {self.record['srun']} (validate, "
                                f"{len(self.job.inner.package)} bytes on stdin)", rc,
                                time.monotonic() - started, "", "\n".join(output.messages))
        job_ids = sorted({t.job_id for t in output.by_node.values() if t.job_id})
        self.record.update(job_id=job_ids[0] if len(job_ids) == 1 else job_ids,
                           salloc_exit_status=rc, salloc_messages=output.messages,
                           job_s=round(time.monotonic() - started, 3))
        try:
            for name in names:
                self.collect(name, output, rc)
        finally:
            output.close()

    # ------------------------------------------------------------------ 5. results home
    def collect(self, name: str, output: JobOutput, rc: Optional[int]) -> None:
        record = self.records[name]
        task = output.by_node.get(name)
        lost = name in output.failed_nodes
        record.judged = task is not None or lost
        record.step_rc = output.step_rc.get(name)
        said = output.node_messages.get(name) or output.messages
        if task is None:
            why = ("the node failed before its task started" if lost else
                   f"its task never started (srun exit {record.step_rc}, salloc exit {rc}: "
                   f"{said[-1] if said else 'no message'})")
            record.verdict = f"not validated: {why}"
        elif task.unpack_failed:
            record.verdict = "not validated: the package did not unpack on the node"
        else:
            record.rc, record.validate_s = task.rc, task.validate_s
            archive = task.archive()
            record.elapsed_s = (task.ended or time.monotonic()) - task.started
            if archive is not None and task.size == 0:
                record.verdict = f"not validated: validate left no results (exit {task.rc})"
            elif archive is None:
                why = task.refused or (f"the node failed mid-job (srun: {said[-1]})"
                                       if lost and said else
                                       f"its results did not come back whole (srun exit "
                                       f"{record.step_rc})")
                record.verdict = f"not validated: {why}"
            else:
                dest = run_dir(self.logs_dir, name, self.run_id)
                try:
                    publish_pull(archive, dest)
                except PullError as exc:
                    record.verdict = f"not validated: {exc}"
                else:
                    record.results = dest / COMMIT_FILE
                    record.verdict, record.ok = summarize(record.results, task.rc)
        self.session.reporter.output(name, f"[validate] {record.verdict}")

    # ------------------------------------------------------------------ 6. gate after
    def gate_after(self) -> None:
        """Drain the nodes that did not pass (all of them with --drain-failed; those taken
        back in any case), then drop the reservation. Runs even when the run was interrupted
        (commands not cancellable): a node taken back never stays open unvalidated. A node
        whose task never ran (srun refused, Ctrl-C) was not judged: it is not drained for
        it, and one taken back gets its old reason again."""
        if self.srun_running:
            self._cancel_job()
        drains: dict[str, str] = {}
        for name, record in self.records.items():
            if record.ok or not (self.job.drain_failed or record.resumed):
                continue
            if record.judged:
                drains[name] = gate.drain_reason(self.run_id, record.results, record.verdict)
            elif record.resumed:
                drains[name] = record.node.reason
        if drains:
            script = gate.each_node_command({n: gate.drain_command(n, r)
                                             for n, r in drains.items()})
            answers = self._admin(script)
            for name, reason in drains.items():
                rc, said = answers.get(name, (1, "no answer"))
                if rc == 0:
                    self.records[name].drained = reason
                    self.session.reporter.warning(name, f"drained: {reason}")
                else:
                    self.records[name].gate_error = said or f"scontrol exit {rc}"
                    self.session.reporter.warning(name, f"could not drain: {said}")
        if self.reservation:
            self.unreserve(self.reservation)

    def _cancel_job(self) -> None:
        script = with_conf(self.settings, gate.cancel_command(gate.run_name(self.run_id),
                                                              self.user))
        try:
            res = self.session.conn.run(script, timeout=GATE_TIMEOUT_S, cancellable=False)
        except CommandTimeout as exc:
            self.session.log.event(f"slurm: scancel {exc}")
            return
        self.session.log.command("slurm", script, res.rc, res.elapsed_s, res.out, res.err)
        self.record["job_cancelled"] = res.rc == 0

    def unreserve(self, name: str) -> None:
        """Delete the run's reservation. Slurm refuses while a job of it still runs (a
        cancelled srun's job takes a moment to end): tried again for up to GATE_TIMEOUT_S."""
        deadline = time.monotonic() + GATE_TIMEOUT_S
        while True:
            rc, said = self._admin(gate.each_node_command(
                {"reservation": gate.unreserve_command(name)})).get("reservation", (1, ""))
            if rc == 0 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        if rc != 0:
            self.session.reporter.warning(self.name, f"could not delete reservation {name} "
                                                     f"({said}); it ends by itself")
        self.record["reservation_deleted"] = rc == 0

    def _admin(self, script: str) -> dict[str, tuple[int, str]]:
        try:
            res = self.session.conn.run(with_conf(self.settings, script),
                                        become=self.session.host.become,
                                        timeout=GATE_TIMEOUT_S, cancellable=False)
        except CommandTimeout as exc:
            self.session.log.event(f"slurm gate: {exc}")
            return {}
        self.session.log.command("slurm", script, res.rc, res.elapsed_s, res.out, res.err)
        return gate.parse_each_node(res.out)

    # ------------------------------------------------------------------ 7. record
    def finish(self) -> None:
        rows = self.state.rows
        for name, record in self.records.items():
            text = record.verdict
            if record.drained:
                text += " (drained)"
            elif record.resumed and record.ok:
                text += " (resumed)"
            rows.append(HostResult(name, elapsed_s=record.elapsed_s,
                                   outcome=Outcome(OUTCOME, text, record.ok)))
        rows.sort(key=lambda r: natural_order(r.name))
        passed = sum(r.ok for r in self.records.values())
        parts = [f"{len(self.records)} node(s) validated through Slurm: {passed} passed"]
        if len(self.records) - passed:
            parts.append(f"{len(self.records) - passed} not passed")
        skipped = self.record.get("skipped") or {}
        down = self.record.get("down") or {}
        if skipped:
            parts.append(f"{len(skipped)} skipped")
        if down:
            parts.append(f"{len(down)} down")
        drained = [n for n, r in self.records.items() if r.drained]
        if drained:
            parts.append(f"drained {','.join(drained)}")
        if not self.failure and not any(r.judged for r in self.records.values()):
            messages = self.record.get("salloc_messages") or []
            self.failure = (f"Slurm started no task (salloc exit "
                            f"{self.record.get('salloc_exit_status')}: "
                            f"{messages[-1] if messages else 'no message'})")
        if self.failure:
            self.conclude(f"not validated: {self.failure}", False)
            return
        ok = (self.record.get("salloc_exit_status") is not None
              and not any(r.gate_error for r in self.records.values()))
        self.conclude(", ".join(parts), ok)


class _SlurmFailed(Exception):
    """The cluster could not do what was asked: the login node's row fails with this."""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
