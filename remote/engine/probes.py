"""Batched probes: many read-only checks sent to a host as one script, answered in one trip.

Each probe runs in its own subshell with stdin closed, between two marker lines that carry a
random token, so a probe's own output can neither end another's nor forge a result.
"""
from __future__ import annotations

import secrets
from typing import Optional

from ..kinds import Probe


def batch_script(probes: list[tuple[int, str]]) -> tuple[str, str]:
    """(script, token) running `probes` [(key, snippet)] in order; keys are small ints."""
    token = "@gpuprov-" + secrets.token_hex(6)
    parts = []
    for key, snippet in probes:
        parts.append(f"printf '%s\\n' '{token} {key} begin'\n"
                     f"( {snippet}\n) </dev/null 2>/dev/null\n"
                     f"printf '\\n%s\\n' \"{token} {key} end $?\"")
    return "\n".join(parts) + "\n", token


def in_one_write(script: str) -> str:
    """`script` with its stdout sent in 64 KiB blocks (a short answer: one write) instead of
    a write per command. Read whole, facts and probes lose nothing by it; sent as is, each
    marker line and probe output reached the control as an SSH packet of its own (34 for the
    bench's 8 probes), each costing paramiko's transport thread and the reader there CPU.
    `dd` holds one block at a time, so endless output stays bounded on the host; should its
    `iflag=fullblock` (GNU, BusyBox) be missing, `cat` passes the output on as it comes."""
    return f"{{\n{script}\n}} | {{ dd bs=65536 iflag=fullblock 2>/dev/null || cat; }}"


def parse_batch(output: str, token: str) -> dict[int, Probe]:
    """{key: Probe} from the batch script's output; a probe cut short is absent."""
    results: dict[int, Probe] = {}
    current: Optional[str] = None
    lines: list[str] = []
    for line in output.split("\n"):
        if line.startswith(token + " "):
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "begin":
                current, lines = fields[1], []
                continue
            if len(fields) == 4 and fields[2] == "end" and fields[1] == current:
                text = "\n".join(lines)
                # The end marker starts with a newline of ours: drop exactly that one.
                if text.endswith("\n"):
                    text = text[:-1]
                try:
                    results[int(current)] = Probe(int(fields[3]), text)
                except ValueError:
                    pass
                current = None
                continue
        if current is not None:
            lines.append(line)
    return results
