"""The one reader of a pulled ``results.json`` on the control side (the validation package's
output, schema 1 or 2): the engine's recap (`engine/jobs/logs.py`) and the report
(`report/collect.py`) both read it here, with the same care. What a host wrote is untrusted:
the file is read only when it is a regular file of at most `MAX_FILE_BYTES` (never blocking
on a FIFO, never reading past the cap), must be a JSON object whose ``checks`` is a list of
objects, and its schema version is checked here once.

The bottom layer: imports nothing of remote/, so every package may use it; the JSON itself is
read by validate/'s one reader of untrusted JSON (`validate.jsonread`: depth and integer digits
capped, standard library only), so a host's file and a user's `--judge` file meet the same limits.
"""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from validate import jsonread

# 2 (issue 22) adds each check's `action` and `findings` and the run's worst `action`; 1 is
# what hosts validated before it left: both read the same.
SCHEMAS = (1, 2)
# The largest results.json (or bench_torch.log) read: the validation package writes a few
# hundred KiB at most, and a host could otherwise make the control side hold gigabytes (a
# sparse file costs it nothing).
MAX_FILE_BYTES = 16 << 20


class UnusableFile(Exception):
    """The file cannot be used at all. `reason`: unreadable, too_large, empty, not_json,
    not_object or checks; the message says why in words, `line` where when known."""

    def __init__(self, reason: str, message: str, line: Optional[int] = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.line = line


@dataclass
class ResultsFile:
    """A results.json that can be read: its data, and what is odd about it (read anyway)."""

    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def read_capped(path: Path) -> bytes:
    """The bytes of a regular file of at most `MAX_FILE_BYTES`; `UnusableFile` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise UnusableFile("unreadable", f"unreadable ({exc.strerror or exc}): skipped") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder, a FIFO, a device
        os.close(fd)
        raise UnusableFile("unreadable", "unreadable (not a regular file): skipped")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise UnusableFile("unreadable", f"unreadable ({exc.strerror or exc}): skipped") from None
    if len(data) > MAX_FILE_BYTES:
        raise UnusableFile("too_large", f"larger than {MAX_FILE_BYTES >> 20} MiB: skipped")
    return data


def read_results(path: Path) -> ResultsFile:
    """Read and check a results.json; `UnusableFile` when it cannot be used at all."""
    text = read_capped(path).decode("utf-8", errors="replace")
    if not text.strip():
        raise UnusableFile("empty", "empty file: skipped")
    try:
        # validate/'s one reader of untrusted JSON: nesting and integer digits capped before
        # json sees them (a 401-digit figure read whole made float() raise OverflowError in
        # the report and the Prometheus file; 100,000 "[" a RecursionError)
        data = jsonread.loads(text, max_bytes=MAX_FILE_BYTES)
    except jsonread.BadJSON as exc:
        cause = exc.__context__
        msg = str(exc).removeprefix("not JSON: ")
        if isinstance(cause, json.JSONDecodeError):
            msg = cause.msg
        raise UnusableFile("not_json", f"not valid JSON ({msg}): skipped",
                           getattr(cause, "lineno", None)) from None
    if not isinstance(data, dict):
        raise UnusableFile("not_object", f"not a JSON object (a {type(data).__name__}): skipped")
    checks = data.get("checks", [])
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        raise UnusableFile("checks", "'checks' is not a list of objects: skipped")
    warnings = []
    if _LONE_SURROGATE_ESCAPE.search(text) and _replace_lone_surrogates(data):
        warnings.append("lone surrogate escapes (like \\udc80: no text) shown as U+FFFD")
    if data.get("schema") not in SCHEMAS:
        warnings.append(f"schema {data.get('schema')!r} is not 1 or 2; reading what matches")
    return ResultsFile(data, warnings)


# What may make a lone surrogate: a JSON escape of one (the text itself was decoded with
# errors="replace", so it holds none). A cheap test before walking the whole document.
_LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_lone_surrogates(data: dict[str, Any]) -> bool:
    """Replace every lone surrogate in `data`'s keys and strings with U+FFFD, in place (no
    encoder can write one: a report or a terminal would fail on it). True when any was found.
    A loop, not recursion: the document may be as deep as the decoder allowed."""
    found = False

    def fixed(text: str) -> str:
        nonlocal found
        new, count = _SURROGATE.subn("\ufffd", text)
        found = found or count > 0
        return new

    def cleaned(value: Any) -> Any:
        if isinstance(value, str):
            return fixed(value)
        pending.append(value)  # a dict or a list is cleaned in its turn (others are numbers)
        return value

    pending: list[Any] = [data]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            pairs = list(node.items())
            node.clear()
            node.update((fixed(key), cleaned(value)) for key, value in pairs)
        elif isinstance(node, list):
            node[:] = [cleaned(value) for value in node]
    return found


def first_failure(checks: Any) -> Optional[tuple[str, str]]:
    """(check name, finding) of a results.json's first failing required check, else of its
    first required check that was skipped (the finding then "not checked: <reason>"); None
    when there is none or `checks` is no list. The finding is the check's first failing
    finding and its action when it lists findings (validate --health's shape), else its
    reason. What a Slurm drain reason and a remediation's reason say (one owner, here)."""
    if not isinstance(checks, list):
        return None
    for status in ("fail", "skip"):
        for check in checks:
            if (isinstance(check, dict) and check.get("required") and
                    check.get("status") == status and isinstance(check.get("name"), str)):
                return check["name"], _finding(check, status)
    return None


# how a finding names its action, at its end (a drain reason's words; remediation/reasons.py
# leaves it out where the reason names the same action after it)
ACTION_SAID = "; action: "


def _finding(check: dict[str, Any], status: str) -> str:
    for finding in check.get("findings") or []:
        if isinstance(finding, dict) and finding.get("fails") and isinstance(finding.get("what"), str):
            action = finding.get("action")
            what: str = finding["what"]
            return what + (f"{ACTION_SAID}{action}" if isinstance(action, str) else "")
    reason = check.get("reason")
    text = reason if isinstance(reason, str) and reason else "failed"
    return text if status == "fail" else f"not checked: {text}"
