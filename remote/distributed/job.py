"""`validate --distributed`'s place in the run: a wrapper of the validate job that remembers
each host's connection, and, once every host's own validation is over (`after`, the run's
`expand`), runs the multi-node job across those that passed and adds its verdict to their
results (the recap, `--json`, JUnit) and `distributed.json` to their run folders."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..config.inventory import Host
from ..engine.jobs import Job
from ..engine.jobs.logs import OUTCOME
from ..engine.jobs.validate import package_bytes
from ..engine.results import HostResult, Outcome, StepResult, StepStatus
from ..engine.session import HostSession
from ..ground.errors import GpuprovError, Interrupted
from ..ground.fileio import write_atomic
from ..ground.runfolder import DISTRIBUTED_RECORD, run_dir
from ..output.term import printable
from ..scheduler.base import NodeRecord, RunContext, StepRunner
from ..transport.connection import BaseConnection
from . import plan, slurm
from .ssh import Job as DistJob
from .ssh import Member

STEP = "distributed"


@dataclass
class _Seen:
    host: Host
    connect: Callable[[Host], BaseConnection]
    note: Callable[[str], None]
    run_id: str
    cancel: threading.Event


class Distributed:
    """The validate job, then (in `after`) the distributed job. `settings`: the job's, read
    from the first host's vars before any host was contacted; `addresses`: the address each
    node's rendezvous is reached at (`distributed_address`, else its inventory address)."""

    def __init__(self, inner: Job, settings: plan.Settings, addresses: dict[str, str],
                 pythons: dict[str, str], logs_dir: Path):
        self.inner, self.settings, self.addresses, self.logs_dir = inner, settings, addresses, logs_dir
        self.pythons = pythons
        self.seen: dict[str, _Seen] = {}
        self.clusters: dict[str, SlurmAfter] = {}  # by login node: the job on the Slurm route

    def cluster_after(self, login: str) -> Optional["SlurmAfter"]:
        """The job after login node `login`'s validation step (None: no cluster of ours)."""
        return self.clusters.get(login)

    @property
    def outcome(self) -> Optional[str]:
        return self.inner.outcome

    def __call__(self, session: HostSession) -> None:
        # the run's own connect (its cancel and host-key trust), kept for the job after
        self.seen[session.host.name] = _Seen(session.host, session._connect,  # noqa: SLF001
                                             session.reporter.note, session.options.run_id,
                                             session.cancel)
        self.inner(session)

    def after(self, results: dict[str, HostResult]) -> dict[str, HostResult]:
        """The distributed job over the hosts whose own validation passed (in the run's
        order); their results gain its verdict."""
        if any(r.interrupted for r in results.values()) or any(
                seen.cancel.is_set() for seen in self.seen.values()):
            return results  # Ctrl-C during the validations: no job starts after it
        passed = [name for name, r in results.items() if r.ok and name in self.seen]
        for name, result in results.items():
            if name in self.seen and name not in passed and not result.not_started:
                result.warnings.append("not in the distributed job: its own validation failed")
        if len(passed) < 2:
            if self.seen:
                next(iter(self.seen.values())).note(
                    f"distributed: not run: {len(passed)} node(s) passed their own validation, "
                    "2 are needed")
            for name in passed:
                results[name].steps.append(StepResult(
                    STEP, StepStatus.SKIPPED, 0.0,
                    f"skipped: {len(passed)} node passed its own validation, 2 are needed"))
            return results
        first = self.seen[passed[0]]
        members = [Member(self.seen[n].host, self.seen[n].connect, self.addresses[n],
                          self.pythons[n]) for n in passed]
        job = DistJob(members, self.settings, first.run_id, package_bytes(), first.note,
                      first.cancel)
        try:
            outcome = job.run()
        except KeyboardInterrupt:  # the job's processes were stopped by its cleanup
            first.note("interrupted: the distributed job's processes were stopped")
            for name in passed:
                results[name].interrupted = True
                results[name].message = "interrupted during the distributed job"
            return results
        for name in passed:
            self._conclude(results[name], outcome.record(name, first.run_id, self.settings),
                           outcome.elapsed_s)
        verdict = outcome.verdict
        first.note(printable(f"distributed: {'passed' if verdict.ok else 'FAILED'}: {verdict.reason} "
                             f"({outcome.elapsed_s:.1f} s; logs/<node>/{first.run_id}/"
                             f"{DISTRIBUTED_RECORD})"))
        return results

    def _conclude(self, result: HostResult, record: dict[str, Any], elapsed: float) -> None:
        folder = run_dir(self.logs_dir, result.name, record["run"])
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / DISTRIBUTED_RECORD, json.dumps(record, indent=2) + "\n")
        mine = record["this_node"]
        if record["ok"]:
            result.steps.append(StepResult(STEP, StepStatus.OK, elapsed, record["reason"]))
            return
        if mine or not record["named"]:
            why = printable(mine or record["reason"])
            text = result.outcome.text if result.outcome is not None else ""
            result.outcome = Outcome(OUTCOME, f"{text}; distributed: {why}" if text
                                     else f"distributed: {why}", False)
        else:
            result.warnings.append(printable(f"distributed job failed: {record['reason']}"))


