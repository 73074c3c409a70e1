"""Command-line glue between `tasks.py` and the control side.

Each function takes the options as the user gave them, checks everything that can be checked
before contacting a host (inventory, selection, recipe, templates, options), runs, prints, and
returns the exit status: 0 every selected host succeeded, 1 a host failed or was unreachable,
2 bad input (one line on stderr naming the file and line), 130 interrupted.
"""
from __future__ import annotations

import getpass
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterable, Optional, Union

from .errors import InputError
from .engine.facts import FACT_NAMES, FACTS
from .engine.jobs import Job
from .engine.jobs.apply import ApplyRecipe
from .engine.jobs.manifest import RecordStack
from .engine.jobs.gather import GatherFacts
from .engine.jobs.logs import PullLogs
from .engine.jobs.validate import SUITES, Validate
from .engine.results import write_json
from .fileio import write_atomic
from .engine.run import Run, RunInterrupted, RunOptions
from .engine.session import layered_vars
from .kinds import KINDS
from .config.templating import check_vars
from .config.inventory import Host, Inventory, load_inventory
from .output.recap import Reporter
from .config.recipe import Recipe, check_names, load_recipe
from .output.runlog import Redactor, new_run_id

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
BECOME_PASSWORD_ENV = "GPUPROV_BECOME_PASSWORD"
RESERVED = ("host", "facts", "vars")
Checked = tuple[Inventory, list[Host], Optional[Recipe]]  # what `load_and_check` returns


def fail_input(exc: InputError) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_INPUT


