"""Idle sweeps on Slurm: `gpuprov validate --host CLUSTER --sweep` validates the partition's idle
nodes as preemptible, low-priority work, in batches. `SweepCluster` is the `base.Cluster` the
route drives when the run asks for a sweep (`RunContext.sweep`):

1. `list_nodes`: the route's survey (`SlurmCluster.list_nodes`), and the cluster's preemption
   settings (`scontrol show config`, `scontrol show partition -o`): a sweep refuses to start
   where real work could not take its nodes back (`check_preemptible`);
2. `plan`: the partition's idle nodes (Slurm state IDLE and nothing else), minus those whose
   latest validation with a verdict started less than --max-age ago (their own history,
   logs/<node>/, read as `gpuprov report` reads it: `report.history.last_validation`); busy,
   recent and unpreemptible nodes are skipped, each with why;
3. `resume` does nothing: a sweep holds no node (no reservation), so that real work can
   always take one;
4. `validate`: batches of `slurm.sweep_batch` nodes, one after the other. Before each batch,
   the nodes still idle (one real work took meanwhile gave way before it started); each batch
   is one job in `slurm.sweep_partition`, started through the route's own launch (`launch`,
   the one call), with `salloc --immediate` so that it never waits in the queue for its nodes;
   after it, the job's state (`squeue`), once the job has ended where a node was cut short
   (salloc returns while the job is still COMPLETING, its Epilog running): PREEMPTED makes
   each node of the batch whose validation had not ended by itself "not validated
   (preempted)": not judged, so its history gets no verdict (its age is its earlier
   validation's, and the next sweep takes it again), never drained; a state that cannot be
   read, or that has not ended within SETTLE_S, is "job state unknown": not judged either;
5. `drain` (--drain-failed): the nodes whose validation failed, as the route's; `release`:
   nothing is held.

A Slurm job preempted for one of its nodes is cancelled whole (PreemptMode CANCEL: "The
preempted job will be cancelled", slurm.conf(5), Slurm 22.05.8), so a batch is what one
preemption costs: its nodes whose validation had ended keep their verdicts.
"""
from __future__ import annotations

import re
import shlex
import time
from dataclasses import replace
from typing import Any, Optional, Sequence

from ...ground.errors import CommandTimeout
from ...report.history import format_age, last_validation
from ..base import NodeRecord, NodeView, Plan, RunContext
from . import gate
from .cluster import GATE_TIMEOUT_S, SlurmCluster
from .hostlist import last_line
from .job import with_conf
from .nodes import Node
from .settings import SlurmSettings, check_sweep

# salloc --immediate: "exit if resources are not available within the time period specified"
# (salloc(1), Slurm 22.05.8). A sweep takes idle nodes only: a batch whose nodes real work took
# meanwhile gives way instead of queueing for them. The seconds are chosen: room for a busy
# slurmctld to answer.
IMMEDIATE_S = 30
# squeue(1) JOB STATE CODES: "PR PREEMPTED Job terminated due to preemption."
PREEMPTED = "PREEMPTED"
# a batch whose job's state could not be read: its nodes cut short gave way (run_batch)
SQUEUE_UNREAD = "squeue could not be read after its batch"
# The states a job ends in (squeue(1) JOB STATE CODES, Slurm 22.05.8: BF, CA, CD, DL, F, NF,
# OOM, PR, TO); any other is on its way. A preempted job is "CG COMPLETING Job is in the
# process of completing. Some processes on some nodes may still be active." until its Epilog
# has ended on every node, and salloc has returned by then (measured on the test cluster: 5 s
# of COMPLETING behind a 5 s Epilog), so PREEMPTED is only seen once the job has ended.
ENDED_STATES = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED",
                          "NODE_FAIL", "OUT_OF_MEMORY", PREEMPTED, "TIMEOUT"})
