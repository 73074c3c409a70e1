"""Slurm as a `base.Cluster`: `SlurmCluster` drives one run on the login node's session, each
step one command there:
1. survey (`list_nodes`): who we are, the node list (`scontrol show nodes --json`, or `sinfo
   --json` where scontrol has no --json: 22.05), the inventory's hostlist expanded by Slurm;
   asked again for a few seconds while a node only misses a ping (NOT_RESPONDING, not DOWN);
2. `plan`: validate the partition's nodes that can run jobs; list the down ones and the ones
   drained by someone else with their state and reason; take back gpuprov's drained ones
   with --resume-passed;
3. `resume` (--drain-failed or --resume-passed): reserve the nodes for this run, resume
   gpuprov's inside the reservation;
4. `validate`: one allocation (salloc), one srun step whose tasks are the nodes, the package
   on the step's stdin, lines streamed back per node; each node's results into
   logs/<node>/<run>/;
5. `drain` the nodes that failed, `release`: drop the reservation. The run's record is
   logs/<cluster>/<run>/slurm.json.
"""
from __future__ import annotations

import secrets
import shlex
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional, Sequence

from ...container import Container
from ...container.slurm import PYTHON, SlurmContainer, Unsupported, choose, found, probe_script
from ...engine.jobs.validate import suite_args
from ...ground.errors import CommandTimeout
from ...transport.connection import LineSplitter, PullLimits
from ..base import NodeRecord, NodeView, Plan, RouteFailed, RunContext, list_until_answered
from . import gate
from .hostlist import hostnames_lines, last_line, split_sections, wanted_nodes
from .job import JobOutput, Task, launch_step, salloc_options, step_options, task_script, with_conf
from .late import CONFIG_SCRIPT, late_wait
from .nodes import Node, NodeListError, parse_nodes, plan_nodes
from .settings import SlurmSettings

SURVEY_TIMEOUT_S = 120.0
GATE_TIMEOUT_S = 120.0
STORE_THREADS = 4  # chosen: file-system latency overlaps; the work itself is small


def survey_script(settings: SlurmSettings) -> str:
    """Who runs the jobs, the nodes' hostlist expanded, the node listing: one round trip."""
    lines = ['echo "@@user"; id -un', *hostnames_lines(settings)]
    # 23.02+ lists nodes one by one in scontrol's JSON; 22.05's scontrol has no --json
    lines.append('echo "@@nodes"; scontrol show nodes --json 2>/dev/null || sinfo --json')
    return with_conf(settings, "\n".join(lines) + "\n")


def _timeline(output: JobOutput, started: float) -> dict[str, float]:
    """When, from the job's start, the first and the last task said they started, and the
    last task's results were whole (seconds; for the record and bench.slurm_overhead)."""
    starts = [t.started - started for t in output.by_node.values() if t.started]
    ends = [t.ended - started for t in output.by_node.values() if t.ended]
    times = {"first_task_s": min(starts, default=None), "last_task_s": max(starts, default=None),
             "last_results_s": max(ends, default=None)}
    return {key: round(value, 3) for key, value in times.items() if value is not None}


