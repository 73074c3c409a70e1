"""Per-host run logs (`logs/<host>/<run-id>/provision.log`) and the redaction of secrets.

Every command a run sends, with its exit status, output and timing, is appended as it happens,
so an interrupted run keeps what it did. Secret values never reach the file: `Redactor` masks
them (as ``***``) in everything written here, printed to the terminal or put in JSON.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterable, Optional, TextIO

from .term import printable

MASK = "***"


class Redactor:
    """Masks known secret values in any text."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = []
        for value in values:
            self.add(value)

    def add(self, value: object) -> None:
        if value is None:
            return
        text = str(value)
        # Very short values would mask half the log; they are still never printed on purpose.
        if len(text) >= 3 and text not in self._values:
            self._values.append(text)
            self._values.sort(key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        return text


class RunLog:
    """Appends a host's run to its provision.log, redacted, flushed after every record."""

    def __init__(self, path: Optional[Path], redact: Redactor) -> None:
        self.path = path
        self.redact = redact
        self._lock = threading.Lock()
        self._handle: Optional[TextIO] = None

    def _open(self, path: Path) -> TextIO:
        if self._handle is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "a", encoding="utf-8")
        return self._handle

    def write(self, text: str) -> None:
        if self.path is None:
            return
        with self._lock:
            handle = self._open(self.path)
            # printable: `cat provision.log` must not replay a host's escape sequences
            handle.write(printable(self.redact(text)))
            if not text.endswith("\n"):
                handle.write("\n")
            handle.flush()

    def event(self, text: str) -> None:
        self.write(f"[{time.strftime('%H:%M:%S')}] {text}")

    def command(self, label: str, display: str, rc: Optional[int], elapsed_s: float,
                stdout: str = "", stderr: str = "") -> None:
        status = "timeout" if rc is None else f"rc={rc}"
        parts = [f"[{time.strftime('%H:%M:%S')}] {label}: $ {display}",
                 f"    {status} in {elapsed_s:.3f}s"]
        for name, text in (("stdout", stdout), ("stderr", stderr)):
            if text.strip():
                body = "\n".join("    | " + line for line in text.rstrip("\n").split("\n"))
                parts.append(f"    {name}:\n{body}")
        self.write("\n".join(parts))

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
