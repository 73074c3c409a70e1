"""Text helpers shared by the readers of tools' output: the one parse error, the first line.

Standard library only; imports nothing of validate/.
"""

from __future__ import annotations


class ParseError(ValueError):
    """A tool's output did not have the shape its reader expects."""


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""
