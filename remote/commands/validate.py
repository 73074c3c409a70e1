"""`gpuprov validate`: push validate/, run it on the selected hosts, pull the results; a
cluster's login node (a host with a scheduler's key) validates its nodes through the scheduler
(remote/scheduler/), and a host whose verdict says "drain and replace (RMA)" gives its evidence.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from ..engine.jobs import Job
from ..engine.jobs.manifest import RecordStack
from ..engine.jobs.validate import Validate
from ..ground.errors import InputError
from ..ground.forks import DEFAULT_FORKS
from ..ground.runfolder import LOGS_DIR
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
        image = container_option(container, hosts)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    ssh_route = Validate(suite, Path(logs_dir), container=image)
    job: Job = RecordStack(ssh_route, Path(logs_dir))
    spec = HostRun(inv, hosts, "validate", job, logs_dir, extra_vars, forks_n, outputs,
                   rollout=rollout)
    if any(h.scheduler for h in hosts):  # the other hosts run `job`, as when selected alone
        from ..scheduler.route import ClusterValidate

        job = cluster_job = ClusterValidate(ssh_route, SCHEDULERS, drain_failed, resume_passed,
                                            ssh_job=job)
        spec.expand = cluster_job.with_nodes
    if evidence:  # after an RMA verdict (remote/evidence/); a login node has no results.json
        from ..evidence import AfterRMA, CollectEvidence

        job = AfterRMA(job, CollectEvidence(Path(logs_dir)))
    spec.job = job
    return execute(spec)
