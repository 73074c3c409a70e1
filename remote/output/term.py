"""Text for a terminal: colours only where they can be shown, and text from hosts made printable.

The one terminal stack of the control side: the recap (`recap`) and `invoke report`
(`remote.report.text`) both print plain strings with ANSI colours through these functions,
never through a rendering library.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import unicodedata
from typing import TextIO

# SGR codes of the styles the recap and the report use (ECMA-48, section 8.3.117).
_SGR = {"green": "32", "yellow": "33", "cyan": "36", "red": "31", "bold red": "1;31",
        "bold green": "1;32", "bold yellow": "1;33", "dim": "2"}
# Characters that drive a terminal instead of showing (ESC, CSI and every other C0/C1 control,
# DEL), the bidirectional overrides that reorder what is shown ("Trojan Source",
# CVE-2021-42574, https://trojansource.codes/), the invisible marks that reorder digits and
# punctuation next to them (LRM, RLM and ALM: UAX #9 section 2.6,
# https://www.unicode.org/reports/tr9/#Implicit_Directional_Marks), and lone surrogates, which
# no encoding can write (a JSON "\udc80" escape makes one). Tab and newline are kept by
# `printable`.
_UNSHOWN = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f{_UNSHOWN}]")
# The same plus what breaks a line or a column: tab, newline, line and paragraph separators.
_CONTROL_OR_BREAK = re.compile(f"[\x00-\x1f\u2028\u2029{_UNSHOWN}]")


def printable(text: str) -> str:
    """`text` with every character that could drive the terminal shown as `?` (tab and newline
    kept): what a host sent is shown, never obeyed (a clear screen, an OSC 52 clipboard write,
    a cursor move that paints over a line)."""
    return _CONTROL.sub("?", text)


def escaped(text: str) -> str:
    """`text` with every character `printable` hides shown as its escape instead (``\\x1b``,
    ``\\u202e``): for a page (HTML), where the reader should see what was there and a
    column's width does not matter."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def printable_line(text: str) -> str:
    """`printable`, and tab and line breaks shown as `?` too: for one cell or one line, so a
    name from a log cannot add lines or shift columns."""
    return _CONTROL_OR_BREAK.sub("?", text)


def wants_color(stream: TextIO) -> bool:
    """Colour only on a terminal that can show it, and never under NO_COLOR (no-color.org)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, style: str, color: bool = True) -> str:
    """`text` in `style` (a key of _SGR, or "" for none) when `color` is on."""
    if not color or not style:
        return text
    return f"\x1b[{_SGR[style]}m{text}\x1b[0m"


def cells(text: str) -> int:
    """Columns `text` takes on a terminal: East Asian wide characters take two, combining
    marks none (Unicode Standard Annex #11), so tables stay aligned whatever the names are."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def terminal_width(stream: TextIO, default: int = 80) -> int:
    """The width of the terminal behind `stream`; `default` when it is not one."""
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        pass
    if stream is sys.stdout:
        return shutil.get_terminal_size((default, 24)).columns  # honours $COLUMNS
    return default


class Terminal:
    """Where printed text goes: a stream, its width in columns and whether it gets colours;
    by default what the stream itself is (`wants_color`, `terminal_width`)."""

    def __init__(self, stream: TextIO | None = None, width: int | None = None,
                 color: bool | None = None):
        self.stream = stream or sys.stdout
        self.width = width or terminal_width(self.stream)
        self.color = wants_color(self.stream) if color is None else color

    def write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
