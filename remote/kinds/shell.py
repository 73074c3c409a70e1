"""The `shell` step kind."""
from __future__ import annotations

import re

from ..config.schema import Arg
from ..errors import PlanError
from .base import Args, Command, Kind, q, with_env

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # used with fullmatch: `$` would pass a final newline


class Shell(Kind[None]):
    """Run a command. `creates`/`unless` (common keys) make it idempotent."""

    name = "shell"
    spec = {
        "cmd": Arg((str,), required=True),
        "chdir": Arg((str,)),
        "env": Arg((dict,)),
        "executable": Arg((str,), "/bin/sh"),
    }
    scalar_field = "cmd"
    shell_fields = ("cmd",)

    def parse(self, out: str) -> None:
        return None

    def plan(self, args: Args, fact: None) -> list[Command]:
        parts = []
        if args["chdir"]:
            parts.append(f"cd {q(args['chdir'])} || exit 1")
        env = {}
        for key, value in (args["env"] or {}).items():
            if not ENV_NAME.fullmatch(str(key)):
                raise PlanError(f"env name {key!r} is not a valid variable name")
            env[str(key)] = str(value)
        parts.append(args["cmd"])
        # The values travel on stdin, never in the script (a command line on the host).
        return [with_env("\n".join(parts), env, display=args["cmd"],
                         shell=args["executable"] or "/bin/sh")]