class SlurmAfter:
    """`validate --distributed` on a cluster (`scheduler.base.AfterStep`): in the validation's
    own allocation, once its step ended, the stack step and the job's step over the nodes
    that passed (slurm.run_job, the package on each step's stdin); each node's record gains the
    job's verdict, its `distributed.json` written beside its results."""

    def __init__(self, settings: plan.Settings, python: str, gpus_per_node: str = ""):
        self.settings, self.python, self.gpus_per_node = settings, python, gpus_per_node
        # the two steps' own bounds (slurm.run_job's), and the release after them
        self.hold_s = plan.STACK_TIMEOUT_S + settings.limit_s + plan.KILL_AFTER_S + 180

    def __call__(self, context: RunContext, records: dict[str, NodeRecord],
                 run: StepRunner) -> None:
        note = context.session.reporter.note
        passed = [name for name, record in records.items() if record.ok]
        if len(passed) < 2:
            note(f"distributed: not run: {len(passed)} node(s) passed their own validation, "
                 "2 are needed")
            return
        started = time.monotonic()
        package = package_bytes()
        extra = (f"--gpus-per-node={self.gpus_per_node}",) if self.gpus_per_node else ()
        step = slurm.Step("", self.python, len(passed), context.run_id, tuple(passed), extra)
        try:
            outcome = slurm.run_job(lambda command, timeout: run(command, timeout, package),
                                    step, self.settings, note)
        except Interrupted:
            raise
        except GpuprovError as exc:  # the login node stopped answering (a timeout): no verdict
            note(printable(f"distributed: FAILED: the steps did not come back: {exc}"))
            for name in passed:
                records[name].ok = False
                records[name].verdict += printable(f"; distributed: did not come back: {exc}")
            return
        outcome.elapsed_s = time.monotonic() - started
        for name in passed:
            record = outcome.record(name, context.run_id, self.settings)
            folder = context.node_folder(name)
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(folder / DISTRIBUTED_RECORD, json.dumps(record, indent=2) + "\n")
            _judge_node(records[name], record)
        verdict = outcome.verdict
        note(printable(f"distributed: {'passed' if verdict.ok else 'FAILED'}: {verdict.reason} "
                       f"({outcome.elapsed_s:.1f} s, one step of the validation's job; "
                       f"logs/<node>/{context.run_id}/{DISTRIBUTED_RECORD})"))


def _judge_node(node: NodeRecord, record: dict[str, Any]) -> None:
    """A node's verdict with the job's: it fails when the job named it (or named no one)."""
    node.extra["distributed"] = {"ok": record["ok"], "reason": record["reason"]}
    if record["ok"]:
        node.verdict += "; distributed: passed"
    elif record["this_node"] or not record["named"]:
        node.ok = False
        node.verdict = printable(f"{node.verdict}; distributed: "
                                 f"{record['this_node'] or record['reason']}")
    else:
        node.verdict = printable(f"{node.verdict}; distributed job failed (not this node)")


def prepare(inner: Job, inventory: Any, hosts: list[Host], extra_vars: dict[str, Any],
            logs_dir: Path) -> Distributed:
    """The wrapper for `validate --distributed` over `hosts`, its settings checked before any
    host is contacted (`InputError`: exit status 2): at least 2 hosts, the vars well formed."""
    from ..ground.errors import InputError

    nodes = [h for h in hosts if h.scheduler is None]
    clusters = [h for h in hosts if h.scheduler is not None]
    if len(nodes) == 1 or not (nodes or clusters):
        raise InputError(f"--distributed runs one job across nodes: select at least 2 hosts, "
                         f"or a cluster's login node ({len(nodes)} selected)", inventory.path)
    layers, settings = _settings(inventory, nodes + clusters, extra_vars)
    addresses = {h.name: str(layers[h.name].get("distributed_address") or
                             ("127.0.0.1" if h.is_local else h.address)) for h in nodes}
    pythons = {h.name: str(layers[h.name].get("validate_python") or h.python) for h in nodes}
    wrapper = Distributed(inner, settings[nodes[0].name] if nodes else plan.Settings(),
                          addresses, pythons, logs_dir)
    for host in clusters:  # the cluster route's job after its validation step, by login node (cluster_after)
        wrapper.clusters[host.name] = _slurm_after(host, layers[host.name], settings[host.name])
    return wrapper


def _settings(inventory: Any, hosts: list[Host], extra_vars: dict[str, Any]
              ) -> tuple[dict[str, Any], dict[str, plan.Settings]]:
    """Each host's variables and its `distributed_*` settings, read (`InputError` naming the
    inventory)."""
    from ..engine.varlayers import layered_vars
    from ..ground.errors import InputError

    layers = {h.name: layered_vars(inventory, h, extra_vars)[0] for h in hosts}
    try:
        return layers, {name: plan.read_settings(layer) for name, layer in layers.items()}
    except InputError as exc:
        raise InputError(str(exc), inventory.path) from None


def _slurm_after(host: Host, layer: Any, settings: plan.Settings) -> SlurmAfter:
    """The job after a login node's validation step, with its python and GPUs per node."""
    assert host.scheduler is not None
    return SlurmAfter(settings, str(layer.get("validate_python") or "python3"),
                      str(getattr(host.scheduler.settings, "gpus_per_node", "") or ""))
