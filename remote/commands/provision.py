"""`gpuprov provision`: run a recipe on the selected hosts, then validate them.

With `--serial` (or the recipe's `serial:`), batch after batch (a canary rollout); with
`evidence`, a host whose validation says "drain and replace (RMA)" gives its evidence; with
`bundle`, from that bundle alone (`provision_bundle`). The validation, the scheduler's route,
the evidence and the bundle are imported only when the run uses them.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO, Union

from ..ground.errors import InputError
from ..ground.forks import DEFAULT_FORKS
from ..ground.runfolder import LOGS_DIR
from .assembly import Outputs, fail_input, print_hosts
from .inputs import check_profiles, parse_tags, rollout_for, run_inputs

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..config.recipe import Recipe
    from ..engine.jobs import Job
    from ..kinds import Kind
    from .hostrun import HostRun


def run(host: Optional[str], recipe: str, inventory: str, check: bool = False,
        tags: str = "", var: Optional[list[str]] = None,
        forks: Union[int, str, None] = DEFAULT_FORKS, json_path: Optional[str] = None,
        ask_become_pass: bool = False, logs_dir: str = LOGS_DIR, validate: bool = True,
        suite: str = "quick", limit: Optional[str] = None, skip_tags: str = "",
        diff: bool = False, verbose: int = 0, list_hosts: bool = False,
        junit_path: Optional[str] = None, serial: Optional[str] = None,
        max_fail_percentage: Union[str, float, None] = None, evidence: bool = True,
        bundle: Optional[str] = None, bundle_key: str = "", bundle_keyring: str = "",
        bundle_sha256: str = "", **exports: Optional[str]) -> int:
    """`gpuprov provision` (module docstring); `bundle` is vouched for by `bundle_key` with
    `bundle_keyring`, or `bundle_sha256`, or the inventory's: never by anything in the bundle
    (remote/bundle/trust.py). `exports`: the paths of the other exports provision offers
    (`remote.commands.exports`), by their keyword."""
    outputs = Outputs.of("provision", dict(json_path=json_path, junit_path=junit_path, **exports),
                         verbose, diff, list_hosts)
    checked: Optional[Bundle] = None
    through_site: Optional[Callable[[Job], Job]] = None
    try:
        extra_vars, forks_n, suite, (inv, hosts, rec) = run_inputs(
            inventory, host, limit, recipe, var, forks, suite, outputs)
        assert rec is not None  # a recipe path was given, so it was loaded
        validating = validate and rec.validate and not check
        if validating:
            check_profiles(inv, hosts, extra_vars, rec)
        rollout = rollout_for(serial, max_fail_percentage, rec.rollout)
        if not list_hosts and (bundle or any(inv.bundle_for(h) is not None for h in hosts)):
            from .provision_bundle import checked_bundle, with_site

            checked = checked_bundle(inv, hosts, rec, bundle, (bundle_key, bundle_keyring, bundle_sha256),
                                     outputs.stream)
            if checked is not None:   # the inventory's bundle_site: pushed once, served to the others
                hosts, through_site = with_site(inv, hosts, checked)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    from ..engine.jobs.apply import ApplyRecipe  # the engine's jobs: only for a run
    from .hostrun import HostRun, execute

    rec = _steps(rec, parse_tags(tags), parse_tags(skip_tags), sys.stderr)
    spec = HostRun(inv, hosts, rec.name, ApplyRecipe(rec, None, None), logs_dir, extra_vars, forks_n,
                   outputs, ask_become_pass, check=check, rollout=rollout,
                   mode="check (nothing will change)" if check else "apply",
                   bundle=checked.route() if checked is not None else None)
    spec.job = _job(spec, rec, checked, suite if validating else None, evidence)
    if through_site is not None:
        spec.job = through_site(spec.job)
    return execute(spec)


def _job(spec: HostRun, rec: Recipe[Kind[Any]], checked: Optional[Bundle], suite: Optional[str],
         evidence: bool) -> Job:
    """The recipe, after the bundle's push when there is one, then the validation (`suite`;
    through the scheduler for a cluster's login node), the stack manifest, and the evidence
    after an RMA verdict."""
    from ..engine.jobs.apply import ApplyRecipe, Then
    from ..engine.jobs.manifest import RecordStack

    logs = Path(spec.logs_dir)
    then: Optional[Then] = None
    if suite is not None:
        from ..engine.jobs.validate import Validate

        then = Validate(suite, logs)
        if any(h.scheduler for h in spec.hosts):
            # a cluster's login node is provisioned, then its nodes validated through its scheduler
            from ..scheduler import SCHEDULERS
            from ..scheduler.route import ClusterValidate

            then = cluster_job = ClusterValidate(then, SCHEDULERS)
            spec.expand = cluster_job.with_nodes
    inner: Job = ApplyRecipe(rec, None, then)
    if checked is not None:
        from ..bundle import PushBundle

        inner = PushBundle(checked, inner)
    job: Job = RecordStack(inner, logs)
    if evidence and then is not None:
        from ..evidence import AfterRMA, CollectEvidence

        job = AfterRMA(job, CollectEvidence(logs))
    return job


def _steps(recipe: Recipe[Kind[Any]], tags: Optional[set[str]], skip: Optional[set[str]],
           warn: TextIO) -> Recipe[Kind[Any]]:
    """The recipe with only the steps `--tags` and `--skip-tags` leave (as Ansible: a skipped
    tag wins over `always`); a warning names a tag that matches no step."""
    known = set().union(*(s.tags for s in recipe.steps)) if recipe.steps else set()
    for flag, given in (("--tags", tags), ("--skip-tags", skip)):
        unknown = sorted((given or set()) - known - {"always"})
        if unknown:
            warn.write(f"warning: {flag} {','.join(unknown)} matches no step of {recipe.path} "
                       f"(its tags: {', '.join(sorted(known)) or 'none'})\n")
    steps = recipe.select(tags)
    if skip:
        steps = [s for s in steps if not s.tags & skip]
    return dataclasses.replace(recipe, steps=steps)
