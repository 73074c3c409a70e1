"""What a person sees during and after a run: one line per step with the host name, then a recap.

Lines go to stdout as they happen (thread-safe), coloured on a terminal and plain when piped to
a file or CI log (or when NO_COLOR is set). Everything printed goes through the run's redactor
first. Plain string formatting with ANSI colours, not a rendering library: on a fleet this
prints a line per step per host, and that must cost next to nothing.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional, Protocol, Sequence, TextIO, Union

from .progress import Progress, Running, elapsed_text
from .term import paint, printable, printable_line, terminal_width, wants_color

STYLE = {"ok": "green", "changed": "yellow", "skipped": "cyan", "failed": "bold red",
         "unreachable": "bold red", "running": "dim", "would change": "yellow",
         "warning": "bold yellow", "not started": "yellow"}
RECAP_COLUMNS = ("host", "ok", "changed", "skipped", "failed", "unreachable", "elapsed")

Cell = Union[str, tuple[str, str]]  # text, or (text, style)
_CLEAR_LINE = "\r\x1b[K"  # carriage return, then erase to the end of the line (ECMA-48 EL)


@dataclass(frozen=True)
class Failure:
    """A failed host under the recap: why, and where its run log is ("" when none)."""

    host: str
    reason: str
    log: str = ""


@dataclass(frozen=True)
class NotStarted:
    """A host a canary rollout never started, under the recap: why."""

    host: str
    reason: str


class StepLine(Protocol):
    """What a step line shows of a step's result (the engine's `StepResult`)."""

    @property
    def name(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def elapsed_s(self) -> float: ...
    @property
    def message(self) -> str: ...
    @property
    def commands(self) -> Sequence[str]: ...


class Verdict(Protocol):
    """What the recap's extra column shows of a job's outcome (the engine's `Outcome`)."""

    @property
    def text(self) -> str: ...


class RecapRow(Protocol):
    """What the recap shows of a host's result (the engine's `HostResult`)."""

    @property
    def unreachable(self) -> bool: ...
    @property
    def elapsed_s(self) -> float: ...
    @property
    def outcome(self) -> Optional[Verdict]: ...
    @property
    def not_started(self) -> str: ...
    def counts(self) -> dict[str, int]: ...


class Reporter:
    """Prints one run's step lines, validation progress and recap to `stream` (stdout).
    `check`: a dry run, so "changed" reads "would change" and each planned command is listed."""

    def __init__(self, redact: Callable[[str], str], stream: Optional[TextIO] = None,
                 check: bool = False, width: int = 0, color: Optional[bool] = None,
                 verbose: int = 0, diff: bool = False, live: Optional[bool] = None):
        self.redact = redact
        self.stream = stream or sys.stdout
        self.color = wants_color(self.stream) if color is None else color
        self.check = check
        self.width = width
        self.verbose = verbose
        self.diff = diff
        self._lock = threading.Lock()
        self._gone = False
        self._status = ""  # the live line at the bottom of a terminal, "" when none
        if live is None:
            live = _is_terminal(self.stream)
        self.progress = Progress(self._announce, self._still, self._live if live else None)

    def set_hosts(self, names: Iterable[str]) -> None:
        self.width = max([len(n) for n in names] + [4])

    def _paint(self, text: str, style: str) -> str:
        return paint(text, style, self.color)

    def _shown(self, text: str) -> str:
        """`text` as it may be printed: secrets redacted, control characters made visible."""
        return printable(self.redact(text))

    def _print(self, lines: list[str]) -> None:
        text = "".join(line + "\n" for line in lines)
        with self._lock:
            if self._gone:
                return
            if self._status:  # the lines go above the live line, which is drawn again
                text = _CLEAR_LINE + text + self._status
            try:
                self.stream.write(text)
                self.stream.flush()
            except OSError:  # EPIPE: `| head` is done; EIO: the terminal closed
                self._reader_left()

    def _reader_left(self) -> None:
        """Whoever read the output went away (`| head`, a closed terminal): the run goes on,
        its logs and --json still record everything; nothing more is printed."""
        self._gone = True
        if self.stream is sys.stdout:
            # Python would flush the dead pipe again at exit and print a traceback.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
            except (OSError, ValueError, AttributeError):  # no real descriptor behind stdout
                pass

    def _line(self, host: str, status: str, text: str, detail: str = "") -> str:
        label = self._paint(f"{status:<11}", STYLE.get(status, ""))
        line = f"{self._shown(host):<{self.width}} {label} {self._shown(text)}"
        if detail:
            line += " " + self._paint(self._shown(detail), "dim")
        return line

    def step(self, host: str, result: StepLine) -> None:
        status = str(result.status)
        if self.check and status == "changed":
            status = "would change"
        detail = f"({result.elapsed_s:.2f}s)"
        if result.message and status in ("failed", "skipped"):
            detail = f"{result.message} {detail}"
        lines = [self._line(host, status, result.name, detail)]
        diff = getattr(result, "diff", "")
        if self.diff and diff:
            colours = {"+": "green", "-": "red", "@": "cyan"}
            for line in self._shown(diff).splitlines():
                style = "dim" if line.startswith(("+++", "---")) else colours.get(line[:1], "")
                lines.append(f"{' ' * self.width} {self._paint(line, style)}")
        # the commands: what --check would send, what -vv sent (as the run log has them)
        if (self.check or self.verbose >= 2) and result.commands:
            for command in result.commands:
                for n, line in enumerate(self._shown(command).splitlines() or [""]):
                    prefix = "  $ " if n == 0 else "    "
                    lines.append(f"{' ' * self.width} {self._paint(prefix + line, 'dim')}")
        self._print(lines)

    def running(self, host: str, text: str) -> None:
        self._print([self._line(host, "running", text)])

    def started(self, host: str, name: str) -> Running:
        """A step began: announced if still running after a second, then kept alive (see
        `progress`); with -v its output shows as it comes. `progress.stop(it)` when done."""
        return self.progress.start(host, name, self.output if self.verbose else None)

    def _announce(self, step: Running) -> None:
        self.running(step.host, step.name)

    def _still(self, step: Running, elapsed: float) -> None:
        self._print([self._line(step.host, "running", step.name,
                                f"(still running, {elapsed_text(elapsed)})")])

    def _live(self, text: str) -> None:
        with self._lock:
            if self._gone:
                return
            columns = terminal_width(self.stream)
            width = (columns if columns >= 20 else 80) - 1  # an unsized pty says 0
            shown = printable_line(self.redact(text))
            shown = (shown[:width - 3] + "...") if len(shown) > width else shown
            self._status = self._paint(shown, "dim") if shown else ""
            try:
                self.stream.write(_CLEAR_LINE + self._status)
                self.stream.flush()
            except OSError:
                self._reader_left()

    def close(self) -> None:
        """The run is over: stop the signs of life and clear the live line."""
        self.progress.close()

    def failures(self, failed: Sequence[Failure]) -> None:
        """Under the recap: each failed host, why, and its run log."""
        self._reasons("FAILED", "bold red", [(f.host, f.reason, f.log) for f in failed])

    def not_started(self, hosts: Sequence[NotStarted]) -> None:
        """Under the recap: each host a canary rollout never started, and why."""
        self._reasons("NOT STARTED", STYLE["not started"], [(h.host, h.reason, None) for h in hosts])

    def _reasons(self, title: str, style: str, items: list[tuple[str, str, Optional[str]]]) -> None:
        """A block under the recap: `title`, then a line per host (name in `style`) with its
        reason, masked and made printable, and its run log when there is one."""
        if not items:
            return
        lines = ["", title]
        for host, reason, log in items:
            lines.append(f"{self._paint(self._shown(host), style)}: "
                         f"{printable_line(self.redact(reason))}")
            if log:
                lines.append(f"{' ' * 2}log: {self._shown(log)}")
        self._print(lines)

    def output(self, host: str, text: str) -> None:
        """A line of a long command's own output (validation progress)."""
        self._print([f"{self._shown(host):<{self.width}} {self._paint('| ' + self._shown(text), 'dim')}"])

    def warning(self, host: str, text: str) -> None:
        """Something the user should know that does not fail the host (a cache that is down)."""
        self._print([self._line(host, "warning", text)])

    def unreachable(self, host: str, message: str) -> None:
        self._print([self._line(host, "unreachable", message)])

    def note(self, text: str) -> None:
        self._print([self._shown(text)])

    def recap(self, results: Mapping[str, RecapRow], extra_column: Optional[str] = None) -> None:
        """The table at the end: a row per host, counts coloured when not zero."""
        header = list(RECAP_COLUMNS) + ([extra_column] if extra_column else [])
        rows: list[list[Cell]] = []
        for name, result in results.items():
            if result.not_started:  # a rollout stopped before its batch: nothing to count
                skipped: list[Cell] = [(name, ""), *[("-", "")] * (len(RECAP_COLUMNS) - 2),
                                       ("not started", STYLE["not started"])]
                rows.append(skipped + ([("-", "")] if extra_column else []))
                continue
            counts = result.counts()
            row: list[Cell] = [
                (name, ""), (str(counts["ok"]), "green"), (str(counts["changed"]), "yellow"),
                (str(counts["skipped"]), "cyan"), (str(counts["failed"]), "bold red"),
                ("yes", "bold red") if result.unreachable else ("no", ""),
                (f"{result.elapsed_s:.2f}s", "")]
            if extra_column:
                row.append((result.outcome.text if result.outcome else "-", ""))
            rows.append(row)
        # host and the extra column read left to right; the numbers line up on the right
        right = set(range(1, len(RECAP_COLUMNS)))
        self.table(header, rows, right_aligned=right, title="RECAP")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Cell]],
              right_aligned: Iterable[int] = frozenset(), title: str = "") -> None:
        """Columns separated by two spaces; a cell is text or (text, style), and "0"/"no"
        stay uncoloured so that what needs attention stands out."""
        styled = [[c if isinstance(c, tuple) else (c, "") for c in row] for row in rows]
        shown = [[(self._shown(text), style) for text, style in row] for row in styled]
        widths = [max([len(h)] + [len(r[i][0]) for r in shown]) for i, h in enumerate(header)]
        right = set(right_aligned)

        def cell(i: int, text: str, style: str = "") -> str:
            padded = text.rjust(widths[i]) if i in right else text.ljust(widths[i])
            return self._paint(padded, style if text not in ("0", "no") else "")

        lines = ["", title] if title else []
        lines.append("  ".join(cell(i, h) for i, h in enumerate(header)).rstrip())
        lines += ["  ".join(cell(i, text, style) for i, (text, style) in enumerate(row)).rstrip()
                  for row in shown]
        self._print(lines)


def _is_terminal(stream: TextIO) -> bool:
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