def parse_vars(pairs: Optional[Iterable[str]]) -> dict[str, Any]:
    """`--var k=v` pairs as a dict. Values stay strings as typed (so 12.8 stays "12.8"), except
    true/false, which become booleans so that `when: with_torch` means what it says."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--var {pair!r} must look like NAME=VALUE")
        if not key.isidentifier():
            raise InputError(f"--var {pair!r}: {key!r} is not a valid variable name")
        booleans = {"true": True, "false": False}
        out[key] = booleans.get(value.strip().lower(), value)
    return out


def parse_tags(text: Optional[str]) -> Optional[set[str]]:
    tags = {t.strip() for t in (text or "").split(",") if t.strip()}
    return tags or None


def check_forks(forks: Union[int, str]) -> int:
    try:
        value = int(forks)
    except (TypeError, ValueError):
        raise InputError(f"--forks must be a whole number, not {forks!r}") from None
    if value < 1:
        raise InputError("--forks must be 1 or more")
    return value


def become_password(ask: bool) -> Optional[str]:
    if ask:
        return getpass.getpass("become (sudo) password: ")
    return os.environ.get(BECOME_PASSWORD_ENV) or None  # empty means "none given"


def load_and_check(inventory_path: str, selection: str, recipe_path: Optional[str],
                   extra_vars: dict[str, Any]) -> Checked:
    """Inventory, selected hosts and recipe, all checked; raises `InputError`."""
    inventory = load_inventory(inventory_path)
    hosts = inventory.select(selection)
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


def _run_inputs(inventory: str, host: str, recipe: Optional[str], var: Optional[list[str]],
                forks: Union[int, str], suite: str) -> tuple[dict[str, Any], int, str, Checked]:
    """The options every run shares, checked: (vars, forks, suite, (inventory, hosts, recipe))."""
    extra_vars = parse_vars(var)
    return (extra_vars, check_forks(forks), check_suite(suite),
            load_and_check(inventory, host, recipe, extra_vars))


def provision(host: str, recipe: str, inventory: str, check: bool = False, tags: str = "",
              var: Optional[list[str]] = None, forks: Union[int, str] = 16,
              json_path: Optional[str] = None, ask_become_pass: bool = False,
              logs_dir: str = "logs", validate: bool = True, suite: str = "quick") -> int:
    """`invoke provision`: run a recipe on the selected hosts, then validate them."""
    try:
        extra_vars, forks_n, suite, (inv, hosts, rec) = _run_inputs(inventory, host, recipe,
                                                                     var, forks, suite)
    except InputError as exc:
        return fail_input(exc)
    assert rec is not None  # a recipe path was given, so it was loaded
    then = Validate(suite, Path(logs_dir)) if validate and not check else None
    job = RecordStack(ApplyRecipe(rec, parse_tags(tags), then), Path(logs_dir))
    return _execute(inv, hosts, rec.name, job, extra_vars,
                    forks_n, json_path, ask_become_pass, logs_dir, check=check)


def validate(host: str, inventory: str, suite: str = "quick", json_path: Optional[str] = None,
             var: Optional[list[str]] = None, forks: Union[int, str] = 16,
             logs_dir: str = "logs") -> int:
    """`invoke validate`: push validate/, run it on the selected hosts, pull the results."""
    try:
        extra_vars, forks_n, suite, (inv, hosts, _) = _run_inputs(inventory, host, None, var,
                                                                   forks, suite)
    except InputError as exc:
        return fail_input(exc)
    job = RecordStack(Validate(suite, Path(logs_dir)), Path(logs_dir))
    return _execute(inv, hosts, "validate", job, extra_vars, forks_n,
                    json_path, False, logs_dir)


def logs(host: str, inventory: str, logs_dir: str = "logs") -> int:
    """`invoke logs`: pull what the last validation left on each selected host."""
    try:
        inv, hosts, _ = load_and_check(inventory, host, None, {})
    except InputError as exc:
        return fail_input(exc)
    return _execute(inv, hosts, "logs", PullLogs(Path(logs_dir)), {}, 16, None, False, logs_dir,
                    write_logs=False)


def report(logs: str = "logs", out: Optional[str] = None, baseline: Optional[str] = None,
           threshold: Union[str, float, None] = None, fail_on_outlier: bool = False) -> int:
    """`invoke report`: merged table, slow hosts, regressions, pictures, HTML."""
    from .report import run_report

    kwargs: dict[str, Any] = {}  # only the percentages given; run_report has the defaults
    if threshold is not None:
        try:
            value = float(threshold)
        except ValueError:
            return fail_input(InputError(f"--threshold must be a number of percent, not {threshold!r}"))
        if value <= 0:
            return fail_input(InputError("--threshold must be more than 0"))
        kwargs.update(outlier_pct=value, regression_pct=value)
    return run_report(logs_dir=Path(logs), out_dir=Path(out) if out else None, baseline=baseline,
                      fail_on_outlier=fail_on_outlier, **kwargs)


def sandbox(action: str, hosts: Union[int, str] = 2, state_dir: str = ".sandbox") -> int:
    """`invoke sandbox up|down`: throwaway local hosts for trying recipes."""
    from . import sandbox as sb

    try:
        if action == "up":
            count = int(hosts)
            if count < 1:
                raise ValueError
            inventory = sb.up(count, Path(state_dir))
            print(f"{count} sandbox host(s) up; inventory {inventory} "
                  "(inventory.yaml includes it: try gpuprov facts --host sandbox)")
        elif action == "down":
            sb.down(Path(state_dir))
        else:
            return fail_input(InputError(f"sandbox action must be up or down, not {action!r}"))
    except ValueError:
        return fail_input(InputError(f"--hosts must be a whole number of 1 or more, not {hosts!r}"))
    except sb.SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def check_suite(suite: str) -> str:
    if suite not in SUITES:
        raise InputError(f"--suite must be one of {', '.join(SUITES)}, not {suite!r}")
    return suite


def _execute(inv: Inventory, hosts: list[Host], title: str, job: Job, extra_vars: dict[str, Any],
             forks: int, json_path: Optional[str], ask_become_pass: bool, logs_dir: str,
             check: bool = False, write_logs: bool = True) -> int:
    password = become_password(ask_become_pass)
    redact = Redactor([password] if password else [])
    for name in inv.secrets:
        if name in extra_vars:
            redact.add(extra_vars[name])
    reporter = Reporter(redact, check=check)
    reporter.set_hosts([h.name for h in hosts])
    options = RunOptions(check=check, extra_vars=extra_vars, forks=forks,
                         become_password=password,
                         logs_dir=Path(logs_dir) if write_logs else None, run_id=new_run_id())
    run = Run(inv, hosts, options, reporter, redact)
    mode = "check (nothing will change)" if check else "apply"
    reporter.note(f"{title}: {len(hosts)} host(s), {mode}, run {options.run_id}")
    status = EXIT_OK
    with _sigterm_as_interrupt():
        try:
            results = run.execute(job)
        except RunInterrupted as exc:
            results, status = exc.results, EXIT_INTERRUPTED
            reporter.note("interrupted: stopped the hosts; what they did so far is kept")
    reporter.recap(results, extra_column=job.outcome)
    if json_path:
        write_json(Path(json_path), results, redact)
    if status == EXIT_OK and not all(r.ok for r in results.values()):
        status = EXIT_FAILED
    return status


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


def facts(host: str, inventory: str, json_path: Optional[str] = None) -> int:
    """`invoke facts`: gather and print facts of the selected hosts."""
    import json

    try:
        inv, hosts, _ = load_and_check(inventory, host, None, {})
    except InputError as exc:
        return fail_input(exc)
    redact = Redactor()
    reporter = Reporter(redact)
    reporter.set_hosts([h.name for h in hosts])
    options = RunOptions(run_id=new_run_id(), logs_dir=None)
    results = Run(inv, hosts, options, reporter, redact).execute(GatherFacts())
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
        write_atomic(Path(json_path), json.dumps(data, indent=2) + "\n")
    return EXIT_OK if all(r.facts is not None for r in results.values()) else EXIT_FAILED
