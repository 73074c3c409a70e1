"""`gpuprov sandbox up|down|status`: throwaway local hosts for trying recipes (remote/sandbox/)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional, Union

from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_INPUT, EXIT_OK
from .assembly import fail_input


def run(action: Optional[str], hosts: Union[int, str, None] = None,
        state_dir: str = ".sandbox", offline: bool = False) -> int:
    """`gpuprov sandbox` (module docstring)."""
    from .. import sandbox as sb

    try:
        if action == "up":
            _up(hosts, Path(state_dir), offline)
        elif hosts is not None or offline:
            raise InputError(f"{'--hosts' if hosts is not None else '--offline'} is for 'sandbox up' "
                             f"only, not {action!r}")
        elif action == "down":
            sb.down(Path(state_dir))
        elif action == "status":
            _status(sb.status(Path(state_dir)))
        else:
            raise InputError(f"sandbox action must be up, down or status, not {action!r}")
    except InputError as exc:
        return fail_input(exc)
    except sb.SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def _up(hosts: Union[int, str, None], state_dir: Path, offline: bool) -> None:
    from .. import sandbox

    try:
        count = int(2 if hosts is None else hosts)
    except ValueError:
        count = 0
    if count < 1:
        raise InputError(f"--hosts must be a whole number of 1 or more, not {hosts!r}")
    inventory = sandbox.up(count, state_dir, offline=offline)
    print(f"{count} {'offline ' if offline else ''}sandbox host(s) up; inventory {inventory} "
          "(inventory.yaml includes it: try gpuprov facts --host sandbox)")


def _status(hosts_now: list[dict[str, Any]]) -> None:
    if not hosts_now:
        print("no sandbox hosts (gpuprov sandbox up starts them)")
    for entry in hosts_now:
        print(f"{entry['name']}  {entry['user']}@{entry['address']}:{entry['port']}  "
              f"{entry['state'] if entry['running'] else 'stopped'}")
