"""The `gpuprov` command: Invoke's own Program over the tasks of `tasks.py`, loaded from the
installed package (see `remote.paths`), so it works from any folder and `tasks.py` stays the one
definition of the tasks (`invoke TASK` in a clone runs the same ones).

Differences from the `invoke` command, all on purpose: a bad option exits 2 (the exit status
the other input errors have) instead of Invoke's 1, and no tasks file is searched for in the
current folder.
"""
from __future__ import annotations

import importlib.util
from typing import Optional

from invoke.collection import Collection
from invoke.exceptions import Exit, ParseError
from invoke.program import Program

from . import paths
from .errors import InputError

EXIT_INPUT = 2


def load_tasks() -> Collection:
    """The collection of `tasks.py` shipped with the package (a clone's own in an editable
    install), imported by file path: a `tasks` module elsewhere on sys.path never shadows it."""
    spec = importlib.util.spec_from_file_location("gpuprov_tasks", paths.TASKS_FILE)
    if spec is None or spec.loader is None:
        raise InputError(f"cannot load the tasks file {paths.TASKS_FILE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Collection.from_module(module)


class GpuprovProgram(Program):
    """Invoke's Program whose parse errors (unknown option, missing value) exit 2, one line."""

    def parse_core(self, argv: Optional[list[str]]) -> None:
        try:
            super().parse_core(argv)
        except ParseError as exc:
            raise Exit(f"error: {exc} (see {self.binary} --help)", code=EXIT_INPUT) from None

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except ParseError as exc:
            raise Exit(f"error: {exc} (see {self.binary} TASK --help)", code=EXIT_INPUT) from None


def print_task_help(task_name: str) -> None:
    """Print a task's help as `gpuprov TASK --help` does (for a task whose positional word
    would otherwise swallow `--help`)."""
    program = GpuprovProgram(namespace=load_tasks(), name="gpuprov", binary="gpuprov")
    program.run(["gpuprov", "--help", task_name], exit=False)


def main() -> None:
    """Entry point of the `gpuprov` console script."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("gpuprov")
    except PackageNotFoundError:  # run from a clone without installing
        release = "unknown"
    GpuprovProgram(namespace=load_tasks(), name="gpuprov", binary="gpuprov",
                   version=release).run()
