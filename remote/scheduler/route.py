"""The scheduler route of `validate`: `ClusterValidate` runs on a cluster's login node (the
engine opens its session like any host's) and validates the cluster's nodes through the
scheduler its inventory entry names; every other host goes the SSH route.

One run on a cluster, whatever the scheduler (`base.Cluster` says what each step asks of it):
1. list the nodes; 2. plan: validate the ones that can run work, list the down ones and the
ones drained by someone else with their state and reason, take back gpuprov's drained ones with
--resume-passed; 3. with --drain-failed or --resume-passed: hold the nodes for this run and
resume gpuprov's; 4. validate the nodes, each one's results into logs/<node>/<run>/ (as the SSH
route's: `gpuprov report` reads them), beside the route's record that its validation was started
and how it ended (validation.json: a judged node without a verdict fails in its history);
5. drain the nodes that did not pass (all with --drain-failed, those taken back in any case),
release the hold; 6. the run's record in
logs/<cluster>/<run>/, a row per node in the recap.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..engine.jobs import Job
from ..engine.jobs.logs import OUTCOME
from ..engine.jobs.validate import Attempt, Validate
from ..engine.results import HostResult, Outcome
from ..engine.session import HostSession
from ..ground.errors import InputError, Interrupted
from ..ground.fileio import write_atomic
from ..ground.runfolder import run_dir
from .base import AfterStep, Cluster, NodeRecord, NodeView, RouteFailed, RunContext, Scheduler, Sweep, natural_order

# Threads writing the nodes' validation.json records (one file each, before and after the job):
# chosen, as the file system's latency is most of it.
ATTEMPT_THREADS = 4


@dataclass
class ClusterState:
    rows: list[HostResult] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


class ClusterValidate:
    """`validate` on a selection holding clusters: a host whose inventory entry names a
    scheduler of `schedulers` goes that scheduler's route, the others to `ssh_job`: the job
    such a host runs when selected alone (`validate`'s SSH route with its stack record), else
    `inner` (the SSH route; after `provision`'s recipe, whose job records the stack itself).
    Per-node rows are collected here for `with_nodes` (one entry per cluster, written by that
    cluster's worker only)."""

    outcome = OUTCOME

    def __init__(self, inner: Validate, schedulers: Mapping[str, Scheduler],
                 drain_failed: bool = False, resume_passed: bool = False,
                 ssh_job: Optional[Job] = None, sweep: Optional[Sweep] = None,
                 after_step: Optional[Callable[[str], Optional[AfterStep]]] = None):
        self.inner = inner
        # validate --distributed: by login node, the step after the validation's (base.AfterStep)
        self.after_step = after_step
        self.sweep = sweep  # validate --sweep (remote/scheduler/slurm/sweep.py for Slurm)
        self.ssh_job: Job = ssh_job if ssh_job is not None else inner
        self.schedulers = schedulers
        self.drain_failed = drain_failed
        self.resume_passed = resume_passed
        self._lock = threading.Lock()
        self._clusters: dict[str, ClusterState] = {}
        self._input_errors: list[InputError] = []

    def __call__(self, session: HostSession) -> None:
        entry = session.host.scheduler
        if entry is None:
            self.ssh_job(session)
            return
        state = ClusterState()
        with self._lock:
            self._clusters[session.host.name] = state
        try:
            _ClusterRun(self, session, self.schedulers[entry.key], entry.settings, state).run()
        except RouteFailed as exc:
            session.conclude(Outcome(OUTCOME, f"not validated: {exc}", False))
            session.log.event(f"{entry.key}: {exc}")
        except InputError as exc:
            with self._lock:
                self._input_errors.append(exc)
            session.conclude(Outcome(OUTCOME, f"bad input: {exc}", False))

    def run(self, session: HostSession) -> None:
        """The same after `provision`'s recipe (its context is built): a cluster's login node
        validates the nodes through its scheduler, any other host over SSH."""
        if session.host.scheduler is None:
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

    def __init__(self, job: ClusterValidate, session: HostSession, scheduler: Scheduler,
                 settings: Any, state: ClusterState):
        self.job, self.session, self.scheduler, self.state = job, session, scheduler, state
        self.name = session.host.name
        self.records: dict[str, NodeRecord] = {}
        self.failure = ""  # why the scheduler's side failed, once it did
        self.record: dict[str, Any] = state.record
        self.record.update(cluster=self.name, run=session.options.run_id,
                           scheduler=scheduler.key, started=_stamp(time.time()))
        self.context = RunContext(session, job.inner, self.record, sweep=job.sweep,
                                  after_step=job.after_step(self.name) if job.after_step else None)
        self.cluster: Cluster = scheduler.open(settings, self.context)

    def run(self) -> None:
        session = self.session
        if session.var_facts != set():  # the login node's facts, only when a var reads one
            session.gather_facts(session.var_facts)
        session.build_context()
        plan = self.cluster.plan(self.cluster.list_nodes(), self.job.resume_passed)
        # the node names join the host names in the first column of every line
        shown = [n.name for n in plan.validate] + [n.name for n, _ in plan.skipped + plan.down]
        session.reporter.width = max([session.reporter.width] + [len(n) for n in shown])
        self.record_skips(plan.skipped, plan.down)
        if not plan.validate:  # a sweep with nothing left to take is done, not failed
            swept = self.context.sweep is not None
            self.conclude(f"no node of the cluster {'needs a sweep' if swept else 'can be validated'} "
                          "now", swept)
            return
        for node in plan.validate:
            self.records[node.name] = NodeRecord(node, resumed=node in plan.resume)
        attempts: dict[str, Attempt] = {}
        pool = ThreadPoolExecutor(max_workers=ATTEMPT_THREADS, thread_name_prefix="attempt")
        try:
            if self.job.drain_failed or self.job.resume_passed:
                self.cluster.resume(plan.resume, plan.validate)
                for node in plan.resume:
                    session.reporter.running(node.name, f"taken back for validation (was "
                                                        f"drained: {node.reason})")
            # the control side's record that each node's validation was started: a node that
            # hangs or crashes then fails in its history (issue 41). Written by a few threads
            # while the scheduler grants the job and starts its tasks, not before it: about
            # 1 ms a file, 0.14 s for 128 nodes ahead of the job on this machine, where
            # Slurm's grant and launch take longer (bench.slurm_overhead). Every record is
            # written before any node's end is (`end_attempts` waits for them).
            started = {name: pool.submit(Attempt, self.context.node_folder(name))
                       for name in self.records}
            try:
                self.cluster.validate(self.records)
            finally:
                attempts = {name: future.result() for name, future in started.items()}
        except RouteFailed as exc:
            self.failure = str(exc)
        except Interrupted:
            self.failure = "interrupted"
            for record in self.records.values():
                record.verdict = "not validated: interrupted"
            raise
        finally:
            try:
                pool.shutdown()
                self.end_attempts(attempts)
                self.gate_after()
            finally:
                self.cluster.release()
                self.finish()

    def end_attempts(self, attempts: dict[str, Attempt]) -> None:
        """How each node's validation ended, in its record: a node whose task never ran (the
        scheduler refused, Ctrl-C) was not judged, and its missing verdict counts for nothing;
        a judged node without results (lost, timed out, its archive refused) failed."""
        def end(name: str) -> None:
            record = self.records[name]
            results = record.results is not None
            why = "" if results else record.verdict.removeprefix("not validated: ")
            attempts[name].end(record.verdict, why,
                               counts=record.judged and self.failure != "interrupted",
                               rc=record.rc)

        with ThreadPoolExecutor(max_workers=ATTEMPT_THREADS, thread_name_prefix="attempt") as pool:
            list(pool.map(end, attempts))

    def record_skips(self, skipped: list[tuple[NodeView, str]],
                     down: list[tuple[NodeView, str]]) -> None:
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

    def gate_after(self) -> None:
        """Drain the nodes that did not pass (all of them with --drain-failed; those taken
        back in any case). Runs even when the run was interrupted: a node taken back never
        stays open unvalidated. A node whose task never ran (the scheduler refused, Ctrl-C) was
        not judged: it is drained only when it was taken back, with the reason it had."""
        drains = {name: record for name, record in self.records.items()
                  if not record.ok and (record.resumed or (self.job.drain_failed and record.judged))}
        if not drains:
            return
        self.cluster.drain(drains)
        for name, record in drains.items():
            if record.drained:
                self.session.reporter.warning(name, f"drained: {record.drained}")
            else:
                self.session.reporter.warning(name, f"could not drain: {record.gate_error}")

    def conclude(self, text: str, ok: bool) -> None:
        self.session.conclude(Outcome(OUTCOME, text, ok))
        self.record.update(outcome=text, ok=ok)
        self.record["nodes"] = {name: r.to_json() for name, r in self.records.items()}
        self.record["ended"] = _stamp(time.time())
        path = run_dir(self.job.inner.logs_dir, self.name, self.context.run_id) / self.scheduler.record
        write_atomic(path, json.dumps(self.record, indent=2) + "\n")

    def node_rows(self) -> None:
        """A row per validated node in the recap, its verdict marked drained or resumed, all
        the cluster's rows in natural order."""
        rows = self.state.rows
        for name, record in self.records.items():
            text = record.verdict
            if record.drained:
                text += " (drained)"
            elif record.resumed and record.ok:
                text += " (resumed)"
            rows.append(HostResult(name, elapsed_s=record.elapsed_s,
                                   outcome=Outcome(OUTCOME, text, record.ok or record.preempted,
                                                   skipped=record.preempted)))
        rows.sort(key=lambda r: natural_order(r.name))

    def summary(self) -> str:
        """The login node's outcome: how many nodes passed, did not, were skipped, were down,
        and which were drained."""
        passed = sum(r.ok for r in self.records.values())
        preempted = sum(r.preempted for r in self.records.values())
        parts = [f"{len(self.records)} node(s) validated through {self.scheduler.noun}: "
                 f"{passed} passed"]
        counts = (("not passed", len(self.records) - passed - preempted),
                  ("preempted", preempted),
                  ("skipped", len(self.record.get("skipped") or {})),
                  ("down", len(self.record.get("down") or {})))
        parts += [f"{count} {what}" for what, count in counts if count]
        drained = [n for n, r in self.records.items() if r.drained]
        if drained:
            parts.append(f"drained {','.join(drained)}")
        return ", ".join(parts)

    def finish(self) -> None:
        self.node_rows()
        summary = self.summary()
        if not self.failure and not any(r.judged or r.preempted for r in self.records.values()):
            self.failure = self.context.no_task or f"{self.scheduler.noun} started no task"
        if self.failure:
            self.conclude(f"not validated: {self.failure}", False)
            return
        ok = (not self.context.incomplete
              and not any(r.gate_error for r in self.records.values()))
        self.conclude(summary, ok)


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
