"""What every benchmark shares: the one error, where the repository is, the machine's
description for the README's tables, and small helpers.

May import: the standard library.
"""
from __future__ import annotations

import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


class BenchError(Exception):
    """A benchmark could not measure what it set out to: a tool or a provisioning failed or
    timed out, or a timed run was not what the measure needs (a re-run that changed something)."""


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        mem_kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    except (OSError, AttributeError):
        pass
    return {"cpu": model or platform.processor() or "unknown", "cores": os.cpu_count(),
            "memory_gib": round(mem_kib / 1024 / 1024, 1), "kernel": platform.release(),
            "python": platform.python_version(), "openssh": _first_line(["ssh", "-V"]),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
            "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name] + _argv())}


def _argv() -> list:
    """This process's command line as typed: `-m bench.NAME ARGS` for a module."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return ["-m", spec.name] + sys.argv[1:] if spec is not None else sys.argv


def _first_line(cmd: list) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (res.stdout + res.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return ""


def own_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o777)  # the sshd login user writes the targets here
    return path


def stats(times: list) -> dict:
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "runs_s": [round(t, 3) for t in times]}


def tail(text: object, lines: int = 30) -> str:
    """The last `lines` lines of a command's output (text or bytes)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(str(text or "").rstrip().splitlines()[-lines:])


def proc_tail(proc: subprocess.CompletedProcess, lines: int = 30) -> str:
    """The last lines of a finished process's stdout and stderr together."""
    return tail((proc.stdout or "") + (proc.stderr or ""), lines)
