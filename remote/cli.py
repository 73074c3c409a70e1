"""Command-line glue between `tasks.py` and the control side.

Each function takes the options as the user gave them, checks everything that can be checked
before contacting a host (inventory, selection, recipe, templates, options), runs, prints, and
returns the exit status (`remote.ground.exitcodes`: 0 every selected host succeeded, 1 a step failed,
2 bad input with one line on stderr naming the file and line, 3 validation failed, 4 a host
was unreachable, 130 interrupted).
"""
from __future__ import annotations

import dataclasses
import getpass
import json
import math
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterable, Optional, TextIO, Union

from .bundle import Bundle, BundleError, PushBundle, read_bundle, trust
from .config.inventory import Host, Inventory, load_inventory
from .config.recipe import Recipe, check_names, load_recipe
from .config.templating import check_vars
from .engine.facts import FACT_NAMES, FACTS
from .engine.jobs import Job
from .engine.jobs.apply import ApplyRecipe, Then
from .engine.jobs.gather import GatherFacts
from .engine.jobs.logs import OUTCOME as VALIDATION
from .engine.jobs.logs import PullLogs
from .engine.jobs.manifest import RecordStack
from .engine.jobs.validate import PROFILE_VARS, SUITES, Validate, check_profile_vars
from .engine.results import HostResult, StepStatus, json_document, write_json
from .engine.rollout import Rollout, parse_max_fail, parse_serial
from .engine.run import Run, RunInterrupted, RunOptions
from .engine.varlayers import layered_vars
from .evidence import AfterRMA, CollectEvidence
from .ground.errors import InputError, Unreachable, Where
from .ground.exitcodes import (
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STEP_FAILED,
    EXIT_UNREACHABLE,
    EXIT_VALIDATION_FAILED,
)
from .ground.fileio import write_atomic
from .ground.paths import VALIDATE_DIR
from .ground.runfolder import LOGS_DIR, PROVISION_LOG, run_dir
from .ground.runid import new_run_id
from .kinds import KINDS, Kind
from .kinds.route import BundleRoute
from .options import check_forks, parse_extra_vars, select_hosts
from .output.junit import write_junit
from .output.recap import Failure, NotStarted, Reporter
from .output.runlog import Redactor
from .scheduler import SCHEDULERS, ClusterValidate

EXIT_FAILED = EXIT_STEP_FAILED  # the name older callers use
BECOME_PASSWORD_ENV = "GPUPROV_BECOME_PASSWORD"
RESERVED = ("host", "facts", "vars")
Checked = tuple[Inventory, list[Host], Optional[Recipe[Kind[Any]]]]  # what `load_and_check` returns
__all__ = ["check_forks", "EXIT_FAILED", "EXIT_INPUT", "EXIT_OK"]


def fail_input(exc: InputError) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_INPUT


def parse_vars(pairs: Optional[Iterable[str]]) -> dict[str, Any]:
    """`--var/-e/--extra-vars` values as a dict (`remote.options.parse_extra_vars`)."""
    return parse_extra_vars(pairs)


def parse_tags(text: Optional[str]) -> Optional[set[str]]:
    tags = {t.strip() for t in (text or "").split(",") if t.strip()}
    return tags or None


def become_password(ask: bool) -> Optional[str]:
    if ask:
        return getpass.getpass("become (sudo) password: ")
    return os.environ.get(BECOME_PASSWORD_ENV) or None  # empty means "none given"


