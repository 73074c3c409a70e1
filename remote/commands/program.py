"""The `gpuprov` command's program: Invoke's Program over the tasks of `tasks.py`, loaded from
the installed package (see `remote.ground.paths`), so it works from any folder and `tasks.py`
stays the one definition of the tasks (`invoke TASK` in a clone runs the same ones). The loading
goes one way: the program loads tasks.py by path, and tasks.py imports the commands' table,
never the program (a task's positional word that took `-h/--help` is answered here, with the
task's help, before any task runs).

The top-level command line is gpuprov's own: `-h/--help [TASK]`, `-V/--version` and `--list`.
Invoke's other core options (`--dry`, `--echo`, `--hide`, `--pty`, `-w`, `-T`, the sudo
prompt, `--write-pyc`, `-f` config files...) do nothing for gpuprov's SSH work, so they are
refused in one line with exit 2, like every other bad option. No tasks file is searched for in
the current folder, and a reader that goes away (`| head`) ends the command quietly.
"""
from __future__ import annotations

import importlib.util
import inspect
import re
from typing import Optional

from invoke.collection import Collection
from invoke.exceptions import Exit, ParseError
from invoke.parser.argument import Argument
from invoke.program import Program

from ..ground import paths
from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_INPUT
from ..ground.exitcodes import HELP as EXIT_HELP

_UNKNOWN = re.compile(r"No idea what '(.*)' is!")


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
    """Invoke's Program with gpuprov's own core options, help, and parse errors that exit 2."""

    def core_args(self) -> list[Argument]:
        return [Argument(names=("help", "h"), optional=True,
                         help="show this help; with a task name, that task's options"),
                Argument(names=("version", "V"), kind=bool, default=False,
                         help="show gpuprov's version"),
                Argument(names=("list",), kind=bool, default=False,
                         help="list the tasks and what each does")]

    def parse_core_args(self) -> None:
        super().parse_core_args()
        # Invoke's own code still reads its other core options: give it their defaults.
        parsed = self.core[0].args
        for arg in Program.core_args(self) + Program.task_args(self):
            if arg.name not in parsed:
                parsed[arg.name] = arg

    def parse_core(self, argv: Optional[list[str]]) -> None:
        try:
            super().parse_core(argv)
        except ParseError as exc:
            raise Exit(self._error(exc, "--help"), code=EXIT_INPUT) from None

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except ParseError as exc:
            raise Exit(self._error(exc, "TASK --help"), code=EXIT_INPUT) from None

    def parse_cleanup(self) -> None:
        try:
            super().parse_cleanup()
        except ParseError as exc:
            raise Exit(self._error(exc, "--help"), code=EXIT_INPUT) from None

    def _error(self, exc: ParseError, see: str) -> str:
        unknown = _UNKNOWN.fullmatch(str(exc))
        if unknown and unknown.group(1).startswith("-"):
            return (f"error: {unknown.group(1)} is not a gpuprov option "
                    f"(see {self.binary} {see})")
        if unknown:
            return f"error: {unknown.group(1)!r} is not a gpuprov task (see {self.binary} --help)"
        return f"error: {exc} (see {self.binary} {see})"

    def print_help(self) -> None:
        print(f"Usage: {self.binary} [-h | -V | --list] TASK [options]\n"
              f"       {self.binary} TASK --help    (the task's options)\n")
        print("Tasks:\n")
        self.print_columns([(name, _first_line(self.collection[name]))
                            for name in sorted(self.collection.task_names)])
        print("Options:\n")
        self.print_columns(self.initial_context.help_tuples())
        print(_wrapped(EXIT_HELP))

    def print_task_help(self, name: str) -> None:
        ctx = self.parser.contexts[name]
        positional = [arg.name.upper() for arg in ctx.positional_args]
        counted = {arg.name for arg in ctx.flags.values() if arg.incrementable}
        tuples = [(_counted_spec(spec) if any(f"--{c}" in spec for c in counted) else spec, text)
                  for spec, text in ctx.help_tuples()
                  if not any(spec.startswith(f"--{p.lower()}=") for p in positional)]
        usage = " ".join([f"Usage: {self.binary} {name} [--options]"] + positional)
        print(usage + "\n")
        for line in (inspect.getdoc(self.collection[name]) or "").splitlines():
            print(self.leading_indent + line if line.strip() else "")
        print("")
        if positional:
            self.print_columns([(p, arg.help) for p, arg in
                                zip(positional, ctx.positional_args)])
        print("Options:")
        self.print_columns(tuples or [("none", "")])
        if name not in ("report", "sandbox"):
            print(_wrapped(EXIT_HELP))

    def execute(self) -> None:
        """Run the tasks parsed; a positional word that took `-h`/`--help` (`gpuprov sandbox
        --help`) shows its task's help instead, and no task runs."""
        for ctx in self.tasks:
            if ctx.name and any(arg.value in ("-h", "--help") for arg in ctx.positional_args):
                self.print_task_help(ctx.name)
                return
        super().execute()

    def list_tasks(self) -> None:
        self.print_columns([(name, _first_line(self.collection[name]))
                            for name in sorted(self.collection.task_names)])


def _counted_spec(spec: str) -> str:
    """`-v, --verbose` for a counted flag, which Invoke shows as taking an INT."""
    return spec.replace(" INT", "").replace("=INT", "")


def _first_line(task: object) -> str:
    return (inspect.getdoc(task) or "").split("\n")[0]


def _wrapped(text: str) -> str:
    import textwrap

    return textwrap.fill(text, width=88) + "\n"
