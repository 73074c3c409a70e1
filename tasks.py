"""Invoke tasks: the command line of gpuprov. Thin: options in, remote/ does the work, exit out.

Run `invoke --list` for the tasks and `invoke --help TASK` for each one's options.
"""
from invoke import Exit, task

INVENTORY = "inventory.yaml"
RECIPE = "playbooks/site.yaml"


def _exit(status: int) -> None:
    if status:
        raise Exit(code=status)


@task(
    iterable=["var"],
    help={
        "host": "hosts to act on: a name, a group, a comma list, a glob, or 'all'",
        "recipe": f"recipe to apply (default {RECIPE})",
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
def provision(c, host, recipe=RECIPE, inventory=INVENTORY, check=False, tags="", var=None,
              forks=16, json=None, ask_become_pass=False, validate=True, suite="quick"):
    """Apply a recipe to hosts over SSH, idempotently and in parallel, then validate them."""
    from remote import cli

    _exit(cli.provision(host=host, recipe=recipe, inventory=inventory, check=check, tags=tags,
                        var=var, forks=forks, json_path=json, ask_become_pass=ask_become_pass,
                        validate=validate, suite=suite))


@task(help={"host": "hosts to query: a name, a group, a comma list, a glob, or 'all'",
            "inventory": f"inventory file (default {INVENTORY})",
            "json": "also write the facts as JSON to this file"})
def facts(c, host, inventory=INVENTORY, json=None):
    """Gather and show facts (OS, CPUs, memory, GPUs, driver, CUDA, cuDNN...) in one round trip."""
    from remote import cli

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
def validate(c, host, inventory=INVENTORY, suite="quick", json=None, var=None, forks=16):
    """Push validate/ to hosts, run it there, pull the results into logs/<host>/<run>/."""
    from remote import cli

    _exit(cli.validate(host=host, inventory=inventory, suite=suite, json_path=json, var=var,
                       forks=forks))


@task(help={"host": "hosts to fetch from", "inventory": f"inventory file (default {INVENTORY})"})
def logs(c, host, inventory=INVENTORY):
    """Pull what the last validation left on hosts into logs/<host>/<run>/."""
    from remote import cli

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


@task(help={"action": "up (start throwaway local hosts) or down (stop them, remove every mount)",
            "hosts": "how many hosts for 'up' (default 2): sandbox1..sandboxN"})
def sandbox(c, action, hosts=2):
    """Throwaway local Debian 12 hosts (needs root) for trying recipes: sandbox up|down."""
    from remote import cli

    _exit(cli.sandbox(action=action, hosts=hosts))