def load_and_check(inventory_path: str, selection: Optional[str], recipe_path: Optional[str],
                   extra_vars: dict[str, Any], limit: Optional[str] = None) -> Checked:
    """Inventory, selected hosts (`--host` narrowed by `--limit`) and recipe, all checked;
    raises `InputError`."""
    inventory = load_inventory(inventory_path, SCHEDULERS)
    hosts = select_hosts(inventory, selection, limit)
    recipe = load_recipe(recipe_path, KINDS) if recipe_path else None
    if recipe is not None:
        checked: set[frozenset[str]] = set()
        for host in hosts:
            raw, where = layered_vars(inventory, host, extra_vars, recipe)
            for name in RESERVED:
                if name in raw:
                    raise InputError(f"'{name}' is a reserved name and cannot be a variable",
                                     inventory.path)
            key = frozenset(raw)
            if key not in checked:
                check_vars(raw, where, FACT_NAMES)
                check_names(recipe, set(raw), host.name, FACT_NAMES)
                checked.add(key)
    return inventory, hosts, recipe


def check_profiles(inventory: Inventory, hosts: list[Host], extra_vars: dict[str, Any],
                   recipe: Optional[Recipe[Kind[Any]]] = None) -> None:
    """Each selected host's `node_profile` and waivers, checked with validate's own checker
    before any host is contacted (`check_profile_vars`); each distinct set of values once."""
    seen: set[tuple[int, ...]] = set()
    for host in hosts:
        raw, where = layered_vars(inventory, host, extra_vars, recipe)
        key = tuple(id(raw.get(name)) for name in PROFILE_VARS)
        if key not in seen:
            seen.add(key)
            check_profile_vars(raw, where, extra_vars)


def check_key_files(hosts: list[Host]) -> None:
    """Each selected host's identity_file exists: else paramiko's "No such file or directory"
    read as a network error, host after host."""
    for host in hosts:
        if host.identity_file and not host.is_local:
            key_file = Path(os.path.expanduser(host.identity_file))
            if not key_file.is_file():
                state = "is not a file" if key_file.exists() else "does not exist"
                raise host.where.error(f"{host.name}: identity_file {key_file} {state}")


def load_for_run(inventory_path: str, selection: Optional[str], recipe_path: Optional[str],
                 extra_vars: dict[str, Any], limit: Optional[str] = None) -> Checked:
    """`load_and_check`, and what must be true on this machine to contact the hosts."""
    checked = load_and_check(inventory_path, selection, recipe_path, extra_vars, limit)
    check_key_files(checked[1])
    resolve_cache_address(checked[0])
    return checked


def resolve_cache_address(inventory: Inventory) -> None:
    """The fleet reaches the cache at its host's address unless `cache.address` says otherwise:
    an ssh_config alias (`Host cachebox` + `HostName 10.0.0.5`) means nothing on the fleet's
    hosts, so the address ssh_config gives it is used (as ssh would connect to it)."""
    cache = inventory.cache
    if cache is None or cache.address_given:
        return
    from .transport.sshconfig import resolve  # reads ~/.ssh/config: only for a run

    try:
        address = resolve(inventory.hosts[cache.host]).address
    except Unreachable:
        return  # the cache host's connection says what is wrong with ~/.ssh/config
    inventory.cache = dataclasses.replace(cache, address=address)


@dataclasses.dataclass
class Outputs:
    """Where a run's results go besides the terminal: `--json PATH` ('-': stdout alone, the
    step lines then go to stderr), `--junit PATH`, and how much the lines show."""

    json_path: Optional[str] = None
    junit_path: Optional[str] = None
    verbose: int = 0
    diff: bool = False
    list_hosts: bool = False

    @property
    def stream(self) -> TextIO:
        return sys.stderr if self.json_path == "-" else sys.stdout

    def check(self) -> None:
        for flag, path in (("--json", self.json_path), ("--junit", self.junit_path)):
            if path is not None and path != "-" and (not path or Path(path).is_dir()):
                raise InputError(f"{flag} needs a file name, not {path!r}")
        if self.junit_path == "-":
            raise InputError("--junit needs a file name ('-' is for --json)")


