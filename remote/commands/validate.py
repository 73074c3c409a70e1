"""`gpuprov validate`: push validate/, run it on the selected hosts, pull the results; a
cluster's login node (a host with a scheduler's key) validates its nodes through the scheduler
(remote/scheduler/), and a host whose verdict says "drain and replace (RMA)" gives its evidence.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Optional, Union

from ..config.inventory import Host
from ..engine.jobs import Job
from ..engine.jobs.manifest import RecordStack
from ..engine.jobs.validate import Validate
from ..ground.ages import DEFAULT_MAX_AGE, parse_max_age
from ..ground.errors import InputError
from ..ground.forks import DEFAULT_FORKS
from ..ground.runfolder import LOGS_DIR
from ..scheduler.base import Scheduler, Sweep
from .assembly import Outputs, fail_input, print_hosts
from .hostrun import HostRun, execute
from .inputs import check_profiles, rollout_for, run_inputs
from .options import container_option


def run(host: Optional[str], inventory: str, suite: str = "quick",
        json_path: Optional[str] = None, var: Optional[list[str]] = None,
        forks: Union[int, str, None] = DEFAULT_FORKS, logs_dir: str = LOGS_DIR,
        limit: Optional[str] = None, verbose: int = 0, list_hosts: bool = False,
        junit_path: Optional[str] = None, drain_failed: bool = False,
        resume_passed: bool = False, serial: Optional[str] = None,
        max_fail_percentage: Union[str, float, None] = None, evidence: bool = True,
        sweep: bool = False, max_age: Optional[str] = None, distributed: bool = False,
        container: Optional[str] = None, **exports: Optional[str]) -> int:
    """`gpuprov validate` (module docstring); `exports`: the paths of the other exports it
    offers (`remote.commands.exports`), by their keyword."""
    from ..scheduler import SCHEDULERS

    outputs = Outputs.of("validate", dict(json_path=json_path, junit_path=junit_path, **exports),
                         verbose, False, list_hosts)
    try:
        extra_vars, forks_n, suite, (inv, hosts, _) = run_inputs(
            inventory, host, limit, None, var, forks, suite, outputs)
        check_profiles(inv, hosts, extra_vars)
        if (drain_failed or resume_passed) and not any(h.scheduler for h in hosts):
            keys = " or ".join(f"{key}:" for key in SCHEDULERS)
            raise InputError(f"--drain-failed and --resume-passed act on a cluster's nodes: "
                             f"select a host with {keys} in the inventory", inv.path)
        rollout = rollout_for(serial, max_fail_percentage, {})
        swept = sweep_for(sweep, max_age, resume_passed, hosts, SCHEDULERS, inv.path)
        image = container_option(container, hosts)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    ssh_route = Validate(suite, Path(logs_dir), container=image)
    job: Job = RecordStack(ssh_route, Path(logs_dir))
    after = None
    if distributed:  # then one multi-node job across the nodes that passed (remote/distributed/)
        from ..distributed.job import prepare

        try:
            job = after = prepare(job, inv, hosts, extra_vars, Path(logs_dir))
        except InputError as exc:
            return fail_input(exc)
    spec = HostRun(inv, hosts, "validate", job, logs_dir, extra_vars, forks_n, outputs,
                   rollout=rollout)
    if any(h.scheduler for h in hosts):  # the other hosts run `job`, as when selected alone
        from ..scheduler.route import ClusterValidate

        job = cluster_job = ClusterValidate(ssh_route, SCHEDULERS, drain_failed, resume_passed,
                                            ssh_job=job, sweep=swept,
                                            after_step=after.cluster_after if after else None)
        spec.expand = cluster_job.with_nodes
    if after is not None:
        nodes, ssh_after = spec.expand, after.after
        spec.expand = ssh_after if nodes is None else lambda r: ssh_after(nodes(r))
    if evidence:  # after an RMA verdict (remote/evidence/); a login node has no results.json
        from ..evidence import AfterRMA, CollectEvidence

        job = AfterRMA(job, CollectEvidence(Path(logs_dir)))
    spec.job = job
    return execute(spec)


def sweep_for(sweep: bool, max_age: Optional[str], resume_passed: bool, hosts: list[Host],
              schedulers: Mapping[str, Scheduler], path: Path) -> Optional[Sweep]:
    """`--sweep` and `--max-age` checked before any host is contacted: a sweep acts on
    clusters only, each able to sweep (`Scheduler.check_sweep`), never with --resume-passed."""
    if not sweep:
        if max_age is not None:
            raise InputError("--max-age goes with --sweep (the nodes a sweep skips)", path)
        return None
    age = DEFAULT_MAX_AGE if max_age is None else max_age
    seconds = parse_max_age(age)
    clusters = [h for h in hosts if h.scheduler]
    if not clusters:
        keys = " or ".join(f"{key}:" for key in schedulers)
        raise InputError(f"--sweep validates a cluster's idle nodes: select a host with {keys} "
                         "in the inventory", path)
    if resume_passed:
        raise InputError("--sweep takes idle nodes only; --resume-passed takes drained ones "
                         "back: run it without --sweep", path)
    for host in clusters:
        assert host.scheduler is not None
        check = getattr(schedulers[host.scheduler.key], "check_sweep", None)
        if check is None:  # a plugged scheduler without sweeps
            raise InputError(f"--sweep: host '{host.name}': {host.scheduler.key}: clusters have "
                             "no sweep", path)
        check(host.scheduler.settings)
    return Sweep(seconds, age)
