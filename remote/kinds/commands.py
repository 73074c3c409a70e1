"""What a kind's `plan` yields: typed commands, as pyinfra's `api/command.py` does
(StringCommand, FileUploadCommand, FunctionCommand: pyinfra-dev/pyinfra src/pyinfra/api/command.py).
The engine executes these types and never asks which kind planned them:

- `Command`: a shell command run on the host (the common case);
- `RebootAndWait`: reboot the host and wait until it is back with a new boot_id;
- `LocalAction`: a check on the control side (`assert`), run in check mode too, never a change.

A new kind plans with these and needs no engine edit; a new command type is a class here and
its branch in the engine's executor (engine/jobs/apply.py `_run_planned`). Each type is a
dataclass: add fields with defaults to extend one (a secret passed on stdin, a lock's pin).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union


@dataclass
class Command:
    """One shell command for the host. `display` is what plans and logs show (defaults to
    script)."""

    script: str
    stdin: Optional[bytes] = None
    display: str = ""
    shell: str = "/bin/sh"

    def shown(self) -> str:
        return self.display or self.script


@dataclass
class RebootAndWait:
    """Reboot the host, reconnect, and wait up to `timeout` seconds for a new boot_id."""

    timeout: float

    def shown(self) -> str:
        return f"reboot and wait up to {self.timeout:g} s for a new boot_id"


@dataclass
class LocalAction:
    """A decision on the control side: `run(context)` gives (ok, message), with the host's
    template context. It changes nothing, so it runs in check mode too. `warning`: shown as the
    host's warning when the action passes (an apt step without its lock)."""

    run: Callable[[dict[str, Any]], tuple[bool, str]]
    display: str
    warning: str = ""

    def shown(self) -> str:
        return self.display


Planned = Union[Command, RebootAndWait, LocalAction]