def _run_inputs(inventory: str, host: Optional[str], limit: Optional[str],
                recipe: Optional[str], var: Optional[list[str]], forks: Union[int, str, None],
                suite: str, outputs: Outputs) -> tuple[dict[str, Any], int, str, Checked]:
    """The options every run shares, checked: (vars, forks, suite, (inventory, hosts, recipe))."""
    extra_vars = parse_vars(var)
    outputs.check()
    return (extra_vars, check_forks(16 if forks is None else forks), check_suite(suite),
            load_for_run(inventory, host, recipe, extra_vars, limit))


def print_hosts(hosts: list[Host], stream: TextIO) -> int:
    """`--list-hosts`: the selected hosts, as ansible-playbook --list-hosts prints them."""
    stream.write(f"  hosts ({len(hosts)}):\n" + "".join(f"    {h.name}\n" for h in hosts))
    return EXIT_OK


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


def provision(host: Optional[str], recipe: str, inventory: str, check: bool = False,
              tags: str = "", var: Optional[list[str]] = None,
              forks: Union[int, str, None] = 16, json_path: Optional[str] = None,
              ask_become_pass: bool = False, logs_dir: str = LOGS_DIR, validate: bool = True,
              suite: str = "quick", limit: Optional[str] = None, skip_tags: str = "",
              diff: bool = False, verbose: int = 0, list_hosts: bool = False,
              junit_path: Optional[str] = None, serial: Optional[str] = None,
              max_fail_percentage: Union[str, float, None] = None, evidence: bool = True,
              bundle: Optional[str] = None, bundle_key: str = "", bundle_keyring: str = "",
              bundle_sha256: str = "") -> int:
    """`gpuprov provision`: run a recipe on the selected hosts, then validate them; with
    `--serial` (or the recipe's `serial:`), batch after batch (a canary rollout); with
    `evidence`, a host whose validation says "drain and replace (RMA)" gives its evidence; with
    `bundle`, from that bundle alone (checked before any host is touched, and vouched for by
    `bundle_key` with `bundle_keyring`, or `bundle_sha256`, or the inventory's: never by
    anything in the bundle; remote/bundle/trust.py)."""
    outputs = Outputs(json_path, junit_path, verbose, diff, list_hosts)
    checked: Optional[Bundle] = None
    try:
        extra_vars, forks_n, suite, (inv, hosts, rec) = _run_inputs(
            inventory, host, limit, recipe, var, forks, suite, outputs)
        assert rec is not None  # a recipe path was given, so it was loaded
        if validate and rec.validate and not check:
            check_profiles(inv, hosts, extra_vars, rec)
        rollout = rollout_for(serial, max_fail_percentage, rec.rollout)
        bundle_path = None if list_hosts else Path(bundle) if bundle else inventory_bundle(inv, hosts)
        if bundle_path is not None:
            checked = _trusted_bundle(bundle_path, rec.path.parent / "locks", trust.anchor(
                bundle_key, bundle_keyring, bundle_sha256, inv.bundle_trust), outputs.stream)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    rec = _steps(rec, parse_tags(tags), parse_tags(skip_tags), sys.stderr)
    then: Optional[Then] = (Validate(suite, Path(logs_dir))
                            if validate and rec.validate and not check else None)
    expand = None
    if isinstance(then, Validate) and any(h.scheduler for h in hosts):
        # a cluster's login node is provisioned, then its nodes validated through its scheduler
        then = cluster_job = ClusterValidate(then, SCHEDULERS)
        expand = cluster_job.with_nodes
    inner: Job = ApplyRecipe(rec, None, then)
    if checked is not None:
        inner = PushBundle(checked, inner)
    job: Job = RecordStack(inner, Path(logs_dir))
    if evidence and then is not None:
        job = AfterRMA(job, CollectEvidence(Path(logs_dir)))
    return _execute(inv, hosts, rec.name, job, extra_vars, forks_n,
                    outputs, ask_become_pass, logs_dir, check=check, expand=expand,
                    mode="check (nothing will change)" if check else "apply",
                    rollout=rollout, bundle=checked.route() if checked is not None else None)