# How long a batch whose nodes were cut short waits for its job to end, and how often it asks.
# Chosen: room for an Epilog that runs a node health check (tens of seconds on real clusters).
SETTLE_S, SETTLE_POLL_S = 120.0, 1.0
# validate's exit status when a signal ended it (validate/cli.py: "130 interrupted"): the
# results of a node stopped by the preemption are no verdict of the node's
INTERRUPTED_EXIT = 130
# What a sweep needs of the cluster's preemption (slurm.conf(5), Slurm 22.05.8): PreemptType
# "preempt/none: Job preemption is disabled. This is the default"; "preempt/partition_prio: Job
# preemption is based upon partition PriorityTier. Jobs in higher PriorityTier partitions may
# preempt jobs from lower PriorityTier partitions"; the partition's PreemptMode "CANCEL: The
# preempted job will be cancelled", "REQUEUE: Preempts jobs by requeuing them (if possible) or
# canceling them". SUSPEND would leave a suspended validation holding the node's GPU memory, OFF
# disables preemption: both are refused. preempt/qos takes the mode and the order from the QOS
# (sacctmgr), which the login node cannot be asked for without accounting: trusted as set.
PARTITION_PRIO, QOS_PRIO, NO_PREEMPTION = "preempt/partition_prio", "preempt/qos", "preempt/none"
YIELDING_MODES = ("CANCEL", "REQUEUE")
CONFIG_LINE = re.compile(r"^PreemptType\s*=\s*(\S+)", re.M | re.ASCII)
TIER = re.compile(r"[0-9]{1,5}", re.ASCII)
JOB_LINE = re.compile(r"([0-9]{1,20})\|([A-Z_]{1,32})", re.ASCII)


def launch(cluster: SlurmCluster, records: dict[str, NodeRecord]) -> None:
    """Validate one batch's nodes (`records`) with the route's own launch: the one place a
    sweep starts a validation."""
    cluster.validate(records)


def check_script(settings: SlurmSettings) -> str:
    """The cluster's configuration, then `@@partitions` and every partition, one line each:
    one round trip."""
    return with_conf(settings, 'scontrol show config\n'
                               'echo "@@partitions"; scontrol show partition -o\n')


def partition_fields(text: str) -> dict[str, dict[str, str]]:
    """Partition name -> its `KEY=VALUE` words, from `scontrol show partition -o`."""
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        name = fields.get("PartitionName", "")
        if name and name not in found:
            found[name] = fields
    return found


def tier(fields: dict[str, str]) -> int:
    """A partition's PriorityTier (1, Slurm's default, when it is not shown as a number)."""
    value = fields.get("PriorityTier", "")
    return int(value) if TIER.fullmatch(value) else 1


def check_preemptible(settings: SlurmSettings, out: str) -> tuple[str, dict[str, int]]:
    """(PreemptType, each partition's PriorityTier) from `check_script`'s output; `InputError`
    at slurm.sweep_partition when the cluster would not let real work take the sweep's nodes."""
    where, name = settings.position("sweep_partition"), settings.sweep_partition
    what = f"host '{settings.host}': slurm.sweep_partition '{name}'"
    config, _, listed = out.partition("@@partitions\n")
    match = CONFIG_LINE.search(config)
    kind = match.group(1) if match else NO_PREEMPTION
    partitions = partition_fields(listed)
    if name not in partitions:
        raise where.error(f"{what} is not a partition of the cluster (it has: "
                          f"{', '.join(sorted(partitions)) or 'none'})")
    if kind == NO_PREEMPTION:
        raise where.error(f"{what}: the cluster has no preemption (PreemptType={kind}), so a "
                          "sweep would hold nodes real work needs; set PreemptType="
                          f"{PARTITION_PRIO} in slurm.conf (docs/how-to/slurm.md, Sweeps)")
    mode = partitions[name].get("PreemptMode", "OFF").upper()
    if kind == PARTITION_PRIO and not any(m in mode.split(",") for m in YIELDING_MODES):
        raise where.error(f"{what} has PreemptMode={mode}: a sweep's jobs must be cancelled or "
                          "requeued when real work wants their nodes (PreemptMode=CANCEL)")
    tiers = {p: tier(fields) for p, fields in partitions.items()}
    if kind == PARTITION_PRIO and not any(t > tiers[name] for t in tiers.values()):
        raise where.error(f"{what} has the highest PriorityTier ({tiers[name]}): no job can "
                          "preempt its jobs; give it a lower one than the partitions of real work")
    return kind, tiers


def sweep_settings(settings: SlurmSettings) -> SlurmSettings:
    """The settings a batch's job runs with: the sweep partition, and never a wait in the queue."""
    return replace(settings, partition=str(settings.sweep_partition),
                   extra_args=settings.extra_args + (f"--immediate={IMMEDIATE_S}",))


