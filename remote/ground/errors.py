"""The one error tree of the control side; every package raises from it.

    GpuprovError
    ├── InputError        bad input (inventory, recipe, selection, option, report folder):
    │                     one line ``FILE:LINE: what is wrong``, exit status 2, no host contacted
    ├── HostError         one host cannot do what was asked; that host fails, the others go on
    │   ├── Unreachable       connect, host key or login failed (the message says which)
    │   ├── HostKeyError      the host's key is unknown or changed
    │   ├── ConnectionLost    the session died while a command ran
    │   ├── CommandTimeout    a command ran past its timeout (and was killed on the host)
    │   ├── OutputTooLarge    a command's stdout, streamed into a file, passed its cap
    │   └── BecomeError       sudo refused
    ├── PlanError         the host is in a state a step cannot reach from
    ├── TemplateError     a template failed to render for one host
    ├── PullError         a pulled tarball could not be stored, or was refused
    └── Interrupted       Ctrl-C or SIGTERM stopped the work (exit status 130)

The sandbox raises `SandboxError`, its own root: it also runs as a stand-alone script.
"""
from __future__ import annotations

from pathlib import Path


class GpuprovError(Exception):
    """The root of every error gpuprov raises on purpose."""


class InputError(GpuprovError):
    """Bad input found before any host is contacted (exit status 2)."""

    def __init__(self, message: str, file: str | Path | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        # Always one line: messages from libraries (YAML, packaging) may span several.
        return where + " ".join(self.message.split())


class Where:
    """A position in a YAML file, carried by loaded values so later checks can name it."""

    __slots__ = ("file", "line")

    def __init__(self, file: str, line: int):
        self.file = file
        self.line = line

    def error(self, message: str) -> InputError:
        return InputError(message, self.file, self.line)

    def __repr__(self) -> str:
        return f"{self.file}:{self.line}"


class HostError(GpuprovError):
    """One host cannot do what was asked: that host fails, the others go on."""


class Unreachable(HostError):
    """The host could not be connected to or logged into; the message says why."""


class HostKeyError(HostError):
    """The host's key is not trusted (unknown under the strict policy, or changed)."""


class ConnectionLost(HostError):
    """The SSH session died while a command ran."""


class CommandTimeout(HostError):
    """A command ran past its timeout (and was killed on the host)."""


class BecomeError(HostError):
    """sudo refused: no password given where one is needed, or a wrong one."""


class OutputTooLarge(HostError):
    """A command's stdout, streamed into a file (a pulled archive), passed its cap; the
    command was stopped."""


class PlanError(GpuprovError):
    """The host is in a state the step cannot reach from (message says why)."""


class TemplateError(GpuprovError):
    """A template failed to render for one host (undefined name, bad filter use...)."""


class PullError(GpuprovError):
    """A pulled tarball could not be stored (bad archive, disk full, unwritable folder) or was
    refused (a run id or name the host may not choose, over the size caps)."""


class PullNotStored(PullError):
    """This machine could not store what a host sent (a full disk, a folder it cannot write):
    no fault of the host's."""


class PullTimedOut(PullError):
    """The pull ran past its time."""


class PullNoOutput(PullError):
    """The host had nothing to send: the pack command failed there (no output folder)."""


class Interrupted(GpuprovError):
    """The run was cancelled (Ctrl-C, SIGTERM); work under way on hosts was stopped."""