def _trusted_bundle(path: Path, locks_dir: Path, anchor: trust.Anchor, stream: TextIO) -> Bundle:
    """The bundle at `path`, checked (`read_bundle`) and vouched for by `anchor`
    (remote/bundle/trust.py); BundleError (one line naming it, exit 2) otherwise. No anchor is
    refused before the archive is read."""
    if not anchor:
        raise BundleError("no such bundle (gpuprov bundle makes one)" if not path.exists()
                          else f"no trust anchor for this bundle: {trust.HOW}", path)
    checked = read_bundle(path, locks_dir=locks_dir, validate_dir=VALIDATE_DIR)
    stream.write(f"bundle {checked.id}: {trust.check(checked, anchor)}\n")
    return checked


def inventory_bundle(inv: Inventory, hosts: list[Host]) -> Optional[Path]:
    """The bundle the selected hosts' `bundle:` keys name (one per run: the run checks it once
    and every host installs from it), None when none names one; InputError naming the key."""
    named = {h.name: inv.bundle_for(h) for h in hosts}
    given = [(name, b) for name, b in named.items() if b is not None]
    if not given:
        return None
    first_name, first = given[0]
    for name, other in named.items():
        if other is None or other.path != first.path:
            said = f"names {other.path}" if other is not None else "names no bundle"
            where = other.where if other is not None else first.where
            raise where.error(f"bundle: host '{first_name}' takes {first.path} "
                              f"({first.where}) and host '{name}' {said}: one bundle per run "
                              "(select those hosts apart, or give --bundle)")
    if not first.path.is_file():
        raise first.where.error(f"bundle: {first.path}: no such file (gpuprov bundle makes one)")
    return first.path


def rollout_for(serial: Optional[str], max_fail: Union[str, float, None],
                keys: dict[str, tuple[Any, Where]]) -> Optional[Rollout]:
    """The rollout `--serial` and `--max-fail-percentage` ask for, else the recipe's `serial:`
    and `max_fail_percentage:` (`keys`, with their positions); None: every host at once."""
    if serial is None and max_fail is None and not keys:
        return None
    sizes: tuple[Any, ...] = ()
    if serial is not None:
        sizes = parse_serial(str(serial))
    elif "serial" in keys:
        sizes = parse_serial(keys["serial"][0], "serial", keys["serial"][1])
    limit = 0.0
    if max_fail is not None:
        limit = parse_max_fail(max_fail)
    elif "max_fail_percentage" in keys:
        value, where = keys["max_fail_percentage"]
        limit = parse_max_fail(value, "max_fail_percentage", where)
    return Rollout(sizes, limit)


def validate(host: Optional[str], inventory: str, suite: str = "quick",
             json_path: Optional[str] = None, var: Optional[list[str]] = None,
             forks: Union[int, str, None] = 16, logs_dir: str = LOGS_DIR,
             limit: Optional[str] = None, verbose: int = 0, list_hosts: bool = False,
             junit_path: Optional[str] = None, drain_failed: bool = False,
             resume_passed: bool = False, serial: Optional[str] = None,
             max_fail_percentage: Union[str, float, None] = None, evidence: bool = True) -> int:
    """`gpuprov validate`: push validate/, run it on the selected hosts, pull the results;
    a cluster's login node (a host with a scheduler's key) validates its nodes
    through the scheduler (remote/scheduler/)."""
    outputs = Outputs(json_path, junit_path, verbose, False, list_hosts)
    try:
        extra_vars, forks_n, suite, (inv, hosts, _) = _run_inputs(
            inventory, host, limit, None, var, forks, suite, outputs)
        check_profiles(inv, hosts, extra_vars)
        if (drain_failed or resume_passed) and not any(h.scheduler for h in hosts):
            keys = " or ".join(f"{key}:" for key in SCHEDULERS)
            raise InputError(f"--drain-failed and --resume-passed act on a cluster's nodes: "
                             f"select a host with {keys} in the inventory", inv.path)
        rollout = rollout_for(serial, max_fail_percentage, {})
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    ssh_route = Validate(suite, Path(logs_dir))
    job: Job = RecordStack(ssh_route, Path(logs_dir))
    expand = None
    if any(h.scheduler for h in hosts):  # the other hosts run `job`, as when selected alone
        job = cluster_job = ClusterValidate(ssh_route, SCHEDULERS, drain_failed, resume_passed, ssh_job=job)
        expand = cluster_job.with_nodes
    if evidence:  # after an RMA verdict (remote/evidence/); a login node has no results.json
        job = AfterRMA(job, CollectEvidence(Path(logs_dir)))
    return _execute(inv, hosts, "validate", job, extra_vars, forks_n, outputs, False, logs_dir,
                    expand=expand, rollout=rollout)


