"""A job over the selected hosts, from the assembled Run to the exit status: the first line,
the run (batch after batch with a rollout), the recap, the failures under it, the exports
(`remote.commands.exports`), and the status from the hosts' results (`remote.ground.exitcodes`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..config.inventory import Host, Inventory
from ..engine.jobs import Job
from ..engine.jobs.logs import OUTCOME as VALIDATION
from ..engine.results import HostResult, StepStatus
from ..engine.rollout import Rollout
from ..engine.run import RunInterrupted
from ..ground.errors import InputError
from ..ground.exitcodes import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STEP_FAILED,
    EXIT_UNREACHABLE,
    EXIT_VALIDATION_FAILED,
)
from ..ground.forks import DEFAULT_FORKS
from ..ground.runfolder import PROVISION_LOG, run_dir
from ..kinds.route import BundleRoute
from ..output.recap import Failure, NotStarted
from .assembly import Assembly, Outputs, assemble, become_password, fail_input, sigterm_as_interrupt
from .exports import Finished

Results = dict[str, HostResult]


@dataclass
class HostRun:
    """What a command runs: `job` on `hosts` under `title`. `mode`: what the run does, for its
    first line (provision's "apply"); `expand` turns the hosts' results into the rows shown
    (a cluster's login node gains a row per node) and may raise `InputError` (exit status 2);
    without `write_logs` the run keeps no run folder (a pull)."""

    inventory: Inventory
    hosts: list[Host]
    title: str
    job: Job
    logs_dir: str
    extra_vars: Optional[dict[str, Any]] = None
    forks: int = DEFAULT_FORKS
    outputs: Optional[Outputs] = None
    ask_become_pass: bool = False
    check: bool = False
    write_logs: bool = True
    mode: str = ""
    expand: Optional[Callable[[Results], Results]] = None
    rollout: Optional[Rollout] = None
    bundle: Optional[BundleRoute] = None


def execute(spec: HostRun) -> int:
    """Run `spec` and show it; the exit status."""
    outputs = spec.outputs or Outputs()
    logs = Path(spec.logs_dir)
    built = assemble(spec.inventory, spec.hosts, outputs, extra_vars=spec.extra_vars,
                     password=become_password(spec.ask_become_pass), forks=spec.forks,
                     check=spec.check, logs_dir=logs if spec.write_logs else None, bundle=spec.bundle)
    built.reporter.set_hosts([h.name for h in spec.hosts])
    # a run that writes no run folder (a pull) has no run id to show
    said = [f"{len(spec.hosts)} host(s)"] + ([spec.mode] if spec.mode else []) + (
        [f"run {built.options.run_id}"] if spec.write_logs else [])
    built.reporter.note(f"{spec.title}: {', '.join(said)}")
    results, status = _run(built, spec)
    if spec.expand is not None:
        try:
            results = spec.expand(results)
        except InputError as exc:
            return fail_input(exc)
    _show(built, spec, results)
    _export(built, spec.title, outputs, results, logs if spec.write_logs else None)
    return status if status != EXIT_OK else exit_status(results)


def _run(built: Assembly, spec: HostRun) -> tuple[Results, int]:
    with sigterm_as_interrupt():
        try:
            if spec.rollout is None:
                return built.run.execute(spec.job), EXIT_OK
            return built.run.roll_out(spec.job, spec.rollout), EXIT_OK
        except RunInterrupted as exc:
            built.reporter.note("interrupted: stopped the hosts; what they did so far is kept")
            return exc.results, EXIT_INTERRUPTED
        finally:
            built.reporter.close()


def _show(built: Assembly, spec: HostRun, results: Results) -> None:
    """The recap, the failures under it, the hosts not started, and where the logs are."""
    reporter, run_id = built.reporter, built.options.run_id
    reporter.recap(results, extra_column=spec.job.outcome)
    reporter.failures(failures(results, built.options.logs_dir, run_id))
    reporter.not_started([NotStarted(name, r.not_started) for name, r in results.items()
                          if r.not_started])
    if spec.write_logs:
        logs, hosts = Path(spec.logs_dir), spec.hosts
        shown = ", ".join(str(run_dir(logs, h.name, run_id)) for h in hosts[:3])
        reporter.note(f"logs: {run_dir(logs, '<host>', run_id)}/ "
                      f"({shown}{', ...' if len(hosts) > 3 else ''})")


def _export(built: Assembly, title: str, outputs: Outputs, results: Results,
            logs: Optional[Path]) -> None:
    """The exports asked for (`remote.commands.exports`), masked as the terminal is."""
    rollout = built.run.rollout.to_json() if built.run.rollout is not None else None
    outputs.write(Finished(outputs.command, title, results, built.redact, built.options.run_id,
                           logs, rollout))


def exit_status(results: Results) -> int:
    """The run's exit status from its hosts (`remote.ground.exitcodes`): a failed step first (or a
    job's own work that failed: evidence not collected), then an unreachable host, then a
    failed validation. Only a validation's verdict is a failed validation."""
    # a host a rollout never started did not fail: the host that stopped the rollout did
    failed = [r for r in results.values() if not r.ok and not r.not_started]
    if any(r.interrupted for r in failed):
        return EXIT_INTERRUPTED
    if any(s.status is StepStatus.FAILED for r in failed for s in r.steps) or any(
            r.outcome is not None and not r.outcome.ok and r.outcome.name != VALIDATION
            for r in failed if not r.unreachable):
        return EXIT_STEP_FAILED
    if any(r.unreachable for r in failed):
        return EXIT_UNREACHABLE
    if any(r.outcome is not None and not r.outcome.ok for r in failed):
        return EXIT_VALIDATION_FAILED
    return EXIT_STEP_FAILED if failed else EXIT_OK


def _reason(result: HostResult) -> str:
    """Why a host failed: the connection's error, its first failed step, or the verdict."""
    step = next((s for s in result.steps if s.status is StepStatus.FAILED), None)
    if result.unreachable:
        return f"unreachable: {result.message}"
    if step is not None:
        return f"step '{step.name}' failed: {step.message}"
    if result.outcome is not None and not result.outcome.ok:
        return f"{result.outcome.name}: {result.outcome.text}"
    if result.interrupted:
        return "interrupted"
    return result.message or "failed"


def failures(results: Results, logs_dir: Optional[Path], run_id: str) -> list[Failure]:
    """Each failed host's reason and its provision.log, for the block under the recap."""
    out = []
    for name, result in results.items():
        if result.ok or result.not_started:
            continue
        log = run_dir(logs_dir, name, run_id) / PROVISION_LOG if logs_dir else None
        out.append(Failure(name, _reason(result), str(log) if log and log.exists() else ""))
    return out
