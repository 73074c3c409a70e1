"""The command line as Invoke users expect it: `TASK --help` is help for every task, under both
`gpuprov` and `invoke`; a missing --host or an unknown option exits 2 with one line; the
default inventory and recipes are found from any folder."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from remote.program import load_tasks
from tests.conftest import REPO, Result, invoke

TASKS = sorted(load_tasks().task_names)
HOST_TASKS = ["evidence", "facts", "logs", "provision", "validate"]


def gpuprov(*args, cwd=None, home=None, timeout=120) -> Result:
    """Run the `gpuprov` program as its console script does, in a subprocess."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if home is not None:
        env["HOME"] = str(home)
    proc = subprocess.run([sys.executable, "-c", "from remote.program import main; main()", *args],
                          cwd=cwd or "/", env=env, capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def test_every_task_is_covered():
    assert set(HOST_TASKS) < set(TASKS) and {"report", "sandbox"} < set(TASKS)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("help_flag", ["--help", "-h"])
def test_help_after_the_task_name(task, help_flag):
    doc_start = load_tasks()[task].__doc__.split()[:3]
    for result in (gpuprov(task, help_flag), invoke(task, help_flag)):
        assert result.rc == 0, result.out + result.err
        assert f" {task} [--options]" in result.out and " ".join(doc_start) in result.out


@pytest.mark.parametrize("task", HOST_TASKS)
def test_missing_host_is_one_line_and_exit_2(task):
    for result in (gpuprov(task), invoke(task)):
        assert result.rc == 2
        assert result.err.strip() == (f"error: {task}: --host is required, e.g. --host gpu1 "
                                      f"(see {task} --help)")


def test_unknown_option_is_one_line_and_exit_2():
    result = gpuprov("provision", "--host", "localhost", "--bogus")
    assert result.rc == 2
    assert result.err.strip() == "error: --bogus is not a gpuprov option (see gpuprov TASK --help)"
    result = gpuprov("provision", "--host")
    assert result.rc == 2 and len(result.err.strip().splitlines()) == 1


def test_short_flags_are_ansibles_and_h_stays_help():
    result = gpuprov("provision", "--help")
    shorts = {line.split()[0].rstrip(",") for line in result.out.splitlines()
              if line.startswith("  -") and not line.startswith("  --")}
    assert shorts == {"-C", "-D", "-e", "-f", "-i", "-K", "-l", "-t", "-v"}, shorts


def test_without_any_inventory_the_error_says_how_to_make_one(work):
    result = gpuprov("facts", "--host", "localhost", cwd=work, home=work)
    assert result.rc == 2
    assert result.err.strip() == (
        "error: no inventory: neither ./inventory.yaml nor ~/.config/gpuprov/inventory.yaml "
        f"exists; mkdir -p ~/.config/gpuprov && cp {REPO}/inventory.yaml "
        "~/.config/gpuprov/inventory.yaml, then edit it (format: docs/reference/inventory.md), or "
        "pass --inventory PATH")


def test_user_inventory_and_shipped_recipe_from_any_folder(work):
    """From a folder with no inventory.yaml: the user's inventory is used, and a recipe named
    by its file name is the one shipped with the package."""
    config = work / ".config" / "gpuprov"
    config.mkdir(parents=True)
    (config / "inventory.yaml").write_text("hosts:\n  here: {connection: local}\n")
    (work / "elsewhere").mkdir()
    result = gpuprov("provision", "--host", "here", "--recipe", "site.yaml", "--check",
                     "--no-validate", cwd=work / "elsewhere", home=work)
    assert result.rc == 0, result.out + result.err
    assert "GPU stack: 1 host(s), check (nothing will change)" in result.out


def test_local_inventory_wins_over_the_users(work):
    config = work / ".config" / "gpuprov"
    config.mkdir(parents=True)
    (config / "inventory.yaml").write_text("hosts:\n  theirs: {connection: local}\n")
    (work / "inventory.yaml").write_text("hosts:\n  mine: {connection: local}\n")
    result = gpuprov("facts", "--host", "theirs", cwd=work, home=work)
    assert result.rc == 2 and "matches no host" in result.err