def fabric(host: Optional[str], inventory: str, json_path: Optional[str] = None,
           junit_path: Optional[str] = None, prometheus: Optional[str] = None,
           html: Optional[str] = None, var: Optional[list[str]] = None,
           logs_dir: str = LOGS_DIR, limit: Optional[str] = None, list_hosts: bool = False,
           drain_failed: bool = False, ask_become_pass: bool = False) -> int:
    """`gpuprov fabric`: pair the selected nodes in rounds, measure each pair, name the
    suspect node or link (remote/fabric/)."""
    from .fabric.command import Exports, run_fabric

    outputs = Outputs(json_path, junit_path, 0, False, list_hosts)
    try:
        extra_vars, _, _, (inv, hosts, _) = _run_inputs(inventory, host, limit, None, var, None,
                                                        "quick", outputs)
        for flag, path in (("--prometheus", prometheus), ("--html", html)):
            if path is not None and (not path or path == "-" or Path(path).is_dir()):
                raise InputError(f"{flag} needs a file name, not {path!r}")
        if drain_failed and not any(h.scheduler for h in hosts):
            keys = " or ".join(f"{key}:" for key in SCHEDULERS)
            raise InputError(f"--drain-failed drains a cluster's nodes: select its login node "
                             f"(a host with {keys}) with the nodes", inv.path)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    try:
        with _sigterm_as_interrupt():  # SIGTERM stops the servers as Ctrl-C does
            return run_fabric(inv, hosts, extra_vars,
                              Exports(json_path, junit_path, prometheus, html), logs_dir,
                              drain_failed, become_password(ask_become_pass))
    except InputError as exc:
        return fail_input(exc)


def logs(host: Optional[str], inventory: str, logs_dir: str = LOGS_DIR,
         limit: Optional[str] = None, list_hosts: bool = False) -> int:
    """`gpuprov logs`: pull what the last validation left on each selected host."""
    try:
        inv, hosts, _ = load_for_run(inventory, host, None, {}, limit)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, sys.stdout)
    # A cluster's validation runs on its nodes, in a folder each task removes; every validate
    # run brings the nodes' results home itself: the login node has nothing to pull.
    for cluster in hosts:
        if cluster.scheduler is None:
            continue
        noun = SCHEDULERS[cluster.scheduler.key].noun
        print(f"{cluster.name}: a {noun} cluster: each `gpuprov validate --host {cluster.name}` "
              f"brings its nodes' results home ({logs_dir}/<node>/<run>/); nothing to pull "
              "from the login node")
    hosts = [h for h in hosts if not h.scheduler]
    if not hosts:
        return EXIT_OK
    return _execute(inv, hosts, "logs", PullLogs(Path(logs_dir)), {}, 16, Outputs(), False,
                    logs_dir, write_logs=False,
                    mode=f"the latest validation run of each into {logs_dir}/<host>/<run>/")


