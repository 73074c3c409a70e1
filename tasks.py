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
    },
)
def provision(c, host, recipe=RECIPE, inventory=INVENTORY, check=False, tags="", var=None,
              forks=16, json=None, ask_become_pass=False):
    """Apply a recipe to hosts over SSH, idempotently and in parallel, with a recap."""
    from remote import cli

    _exit(cli.provision(host=host, recipe=recipe, inventory=inventory, check=check, tags=tags,
                        var=var, forks=forks, json_path=json, ask_become_pass=ask_become_pass))


@task(help={"host": "hosts to query: a name, a group, a comma list, a glob, or 'all'",
            "inventory": f"inventory file (default {INVENTORY})",
            "json": "also write the facts as JSON to this file"})
def facts(c, host, inventory=INVENTORY, json=None):
    """Gather and show facts (OS, CPUs, memory, GPUs, driver, CUDA, cuDNN...) in one round trip."""
    from remote import cli

    _exit(cli.facts(host=host, inventory=inventory, json_path=json))