class EarlyStores:
    """Each node's results stored as soon as they are whole (its end marker), by
    STORE_THREADS threads, while slower nodes still run: storing 128 nodes' results one after
    the other once the step had ended was most of the route's own time (bench.slurm_overhead).
    `wait(node)`: True once that node's were stored early (a failure to store raised there)."""

    def __init__(self, records: dict[str, NodeRecord], folder: Callable[[str], Path]):
        self.records, self.folder = records, folder
        self.pool = ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="store")
        self.stored: dict[str, Future[None]] = {}

    def __call__(self, task: Task) -> None:
        archive = task.archive()
        record = self.records.get(task.node)
        if archive is None or task.size == 0 or record is None or task.node in self.stored:
            return
        self.stored[task.node] = self.pool.submit(record.store, archive, task.rc,
                                                  self.folder(task.node))

    def wait(self, node: str) -> bool:
        future = self.stored.get(node)
        if future is None:
            return False
        future.result()
        return True

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class SlurmCluster:
    """One run's view of a Slurm cluster (`base.Cluster`), on its login node's session."""

    def __init__(self, settings: SlurmSettings, context: RunContext):
        self.settings, self.context = settings, context
        self.session = context.session
        self.name = self.session.host.name
        self.run_id = context.run_id
        self.reservation: Optional[str] = None
        self.user = "root"
        self.wanted: Optional[list[str]] = None  # the inventory's hostlist, expanded by Slurm
        self.srun_running = False  # the job started and did not end by itself (Ctrl-C, timeout)
        self.record = context.record
        self.record.update(partition=settings.partition, nodes_asked=settings.nodes)

    # ------------------------------------------------------------------ 1. survey, 2. plan
    def list_nodes(self) -> list[Node]:
        self.user, nodes, self.wanted = list_until_answered(
            self.survey, lambda surveyed: self._late(surveyed[1], surveyed[2]),
            lambda text: self.session.reporter.running(self.name, f"{text} (NOT_RESPONDING)"),
            "Slurm", self.session.sleep, self._late_wait)
        self.record["user"] = self.user
        return list(nodes.values())

    def _late(self, nodes: dict[str, Node], wanted: Optional[list[str]]) -> list[str]:
        """The nodes this run would validate but for a missed ping (NOT_RESPONDING and no
        other state that keeps jobs off; not drained by someone else)."""
        keep = set(wanted) if wanted is not None else None
        return [n.name for n in nodes.values()
                if self.settings.partition in n.partitions
                and (keep is None or n.name in keep) and n.late
                and (not n.drained or n.drained_by_gpuprov)]

    def _late_wait(self) -> tuple[float, str]:
        """How long to wait for late nodes: the cluster's SlurmdTimeout, capped (late.py)."""
        try:
            res = self.session.conn.run(with_conf(self.settings, CONFIG_SCRIPT + "\n"),
                                        timeout=SURVEY_TIMEOUT_S)
        except CommandTimeout:
            return late_wait("")
        self.session.log.command("slurm", CONFIG_SCRIPT, res.rc, res.elapsed_s, "", res.err)
        return late_wait(res.out if res.rc == 0 else "")

    def plan(self, nodes: Sequence[NodeView], resume_passed: bool) -> Plan:
        slurm_nodes = {n.name: n for n in nodes if isinstance(n, Node)}
        return plan_nodes(slurm_nodes, self.settings.partition, self.wanted, resume_passed)

    def survey(self) -> tuple[str, dict[str, Node], Optional[list[str]]]:
        res = self.session.conn.run(survey_script(self.settings), timeout=SURVEY_TIMEOUT_S)
        self.session.log.command("slurm", "survey: id -un; scontrol show hostnames; "
                                 "scontrol show nodes --json || sinfo --json",
                                 res.rc, res.elapsed_s, "", res.err)
        parts = split_sections(res.out)
        if res.rc != 0 or "nodes" not in parts:
            raise RouteFailed(f"Slurm did not list its nodes on {self.name} (exit {res.rc}: "
                               f"{last_line(res.err) or 'no output'}); is Slurm's client "
                               "installed there, and slurm.conf (conf:) right?")
        try:
            nodes = parse_nodes(parts["nodes"])
        except NodeListError as exc:
            raise RouteFailed(f"Slurm's node list on {self.name} cannot be read: {exc}") from None
        partitions = sorted({p for n in nodes.values() for p in n.partitions})
        settings = self.settings
        if settings.partition not in partitions:
            raise settings.position("partition").error(
                f"host '{self.name}': slurm.partition '{settings.partition}' is not a "
                f"partition of the cluster (it has: {', '.join(partitions) or 'none'})")
        wanted = wanted_nodes(settings, self.name, parts,
                              {name: node.partitions for name, node in nodes.items()})
        user = parts.get("user", "").strip() or "root"
        return user, nodes, wanted

    # ------------------------------------------------------------------ 3. gate before
    def resume(self, nodes: list[NodeView], hold: list[NodeView]) -> None:
        """Reserve `hold` for the run's user, then resume `nodes` inside the reservation."""
        name = gate.run_name(self.run_id)
        minutes = int(self.context.timeout() // 60) + 10
        script = gate.reserve_command(name, self.user, [n.name for n in hold], minutes)
        if nodes:
            script += " && " + gate.resume_command([n.name for n in nodes])
        res = self.session.conn.run(with_conf(self.settings, script),
                                    become=self.session.host.become, timeout=GATE_TIMEOUT_S)
        self.session.log.command("slurm", script, res.rc, res.elapsed_s, res.out, res.err)
        if res.rc != 0:
            # the reservation may exist even though the resume failed: removed in release
            self.reservation = name if "Reservation created" in res.out else None
            raise RouteFailed(f"could not reserve the nodes for this run (needs root or "
                               f"SlurmUser, or become: true): {last_line(res.err + res.out)}")
        self.reservation = name
        self.record["reservation"] = name

    # ------------------------------------------------------------------ 4. the job
    def validate(self, records: dict[str, NodeRecord]) -> None:
        """One allocation, one step over all the nodes; a job still running when this ends
        (Ctrl-C, the timeout) is cancelled before any node is drained."""
        try:
            self.run_job(records)
        finally:
            if self.srun_running:
                self._cancel_job()

    def run_job(self, records: dict[str, NodeRecord]) -> None:
        session, settings, inner = self.session, self.settings, self.context.validate
        names = list(records)
        python = str(session.context.get("validate_python") or "python3")
        args = suite_args(inner.suite, session.context)
        token = secrets.token_hex(8)
        job_name = gate.run_name(self.run_id)
        package = inner.zip_package
        script, step_extra = task_script(token, python, args, len(package)), []
        if inner.container is not None:  # `--container`: the step's tasks run in the image
            route = self.container_route(inner.container)
            script = route.task(task_script(token, PYTHON, args, len(package)))
            step_extra = route.srun_args
        after = self.context.after_step  # `validate --distributed`: a second step, held for
        hold_s = after.hold_s if after is not None else 0.0
        command = launch_step(settings, names, script, job_name, token, self.reservation,
                              step_extra, hold_s)
        limits = PullLimits.from_env()
        reporter = session.reporter
        stores = EarlyStores(records, self.context.node_folder)
        output = JobOutput(token, names, limits.archive_bytes,
                           on_start=lambda node, job_id: reporter.running(
                               node, f"running (job {job_id or '?'})"),
                           on_line=reporter.output,
                           on_srun=lambda line: reporter.output(self.name, line),
                           on_whole=stores,
                           on_hold=None if after is None else
                           lambda folder: self.after_step(folder, records, stores, output))
        splitters = {"stdout": LineSplitter(output.stdout), "stderr": LineSplitter(output.stderr)}
        for name in names:
            reporter.running(name, f"pending: validate ({inner.suite}) through Slurm, "
                                   f"partition {settings.partition}")
        self.record["salloc"] = " ".join(salloc_options(settings, names, job_name,
                                                         self.reservation))
        self.record["srun"] = " ".join(step_options(settings, len(names), step_extra))
        started = time.monotonic()
        rc: Optional[int] = None
        self.srun_running = True
        try:
            res = session.conn.run(with_conf(settings, command), stdin=package,
                                   timeout=self.context.timeout() + hold_s, streamed=True,
                                   on_output=lambda stream, text: splitters[stream](stream, text))
            rc = res.rc
            self.record["job_stdout_bytes"] = res.stdout_bytes
            self.srun_running = False
        except CommandTimeout as exc:
            output.messages.append(f"gpuprov: {exc}")
        finally:
            for splitter in splitters.values():
                splitter.flush()
            session.log.command("slurm", f"{self.record['salloc']}; {self.record['srun']} (validate, "
                                f"{len(package)} bytes on stdin)", rc,
                                time.monotonic() - started, "", "\n".join(output.messages))
        job_ids = sorted({t.job_id for t in output.by_node.values() if t.job_id})
        self.record.update(job_id=job_ids[0] if len(job_ids) == 1 else job_ids,
                           salloc_exit_status=rc, srun_exit_status=output.step_rc,
                           salloc_messages=output.messages,
                           job_s=round(time.monotonic() - started, 3),
                           **_timeline(output, started))
        self.context.incomplete = rc is None
        self.context.no_task = (f"Slurm started no task (salloc exit {rc}: "
                                f"{output.messages[-1] if output.messages else 'no message'})")
        try:
            for name, record in records.items():
                self.collect(name, record, output, rc, stores)
        finally:
            stores.close()
            output.close()

    def after_step(self, folder: str, records: dict[str, NodeRecord], stores: "EarlyStores",
                   output: JobOutput) -> None:
        """The allocation held after the validation step (`hold_lines`): the run's
        `AfterStep` on the nodes whose results are stored, its steps run in the same job
        (`SLURM_JOB_ID`: srun(1) "--jobid") over a second connection to the login node, then
        the hold released (`go` in its folder)."""
        after = self.context.after_step
        job_ids = {t.job_id for t in output.by_node.values() if t.job_id}
        conn = self.session._connect(self.session.host)  # noqa: SLF001
        try:
            def run(command: str, timeout: float, stdin: bytes) -> tuple[int, str, str]:
                script = with_conf(self.settings, f"SLURM_JOB_ID={job}; "
                                   f"export SLURM_JOB_ID\n{command}")
                res = conn.run(script, timeout=timeout, stdin=stdin)
                self.session.log.command("slurm", command, res.rc, res.elapsed_s, "", res.err)
                return res.rc, res.out, res.err

            if len(job_ids) != 1:
                self.session.reporter.note(f"distributed: not run: the validation's tasks named "
                                           f"{len(job_ids)} job ids, not one")
            elif after is not None:
                job = next(iter(job_ids))
                for name in records:
                    stores.wait(name)
                after(self.context, records, run)
        finally:
            try:
                conn.run(f"touch {shlex.quote(folder)}/go", timeout=GATE_TIMEOUT_S,
                         cancellable=False)
            finally:
                conn.close()

    def container_route(self, container: Container) -> SlurmContainer:
        """The cluster's container support for `container`, probed on the login node;
        `RouteFailed` with the reason when it has none that fits."""
        try:
            res = self.session.conn.run(with_conf(self.settings, probe_script()),
                                        timeout=self.session.inventory.timeouts.command)
            route = choose(container, found(res.out))
        except (Unsupported, CommandTimeout) as exc:
            raise RouteFailed(f"--container: {exc}") from None
        self.record["container"] = {"image": container.image, "kind": route.kind}
        return route

    # ------------------------------------------------------------------ 5. results home
    def collect(self, name: str, record: NodeRecord, output: JobOutput,
                rc: Optional[int], stores: "EarlyStores") -> None:
        task = output.by_node.get(name)
        lost = name in output.failed_nodes
        record.judged = task is not None or lost
        step_rc = output.step_rc
        said = output.node_messages.get(name) or output.messages
        if output.node_messages.get(name):
            record.extra["srun_said"] = output.node_messages[name][-1]
        if task is None:
            why = ("the node failed before its task started" if lost else
                   f"its task never started (srun exit {step_rc}, salloc exit {rc}: "
                   f"{said[-1] if said else 'no message'})")
            record.verdict = f"not validated: {why}"
        elif task.unpack_failed:
            record.verdict = "not validated: the package did not unpack on the node"
        elif self.context.validate.container is not None and \
                self.context.validate.container.refusal(task.rc):  # no python3 in the image
            record.verdict = f"not validated: {self.context.validate.container.refusal(task.rc)}"
        else:
            record.rc, record.validate_s = task.rc, task.validate_s
            record.extra["results_bytes"] = task.size
            record.elapsed_s = (task.ended or time.monotonic()) - task.started
            if not stores.wait(name):
                self._results(name, record, task, (f"the node failed mid-job (srun: {said[-1]})"
                                                   if lost and said else
                                                   f"its results did not come back whole "
                                                   f"(srun exit {step_rc})"))
        self.session.reporter.output(name, f"[validate] {record.verdict}")

    def _results(self, name: str, record: NodeRecord, task: Task, cut_short: str) -> None:
        """A node's results stored, or why there are none (`cut_short`: why they did not
        come whole, unless they were refused)."""
        archive = task.archive()
        if archive is not None and task.size == 0:
            record.verdict = f"not validated: validate left no results (exit {task.rc})"
        elif archive is None:
            record.verdict = f"not validated: {task.refused or cut_short}"
        else:
            record.store(archive, task.rc, self.context.node_folder(name))

    # ------------------------------------------------------------------ 6. gate after
    def drain(self, records: dict[str, NodeRecord]) -> None:
        """Drain each node with `gpuprov <run>: <check>: <finding>` (gate.drain_reason); one
        whose task never ran, with the reason it had before it was taken back. Commands not
        cancellable: this runs after Ctrl-C too."""
        drains = {name: (gate.drain_reason(self.run_id, r.results, r.verdict) if r.judged
                         else r.node.reason) for name, r in records.items()}
        script = gate.each_node_command({n: gate.drain_command(n, r) for n, r in drains.items()})
        answers = self._admin(script)
        for name, reason in drains.items():
            rc, said = answers.get(name, (1, "no answer"))
            if rc == 0:
                records[name].drained = reason
            else:
                records[name].gate_error = said or f"scontrol exit {rc}"

    def release(self) -> None:
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
