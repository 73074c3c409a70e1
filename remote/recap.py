"""What a person sees during and after a run: one line per step with the host name, then a recap.

Lines go to stdout as they happen (thread-safe), coloured on a terminal and plain in CI logs.
Everything printed goes through the run's redactor first.
"""
from __future__ import annotations

import sys
import threading
from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

STYLE = {"ok": "green", "changed": "yellow", "skipped": "cyan", "failed": "bold red",
         "unreachable": "bold red", "running": "dim", "would change": "yellow"}


class Reporter:
    def __init__(self, redact, console: Optional[Console] = None, check: bool = False,
                 width: int = 0):
        self.redact = redact
        # Piped to a file or CI log, rich would wrap the recap at 80 columns.
        self.console = console or Console(highlight=False, soft_wrap=True,
                                          width=None if sys.stdout.isatty() else 200)
        self.check = check
        self.width = width
        self._lock = threading.Lock()

    def set_hosts(self, names) -> None:
        self.width = max([len(n) for n in names] + [4])

    def _line(self, host: str, status: str, text: str, detail: str = "") -> None:
        style = STYLE.get(status, "")
        label = f"{status:<11}"
        line = (f"{escape(host):<{self.width}} [{style}]{escape(label)}[/] "
                f"{escape(self.redact(text))}")
        if detail:
            line += f" [dim]{escape(self.redact(detail))}[/]"
        with self._lock:
            self.console.print(line)

    def step(self, host: str, result) -> None:
        status = result.status
        if self.check and status == "changed":
            status = "would change"
        detail = f"({result.elapsed_s:.2f}s)"
        if result.message and status in ("failed", "skipped", "ok"):
            detail = f"{result.message} {detail}" if status != "ok" else detail
        self._line(host, status, result.name, detail)
        if self.check and result.commands:
            with self._lock:
                for command in result.commands:
                    for n, line in enumerate(self.redact(command).splitlines() or [""]):
                        prefix = "  $ " if n == 0 else "    "
                        self.console.print(f"{' ' * self.width} [dim]{escape(prefix + line)}[/]")

    def running(self, host: str, text: str) -> None:
        self._line(host, "running", text)

    def output(self, host: str, text: str) -> None:
        """A line of a long command's own output (validation progress)."""
        with self._lock:
            self.console.print(f"{escape(host):<{self.width}} [dim]| {escape(self.redact(text))}[/]")

    def unreachable(self, host: str, message: str) -> None:
        self._line(host, "unreachable", message)

    def note(self, text: str) -> None:
        with self._lock:
            self.console.print(escape(self.redact(text)))

    def recap(self, results: dict, extra_column: Optional[str] = None) -> None:
        table = Table(title="RECAP", title_justify="left", box=None, pad_edge=False)
        for name in ("host", "ok", "changed", "skipped", "failed", "unreachable", "elapsed"):
            table.add_column(name, justify="left" if name == "host" else "right")
        if extra_column:
            table.add_column(extra_column)
        for name, result in results.items():
            counts = result.counts()
            row = [escape(name),
                   _cell(counts["ok"], "green"),
                   _cell(counts["changed"], "yellow"),
                   _cell(counts["skipped"], "cyan"),
                   _cell(counts["failed"], "bold red"),
                   "[bold red]yes[/]" if result.unreachable else "no",
                   f"{result.elapsed_s:.2f}s"]
            if extra_column:
                row.append(escape(self.redact(result.validation or "-")))
            table.add_row(*row)
        with self._lock:
            self.console.print()
            self.console.print(table)


def _cell(count: int, style: str) -> str:
    return f"[{style}]{count}[/]" if count else "0"
