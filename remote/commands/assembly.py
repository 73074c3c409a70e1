"""The one run assembly: what every command that touches hosts gets its Run from.

`assemble` seeds the redactor with every secret the run knows before any line is shown (the
become password, each selected host's values of the inventory's `secrets:` vars, from every
layer and `--var`, and the run's own secrets such as fabric's iperf3 password; `Run` adds the
inventory's SSH and sudo passwords), makes the reporter on the stream the exports leave free,
and the run's options. `Outputs` are the exports a run writes besides the terminal (a row
each in `remote.commands.exports`).
"""
from __future__ import annotations

import getpass
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, TextIO, Union

from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_INPUT, EXIT_OK
from ..ground.forks import DEFAULT_FORKS
from .exports import CommandExport, Finished, offered

if TYPE_CHECKING:
    from ..config.inventory import Host, Inventory
    from ..engine.run import Run, RunOptions
    from ..kinds.route import BundleRoute
    from ..output.recap import Reporter
    from ..output.runlog import Redactor

BECOME_PASSWORD_ENV = "GPUPROV_BECOME_PASSWORD"


def fail_input(exc: InputError) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_INPUT


def print_hosts(hosts: list[Host], stream: TextIO) -> int:
    """`--list-hosts`: the selected hosts, as ansible-playbook --list-hosts prints them."""
    stream.write(f"  hosts ({len(hosts)}):\n" + "".join(f"    {h.name}\n" for h in hosts))
    return EXIT_OK


def become_password(ask: bool) -> Optional[str]:
    if ask:
        return getpass.getpass("become (sudo) password: ")
    return os.environ.get(BECOME_PASSWORD_ENV) or None  # empty means "none given"


@dataclass
class Outputs:
    """Where a run's results go besides the terminal: the paths given for the exports its
    command offers (`remote.commands.exports`, by their `run` keyword: `json_path`, ...; '-'
    for an export to stdout alone: the step lines then go to stderr), and how much the lines
    show."""

    command: str = ""
    paths: dict[str, str] = field(default_factory=dict)
    verbose: int = 0
    diff: bool = False
    list_hosts: bool = False

    @classmethod
    def of(cls, command: str, given: dict[str, Optional[str]], verbose: int = 0,
           diff: bool = False, list_hosts: bool = False) -> Outputs:
        """`command`'s outputs from its `run` keywords `given` (None: not asked for); a keyword
        no export of the command takes is a TypeError, as for any function."""
        params = {row.param for row in offered(command)}
        for key in given:
            if key not in params:
                raise TypeError(f"{command}: run() got an unexpected keyword argument {key!r}")
        return cls(command, {k: v for k, v in given.items() if v is not None}, verbose, diff,
                   list_hosts)

    def _asked(self) -> list[tuple[CommandExport, str]]:
        return [(row, self.paths[row.param]) for row in offered(self.command)
                if row.param in self.paths]

    @property
    def stream(self) -> TextIO:
        to_stdout = any(path == "-" and row.stdout for row, path in self._asked())
        return sys.stderr if to_stdout else sys.stdout

    def check(self) -> None:
        for row, path in self._asked():
            if path == "-" and not row.stdout:
                raise InputError(f"{row.option} needs a file name ({row.dash})" if row.dash else
                                 f"{row.option} needs a file name, not '-'")
            if path != "-" and (not path or Path(path).is_dir()):
                raise InputError(f"{row.option} needs a file name, not {path!r}")

    def write(self, done: Finished) -> None:
        """Each export asked for, in the table's order."""
        for row, path in self._asked():
            row.write(done, path)


@dataclass
class Assembly:
    """A command's Run and what goes with it."""

    run: Run
    reporter: Reporter
    redact: Redactor
    options: RunOptions


def redactor(inventory: Inventory, hosts: list[Host], extra_vars: dict[str, Any],
             secrets: Iterable[Optional[str]] = ()) -> Redactor:
    """What masks the run's secrets: `secrets` (the become password, a run's own), and each
    selected host's values of the inventory's `secrets:` vars (every layer, and `--var`)."""
    from ..config.templating import is_template
    from ..engine.varlayers import layered_vars
    from ..output.runlog import Redactor

    redact = Redactor([value for value in secrets if value])
    if inventory.secrets:
        for host in hosts:
            raw = layered_vars(inventory, host, extra_vars)[0]
            for name in sorted(inventory.secrets & raw.keys()):
                if not is_template(raw[name]):  # a template's value: the session masks it rendered
                    redact.add(raw[name])
    return redact


def assemble(inventory: Inventory, hosts: list[Host], outputs: Outputs, *,
             extra_vars: Optional[dict[str, Any]] = None, password: Optional[str] = None,
             secrets: Iterable[Optional[str]] = (), forks: int = DEFAULT_FORKS,
             check: bool = False, logs_dir: Optional[Path] = None,
             bundle: Optional[BundleRoute] = None) -> Assembly:
    """The Run of a command over `hosts`, its reporter on `outputs`' stream, its redactor
    (`redactor`) and options (a new run id; `logs_dir` None: no run folder)."""
    from ..engine.run import Run, RunOptions
    from ..ground.runid import new_run_id
    from ..output.recap import Reporter

    extra_vars = extra_vars or {}
    redact = redactor(inventory, hosts, extra_vars, (password, *secrets))
    reporter = Reporter(redact, stream=outputs.stream, check=check, verbose=outputs.verbose,
                        diff=outputs.diff)
    options = RunOptions(check=check, extra_vars=extra_vars, forks=forks, become_password=password,
                         logs_dir=logs_dir, run_id=new_run_id(), bundle=bundle)
    return Assembly(Run(inventory, hosts, options, reporter, redact), reporter, redact, options)


class sigterm_as_interrupt:
    """Treat SIGTERM like Ctrl-C during a run, so both stop hosts and keep the recap."""

    previous: Union[Callable[[int, Optional[FrameType]], Any], int, None]

    def __enter__(self) -> sigterm_as_interrupt:
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