def evidence(host: Optional[str], inventory: str, logs_dir: str = LOGS_DIR,
             limit: Optional[str] = None, list_hosts: bool = False,
             bug_report_timeout: Union[float, str, None] = None) -> int:
    """`gpuprov evidence`: gather each selected host's evidence for a replacement into
    `<logs>/<host>/<run>/evidence-<host>-<serials>.tar.gz` (remote/evidence/)."""
    try:
        inv, hosts, _ = load_for_run(inventory, host, None, {}, limit)
        check_profiles(inv, hosts, {})  # the evidence runs validate with the host's profile
        full = _seconds("--bug-report-timeout", bug_report_timeout)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, sys.stdout)
    for cluster in hosts:
        if cluster.scheduler is not None:
            print(f"{cluster.name}: a cluster's login node: select its nodes by name to gather "
                  "their evidence; left out")
    hosts = [h for h in hosts if not h.scheduler]
    if not hosts:
        return EXIT_OK
    job = CollectEvidence(Path(logs_dir), *(() if full is None else (full, full)))
    return _execute(inv, hosts, "evidence", job, {}, 16, Outputs(), False, logs_dir)


def _seconds(flag: str, value: Union[float, str, None]) -> Optional[float]:
    """A positive, finite number of seconds given as `flag`, or None when not given."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise InputError(f"{flag} must be a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise InputError(f"{flag} must be more than 0, not {value!r}")
    if math.isinf(seconds):  # no bound at all (1e400 is one too)
        raise InputError(f"{flag} must be a finite number of seconds, not {value!r}")
    return seconds


def report(logs: str = LOGS_DIR, out: Optional[str] = None, baseline: Optional[str] = None,
           threshold: Union[str, float, None] = None, fail_on_outlier: bool = False,
           prometheus: Optional[str] = None, quarantine: Optional[str] = None,
           json_path: Optional[str] = None) -> int:
    """`gpuprov report`: merged table, slow hosts, regressions, history, pictures, HTML."""
    from .report import run_report
    from .report.history import parse_quarantine

    kwargs: dict[str, Any] = {}  # only the percentages given; run_report has the defaults
    if threshold is not None:
        try:
            value = float(threshold)
        except ValueError:
            return fail_input(InputError(f"--threshold must be a number of percent, not {threshold!r}"))
        if value <= 0:
            return fail_input(InputError("--threshold must be more than 0"))
        kwargs.update(outlier_pct=value, regression_pct=value)
    if prometheus is not None:
        if not prometheus or Path(prometheus).is_dir():
            return fail_input(InputError(f"--prometheus needs a file name, not {prometheus!r}"))
        kwargs["prometheus_path"] = Path(prometheus)
    if quarantine is not None:
        try:
            kwargs["quarantine"] = parse_quarantine(str(quarantine))
        except InputError as exc:
            return fail_input(exc)
    if json_path is not None:
        if not json_path or Path(json_path).is_dir():
            return fail_input(InputError(f"--json needs a file name or '-', not {json_path!r}"))
        kwargs["json_path"] = json_path
    return run_report(logs_dir=Path(logs), out_dir=Path(out) if out else None, baseline=baseline,
                      fail_on_outlier=fail_on_outlier, **kwargs)


def sandbox(action: Optional[str], hosts: Union[int, str, None] = None,
            state_dir: str = ".sandbox", offline: bool = False) -> int:
    """`gpuprov sandbox up|down|status`: throwaway local hosts for trying recipes."""
    from . import sandbox as sb

    try:
        if action == "up":
            try:
                count = int(2 if hosts is None else hosts)
            except ValueError:
                count = 0
            if count < 1:
                raise InputError(f"--hosts must be a whole number of 1 or more, not {hosts!r}")
            inventory = sb.up(count, Path(state_dir), offline=offline)
            print(f"{count} {'offline ' if offline else ''}sandbox host(s) up; inventory {inventory} "
                  "(inventory.yaml includes it: try gpuprov facts --host sandbox)")
        elif hosts is not None or offline:
            raise InputError(f"{'--hosts' if hosts is not None else '--offline'} is for 'sandbox up' "
                             f"only, not {action!r}")
        elif action == "down":
            sb.down(Path(state_dir))
        elif action == "status":
            hosts_now = sb.status(Path(state_dir))
            if not hosts_now:
                print("no sandbox hosts (gpuprov sandbox up starts them)")
            for entry in hosts_now:
                print(f"{entry['name']}  {entry['user']}@{entry['address']}:{entry['port']}  "
                      f"{entry['state'] if entry['running'] else 'stopped'}")
        else:
            raise InputError(f"sandbox action must be up, down or status, not {action!r}")
    except InputError as exc:
        return fail_input(exc)
    except sb.SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def check_suite(suite: str) -> str:
    if suite not in SUITES:
        raise InputError(f"--suite must be one of {', '.join(SUITES)}, not {suite!r}")
    return suite


def exit_status(results: dict[str, HostResult]) -> int:
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


def failures(results: dict[str, HostResult], logs_dir: Optional[Path],
             run_id: str) -> list[Failure]:
    """Each failed host's reason (the first failed step, the connection's error, or the
    verdict) and its provision.log, for the block under the recap."""
    out = []
    for name, result in results.items():
        if result.ok or result.not_started:
            continue
        step = next((s for s in result.steps if s.status is StepStatus.FAILED), None)
        if result.unreachable:
            reason = f"unreachable: {result.message}"
        elif step is not None:
            reason = f"step '{step.name}' failed: {step.message}"
        elif result.outcome is not None and not result.outcome.ok:
            reason = f"{result.outcome.name}: {result.outcome.text}"
        elif result.interrupted:
            reason = "interrupted"
        else:
            reason = result.message or "failed"
        log = run_dir(logs_dir, name, run_id) / PROVISION_LOG if logs_dir else None
        out.append(Failure(name, reason, str(log) if log and log.exists() else ""))
    return out


def _execute(inv: Inventory, hosts: list[Host], title: str, job: Job, extra_vars: dict[str, Any],
             forks: int, outputs: Outputs, ask_become_pass: bool, logs_dir: str,
             check: bool = False, write_logs: bool = True, mode: str = "",
             expand: Optional[Callable[[dict[str, HostResult]], dict[str, HostResult]]] = None,
             rollout: Optional[Rollout] = None, bundle: Optional[BundleRoute] = None) -> int:
    """Run `job` on `hosts` (batch after batch with `rollout`); `mode`: what the run does, for
    its first line (provision's "apply"); `expand` turns the hosts' results into the rows shown
    (a cluster's login node gains a row per node) and may raise `InputError` (exit status 2)."""
    password = become_password(ask_become_pass)
    redact = Redactor([password] if password else [])
    for name in inv.secrets:
        if name in extra_vars:
            redact.add(extra_vars[name])
    reporter = Reporter(redact, stream=outputs.stream, check=check, verbose=outputs.verbose,
                        diff=outputs.diff)
    reporter.set_hosts([h.name for h in hosts])
    options = RunOptions(check=check, extra_vars=extra_vars, forks=forks,
                         become_password=password,
                         logs_dir=Path(logs_dir) if write_logs else None, run_id=new_run_id(),
                         bundle=bundle)
    run = Run(inv, hosts, options, reporter, redact)
    # `mode`: what the run does (provision's apply or check); a run that writes no run folder
    # (a pull) has no run id to show
    said = [f"{len(hosts)} host(s)"] + ([mode] if mode else []) + (
        [f"run {options.run_id}"] if write_logs else [])
    reporter.note(f"{title}: {', '.join(said)}")
    status = EXIT_OK
    with _sigterm_as_interrupt():
        try:
            results = run.execute(job) if rollout is None else run.roll_out(job, rollout)
        except RunInterrupted as exc:
            results, status = exc.results, EXIT_INTERRUPTED
            reporter.note("interrupted: stopped the hosts; what they did so far is kept")
        finally:
            reporter.close()
    if expand is not None:
        try:
            results = expand(results)
        except InputError as exc:
            return fail_input(exc)
    reporter.recap(results, extra_column=job.outcome)
    reporter.failures(failures(results, options.logs_dir, options.run_id))
    reporter.not_started([NotStarted(name, r.not_started) for name, r in results.items()
                          if r.not_started])
    if write_logs:
        shown = ", ".join(str(run_dir(Path(logs_dir), h.name, options.run_id)) for h in hosts[:3])
        reporter.note(f"logs: {run_dir(Path(logs_dir), '<host>', options.run_id)}/ "
                      f"({shown}{', ...' if len(hosts) > 3 else ''})")
    rollout_json = run.rollout.to_json() if run.rollout is not None else None
    if outputs.json_path == "-":
        sys.stdout.write(json_document(results, redact, rollout_json))
        sys.stdout.flush()
    elif outputs.json_path:
        write_json(Path(outputs.json_path), results, redact, rollout_json)
    if outputs.junit_path:
        write_junit(Path(outputs.junit_path), title, results, redact,
                    Path(logs_dir) if write_logs else None, options.run_id)
    return status if status != EXIT_OK else exit_status(results)


class _sigterm_as_interrupt:
    """Treat SIGTERM like Ctrl-C during a run, so both stop hosts and keep the recap."""

    previous: Union[Callable[[int, Optional[FrameType]], Any], int, None]

    def __enter__(self) -> _sigterm_as_interrupt:
        self.previous = signal.getsignal(signal.SIGTERM)
        try:
            signal.signal(signal.SIGTERM, self._raise)
        except ValueError:  # not the main thread (tests calling in): leave it as it is
            self.previous = None
        return self

    @staticmethod
    def _raise(signum: int, frame: Optional[FrameType]) -> None:
        raise KeyboardInterrupt()

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def facts(host: Optional[str], inventory: str, json_path: Optional[str] = None,
          limit: Optional[str] = None, list_hosts: bool = False) -> int:
    """`gpuprov facts`: gather and print facts of the selected hosts."""
    outputs = Outputs(json_path)
    try:
        outputs.check()
        inv, hosts, _ = load_for_run(inventory, host, None, {}, limit)
    except InputError as exc:
        return fail_input(exc)
    if list_hosts:
        return print_hosts(hosts, outputs.stream)
    redact = Redactor()
    reporter = Reporter(redact, stream=outputs.stream)
    reporter.set_hosts([h.name for h in hosts])
    options = RunOptions(run_id=new_run_id(), logs_dir=None)
    interrupted = False
    try:
        with _sigterm_as_interrupt():
            results = Run(inv, hosts, options, reporter, redact).execute(GatherFacts())
    except RunInterrupted as exc:  # Ctrl-C or SIGTERM: what came back is still shown
        results, interrupted = exc.results, True
        reporter.note("interrupted: stopped the hosts; the facts that came back are below")
    finally:
        reporter.close()
    rows = []
    for fact in FACTS:
        row = [fact]
        for result in results.values():
            value = (result.facts or {}).get(fact, "")
            row.append(", ".join(value) if isinstance(value, list) else str(value))
        rows.append(row)
    reporter.table(["fact"] + list(results), rows)
    for name, result in results.items():
        if result.unreachable:
            reporter.unreachable(name, result.message)
    if json_path:
        data = {"hosts": {name: ({"facts": r.facts} if r.facts is not None else
                                 {"unreachable": True, "message": r.message})
                          for name, r in results.items()}}
        text = json.dumps(data, indent=2) + "\n"
        if json_path == "-":
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            write_atomic(Path(json_path), text)
    if interrupted:
        return EXIT_INTERRUPTED
    if all(r.facts is not None for r in results.values()):
        return EXIT_OK
    return EXIT_UNREACHABLE if any(r.unreachable for r in results.values()) else EXIT_STEP_FAILED
