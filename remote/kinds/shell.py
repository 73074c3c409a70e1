"""The `shell` step kind."""
from __future__ import annotations

import re

from ..errors import PlanError
from .base import Command, Kind, q


class Shell(Kind):
    """Run a command. `creates`/`unless` (common keys) make it idempotent."""

    name = "shell"
    fields = {"cmd": str, "chdir": str, "env": dict, "executable": str}
    required = ("cmd",)
    scalar_field = "cmd"
    shell_fields = ("cmd",)

    def plan(self, args, probe):
        parts = []
        if args.get("chdir"):
            parts.append(f"cd {q(args['chdir'])} || exit 1")
        for key, value in (args.get("env") or {}).items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(key)):
                raise PlanError(f"env name {key!r} is not a valid variable name")
            parts.append(f"export {key}={q(str(value))}")
        parts.append(args["cmd"])
        return [Command("\n".join(parts), display=args["cmd"],
                        shell=args.get("executable") or "/bin/sh")]