def job_states_command(job_name: str, user: str) -> str:
    """Every job of `user` named `job_name`, finished ones too, as `ID|STATE` lines (squeue(1):
    `--states=all`, `%i` the job id, `%T` "Job state in extended form")."""
    return (f"squeue --name={shlex.quote(job_name)} --user={shlex.quote(user)} --states=all "
            "--noheader --format='%i|%T'")


def parse_job_states(out: str) -> dict[str, str]:
    """Job id -> state from `job_states_command`'s lines; any other line is ignored."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        match = JOB_LINE.fullmatch(line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    return found


class SweepCluster:
    """One sweep of a Slurm cluster's idle nodes (`base.Cluster`; module docstring)."""

    def __init__(self, settings: SlurmSettings, context: RunContext):
        check_sweep(settings)
        assert context.sweep is not None
        self.settings, self.context, self.sweep = settings, context, context.sweep
        self.session = context.session
        self.cluster = SlurmCluster(settings, context)  # the survey, the plan, the drain
        self.preempt_type = NO_PREEMPTION
        self.tiers: dict[str, int] = {}
        self.seen_jobs: set[str] = set()
        self.record = context.record
        self.book: dict[str, Any] = {"partition": settings.sweep_partition,
                                     "max_age": self.sweep.max_age, "max_age_s": self.sweep.max_age_s,
                                     "batch": settings.sweep_batch, "last_validated": {},
                                     "batches": []}
        self.record["sweep"] = self.book

    # ------------------------------------------------------------------ 1. survey, 2. plan
    def list_nodes(self) -> list[Node]:
        nodes = self.cluster.list_nodes()
        res = self.session.conn.run(check_script(self.settings), timeout=GATE_TIMEOUT_S)
        self.session.log.command("slurm", "sweep: scontrol show config; scontrol show "
                                 "partition -o", res.rc, res.elapsed_s, "", res.err)
        if res.rc != 0:
            raise self.settings.position("sweep_partition").error(
                f"host '{self.settings.host}': Slurm did not show its partitions (exit "
                f"{res.rc}: {last_line(res.err) or 'no output'})")
        self.preempt_type, self.tiers = check_preemptible(self.settings, res.out)
        self.book["preempt_type"] = self.preempt_type
        return nodes

    def plan(self, nodes: Sequence[NodeView], resume_passed: bool) -> Plan:
        """The idle nodes the sweep takes; the others of the partition skipped with why (a
        sweep never takes a drained node back: resume_passed is not for it)."""
        base = self.cluster.plan(nodes, False)
        plan = Plan([], [], list(base.skipped), list(base.down))
        now = time.time()
        for node in base.validate:
            why = self.kept_out(node, now) if isinstance(node, Node) else "not a Slurm node"
            if why:
                plan.skipped.append((node, why))
            else:
                plan.validate.append(node)
        return plan

    def kept_out(self, node: Node, now: float) -> str:
        """Why the sweep leaves `node` alone ("" when it takes it)."""
        sweep = str(self.settings.sweep_partition)
        if node.states != {"IDLE"}:
            return f"busy ({node.state}): a sweep takes idle nodes only"
        if sweep not in node.partitions:
            return f"not in the sweep partition {sweep}"
        if self.preempt_type == PARTITION_PRIO and not any(
                self.tiers.get(p, 1) > self.tiers.get(sweep, 1) for p in node.partitions):
            return (f"no partition of it has a PriorityTier above {sweep}'s: real work could "
                    "not take it from a sweep")
        last = last_validation(self.context.validate.logs_dir, node.name)
        age = None if last is None or last.at is None else max(0.0, now - last.at)
        self.book["last_validated"][node.name] = None if last is None else {
            "run": last.run_id, "verdict": last.verdict,
            "age_s": None if age is None else round(age)}
        if last is not None and age is not None and age < self.sweep.max_age_s:
            return (f"validated {format_age(age)} ago ({last.verdict}, run {last.run_id}), "
                    f"within --max-age {self.sweep.max_age}")
        return ""

    # ------------------------------------------------------------------ 3. no hold
    def resume(self, nodes: list[NodeView], hold: list[NodeView]) -> None:
        """Nothing: a sweep reserves no node (real work must be able to take each one), and
        takes no drained node back."""

    # ------------------------------------------------------------------ 4. the batches
    def validate(self, records: dict[str, NodeRecord]) -> None:
        names = list(records)
        size = self.settings.sweep_batch
        for start in range(0, len(names), size):
            self.run_batch({name: records[name] for name in names[start:start + size]},
                           first=start == 0)

    def run_batch(self, batch: dict[str, NodeRecord], first: bool) -> None:
        """One batch: the nodes still idle, validated as one job in the sweep partition; the
        others, and those the job lost to preemption, gave way."""
        idle = set(batch) if first else self.still_idle(list(batch))
        for name in batch:
            if name not in idle:
                self.give_way(batch[name], "busy: real work took it before its batch started")
        ready = {name: record for name, record in batch.items() if name in idle}
        entry: dict[str, Any] = {"nodes": list(batch), "started": list(ready)}
        self.book["batches"].append(entry)
        if not ready:
            return
        context = RunContext(self.session, self.context.validate, {}, sweep=self.sweep)
        cluster = SlurmCluster(sweep_settings(self.settings), context)
        cluster.user = self.cluster.user
        try:
            launch(cluster, ready)
        finally:
            self.context.incomplete |= context.incomplete
            self.context.no_task = context.no_task
            entry.update({k: context.record.get(k) for k in ("job_id", "salloc_exit_status", "job_s")})
        cut_short = [record for record in ready.values()
                     if record.results is None or record.rc == INTERRUPTED_EXIT]
        states, unknown = self.ended_jobs(gate.run_name(self.context.run_id), bool(cut_short))
        entry["job_states"] = states
        if unknown or PREEMPTED in states.values():
            # unknown, the job may have been preempted: a node cut short is no failure of its
            # own then, and never drained on a guess
            why = f"job state unknown: {unknown}" if unknown else "preempted"
            for record in cut_short:
                self.give_way(record, why)
        elif not any(record.judged for record in ready.values()):
            # no task started (salloc --immediate gave up): real work took a node in the
            # moment since the check, or the job could not start for a reason of its own
            idle = self.still_idle(list(ready))
            for name, record in ready.items():
                if name not in idle:
                    self.give_way(record, "busy: real work took it before its batch started")

    def still_idle(self, names: list[str]) -> set[str]:
        """Those of `names` Slurm shows idle now (state IDLE and nothing else)."""
        _, nodes, _ = self.cluster.survey()
        return {name for name in names if name in nodes and nodes[name].states == {"IDLE"}}

    def ended_jobs(self, job_name: str, wait: bool) -> tuple[dict[str, str], str]:
        """This batch's jobs with their states, and "" when they are known; else why not (the
        states unread, or a job not ended). `wait`: ask again until every job has ended, for
        at most SETTLE_S."""
        deadline = time.monotonic() + (SETTLE_S if wait else 0.0)
        while True:
            states = self.new_jobs(job_name)
            if states is None:
                return {}, SQUEUE_UNREAD
            going = [f"job {job} {state}" for job, state in sorted(states.items())
                     if state not in ENDED_STATES]
            if not wait or not going or time.monotonic() >= deadline:
                self.seen_jobs |= set(states)
                return states, (f"{', '.join(going)} {SETTLE_S:.0f} s after its batch"
                                if wait and going else "")
            self.session.sleep(SETTLE_POLL_S)  # Ctrl-C ends the wait at once

    def new_jobs(self, job_name: str) -> Optional[dict[str, str]]:
        """The sweep's jobs squeue shows that no earlier batch saw (this batch's), with their
        states; None when squeue could not be read."""
        script = with_conf(self.settings, job_states_command(job_name, self.cluster.user))
        try:
            res = self.session.conn.run(script, timeout=GATE_TIMEOUT_S)
        except CommandTimeout:
            return None
        self.session.log.command("slurm", script, res.rc, res.elapsed_s, res.out, res.err)
        if res.rc != 0:
            return None
        return {job: state for job, state in parse_job_states(res.out).items()
                if job not in self.seen_jobs}

    def give_way(self, record: NodeRecord, why: str) -> None:
        """`record`'s node went to real work: not validated, not judged, not drained. Results
        a preempted validation left (interrupted, exit 130) are no verdict of the node's."""
        record.preempted, record.judged, record.ok = True, False, False
        record.verdict = f"not validated ({why})"
        if record.results is not None:
            record.results.unlink(missing_ok=True)
            record.results = None
        self.session.reporter.warning(record.node.name, record.verdict)

    # ------------------------------------------------------------------ 5. after
    def drain(self, records: dict[str, NodeRecord]) -> None:
        self.cluster.drain(records)

    def release(self) -> None:
        """Nothing is held."""

