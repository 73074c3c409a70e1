"""Invoke tasks: the command line of gpuprov. Thin: options in, remote/ does the work, exit out.

The installed `gpuprov` command runs these same tasks (remote/program.py); in a clone `invoke
TASK` does too. `gpuprov --list` lists them, `gpuprov TASK --help` shows each one's options.
Options are long only (no short flags: `-h` is always help), so none is taken by accident.
"""
from functools import partial

from invoke import Exit, task

INVENTORY = "./inventory.yaml, else ~/.config/gpuprov/inventory.yaml"
RECIPE = "site.yaml shipped with gpuprov"
EXIT_INPUT = 2

# Every option is a flag (`--host gpu1`), never a positional word, so `TASK --help` is help and
# not a host named '--help'; no short flags, so `-h` stays help.
task = partial(task, positional=[], auto_shortflags=False)


def _exit(status: int) -> None:
    if status:
        raise Exit(code=status)


def _need_host(host, task_name: str) -> None:
    if host is None:
        raise Exit(f"error: {task_name}: --host is required, e.g. --host gpu1 "
                   f"(see {task_name} --help)", code=EXIT_INPUT)


def _inventory(given):
    from remote import paths
    from remote.errors import InputError

    try:
        return paths.inventory_path(given)
    except InputError as exc:
        raise Exit(f"error: {exc}", code=EXIT_INPUT) from None


@task(
    iterable=["var"],
    help={
        "host": "hosts to act on: a name, a group, a comma list, a glob, or 'all'",
        "recipe": f"recipe file, or the name of a shipped one such as cuda-wheels.yaml "
                  f"(default {RECIPE})",
        "inventory": f"inventory file (default {INVENTORY})",
        "check": "probe only: report what would change and the exact commands; change nothing",
        "tags": "run only steps with one of these tags (comma list); 'always' steps run too",
        "var": "set a variable, NAME=VALUE (repeatable; overrides every other level)",
        "forks": "how many hosts to work on at once (default 16)",
        "json": "also write per-host results as JSON to this file",
        "ask-become-pass": "prompt for the sudo password (else $GPUPROV_BECOME_PASSWORD)",
        "validate": "after the recipe, push validate/ and run it (default; --no-validate skips)",
        "suite": "validation suite: quick (default) or full",
    },
)
def provision(c, host=None, recipe=None, inventory=None, check=False, tags="", var=None,
              forks=16, json=None, ask_become_pass=False, validate=True, suite="quick"):
    """Apply a recipe to hosts over SSH, idempotently and in parallel, then validate them."""
    from remote import cli, paths

    _need_host(host, "provision")
    inventory = _inventory(inventory)
    _exit(cli.provision(host=host, recipe=paths.recipe_path(recipe), inventory=inventory,
                        check=check, tags=tags, var=var, forks=forks, json_path=json,
                        ask_become_pass=ask_become_pass, validate=validate, suite=suite))


@task(help={"host": "hosts to query: a name, a group, a comma list, a glob, or 'all'",
            "inventory": f"inventory file (default {INVENTORY})",
            "json": "also write the facts as JSON to this file"})
def facts(c, host=None, inventory=None, json=None):
    """Gather and show facts (OS, CPUs, memory, GPUs, driver, CUDA, cuDNN...) in one round trip."""
    from remote import cli

    _need_host(host, "facts")
    inventory = _inventory(inventory)
    _exit(cli.facts(host=host, inventory=inventory, json_path=json))


@task(
    iterable=["var"],
    help={"host": "hosts to validate: a name, a group, a comma list, a glob, or 'all'",
          "inventory": f"inventory file (default {INVENTORY})",
          "suite": "quick (system, cuDNN, torch, a few models) or full (every check)",
          "json": "also write per-host results as JSON to this file",
          "var": "set a variable, NAME=VALUE (e.g. validate_python=/opt/venv/bin/python)",
          "forks": "how many hosts at once (default 16)"},
)
def validate(c, host=None, inventory=None, suite="quick", json=None, var=None, forks=16):
    """Push validate/ to hosts, run it there, pull the results into logs/<host>/<run>/."""
    from remote import cli

    _need_host(host, "validate")
    inventory = _inventory(inventory)
    _exit(cli.validate(host=host, inventory=inventory, suite=suite, json_path=json, var=var,
                       forks=forks))


@task(help={"host": "hosts to fetch from", "inventory": f"inventory file (default {INVENTORY})"})
def logs(c, host=None, inventory=None):
    """Pull what the last validation left on hosts into logs/<host>/<run>/."""
    from remote import cli

    _need_host(host, "logs")
    inventory = _inventory(inventory)
    _exit(cli.logs(host=host, inventory=inventory))


@task(help={"logs": "folder of logs/<host>/<run>/ to read (default logs)",
            "out": "where to write the report (default reports/<time>/)",
            "baseline": "compare with this run id, host, or HOST/RUN instead of each host's previous run",
            "threshold": "percent slower that counts as an outlier or a regression "
                         "(default: 15 for outliers, 10 for regressions)",
            "fail-on-outlier": "exit 1 when a slow host or a regression is flagged"})
def report(c, logs="logs", out=None, baseline=None, threshold=None, fail_on_outlier=False):
    """Compare benchmark logs across hosts and runs: merged table, slow hosts, regressions, HTML."""
    from remote import cli

    _exit(cli.report(logs=logs, out=out, baseline=baseline, threshold=threshold,
                     fail_on_outlier=fail_on_outlier))


@task(help={"cuda": "only this row of playbooks/stack.yaml (default: every row)",
            "torch-index": "lock the row's torch from this index (PyTorch's, e.g. "
                           "https://download.pytorch.org/whl/cu130; needs --cuda)",
            "out": "folder to write the locks to (default: playbooks/locks shipped with gpuprov)"})
def lock(c, cuda=None, torch_index=None, out=None):
    """Generate the hash-pinned locks of the wheel route with uv (uv pip compile --generate-hashes)."""
    from pathlib import Path

    from remote.lock import LOCKS_DIR, run_lock

    if torch_index and not cuda:
        raise Exit("error: lock: --torch-index needs --cuda (one row's torch)", code=EXIT_INPUT)
    _exit(run_lock(cuda=cuda, torch_index=torch_index, out_dir=Path(out) if out else LOCKS_DIR))


@task(positional=["action"],
      help={"action": "up (start throwaway local hosts) or down (stop them, remove every mount)",
            "hosts": "how many hosts for 'up' (default 2): sandbox1..sandboxN"})
def sandbox(c, action=None, hosts=2):
    """Throwaway local Debian 12 hosts (needs root) for trying recipes: sandbox up|down."""
    from remote import cli

    if action in ("-h", "--help"):  # the positional word took the flag: show the help anyway
        from remote.program import print_task_help

        print_task_help("sandbox")
        return

    _exit(cli.sandbox(action=action, hosts=hosts))
