"""Typed errors shared by the control side.

`InputError` is the one error users see for bad input (inventory, recipe, selection, option):
the command line prints it as one line, ``FILE:LINE: what is wrong``, and exits with status 2.
"""
from __future__ import annotations

from pathlib import Path


class InputError(Exception):
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
