"""The `gpuprov` console script (pyproject.toml's `[project.scripts]`): runs the program of
remote/commands/program.py over the tasks of `tasks.py`, and ends quietly when its reader goes
away (`| head`).
"""
from __future__ import annotations

import os
import sys

from .commands.program import GpuprovProgram, load_tasks
from .ground.exitcodes import EXIT_BROKEN_PIPE

__all__ = ["GpuprovProgram", "load_tasks", "main"]


def main() -> None:
    """Entry point of the `gpuprov` console script."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("gpuprov")
    except PackageNotFoundError:  # run from a clone without installing
        release = "unknown"
    try:
        GpuprovProgram(namespace=load_tasks(), name="gpuprov", binary="gpuprov",
                       version=release).run()
        sys.stdout.flush()
    except BrokenPipeError:
        # `gpuprov provision -h | head -3`: the reader is done. Point stdout at /dev/null so
        # Python's flush at exit does not fail again (docs.python.org/3/library/signal.html,
        # "Note on SIGPIPE").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)


if __name__ == "__main__":  # python3 -m remote.program: the gpuprov command without its script
    main()
