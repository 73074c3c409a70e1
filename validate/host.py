"""Host facts (OS, CPU, memory) and running external tools (nvidia-smi, nvcc,
compilers) with time limits.  Standard library only."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from typing import Any

from .smi import invalid_query_field, parse_query_csv
from .text import ParseError, first_line

# After SIGKILL, how long to wait for a timed-out tool to be reaped. A process in uninterruptible
# sleep (state D: nvidia-smi stuck in the driver on a sick GPU) dies only once its kernel call
# returns, which may be never; past this the tool is left behind and the caller goes on.
# Unsourced: a killed process that is not stuck is gone in well under a second.
KILL_WAIT_S = 5.0


def _text(data: Any) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def run_tool(argv: list[str], timeout: float = 60, env: dict[str, str] | None = None,
             cwd: str | None = None) -> dict[str, Any]:
    """Run a command; never raises for the command's own failure.

    Returns {"rc", "stdout", "stderr", "error"}: rc None and error set when the
    program is missing or timed out. A timed-out command is killed and waited for at most
    KILL_WAIT_S more: one stuck in the kernel is left behind, and the error says so.
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            env=env,
            cwd=cwd,
        )
    except FileNotFoundError:
        return {"rc": None, "stdout": "", "stderr": "", "error": "%s: not found" % argv[0]}
    except PermissionError as exc:
        return {"rc": None, "stdout": "", "stderr": "", "error": "%s: %s" % (argv[0], exc)}
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        # subprocess.run would kill, then wait without a bound: a hang of its own
        error = "%s: timed out after %ss" % (argv[0], timeout)
        proc.kill()
        try:
            proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            error += (" and did not exit %gs after SIGKILL (stuck in the kernel?): left behind"
                      % KILL_WAIT_S)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        return {"rc": None, "stdout": _text(exc.stdout), "stderr": _text(exc.stderr),
                "error": error}
    except BaseException:  # Ctrl-C, SIGTERM turned into SystemExit: the tool goes too
        proc.kill()
        raise
    return {"rc": proc.returncode, "stdout": out, "stderr": err, "error": None}


def os_name() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "%s %s" % (platform.system(), platform.release())


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024.0 / 1024.0, 2)
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def basic_facts() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "os": os_name(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpus": cpu_count(),
        "memory_gib": memory_gib(),
    }


# ---------------------------------------------------------------------------
# nvidia-smi


def find_nvidia_smi() -> str | None:
    path = shutil.which("nvidia-smi")
    if path:
        return path
    for cand in ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi"):
        if os.access(cand, os.X_OK):
            return cand
    return None


def query_gpus(smi: str, fields: list[str], timeout: float = 60,
               max_retries: int = 8) -> tuple[list[dict[str, str]] | None, list[str], str | None]:
    """``--query-gpu`` with ``--format=csv,noheader,nounits``; fields the driver
    rejects are dropped and the query retried.  Returns (rows, dropped, error)."""
    fields = list(fields)
    dropped: list[str] = []
    for _ in range(max_retries):
        res = run_tool([smi, "--query-gpu=" + ",".join(fields),
                        "--format=csv,noheader,nounits"], timeout=timeout)
        if res["error"]:
            return None, dropped, res["error"]
        if res["rc"] == 0:
            try:
                return parse_query_csv(res["stdout"], fields), dropped, None
            except ParseError as exc:
                return None, dropped, "cannot parse nvidia-smi output: %s" % exc
        message = (res["stdout"] + res["stderr"]).strip()
        bad = invalid_query_field(message)
        if bad and bad in fields and len(fields) > 1:
            fields.remove(bad)
            dropped.append(bad)
            continue
        return None, dropped, "nvidia-smi exited %s: %s" % (res["rc"], first_line(message))
    return None, dropped, "nvidia-smi rejected too many fields"


def find_nvcc() -> str | None:
    path = shutil.which("nvcc")
    if path:
        return path
    for root in cuda_homes():
        cand = os.path.join(root, "bin", "nvcc")
        if os.access(cand, os.X_OK):
            return cand
    return None


def cuda_homes() -> list[str]:
    """Candidate CUDA toolkit roots, most specific first, existing ones only."""
    out = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        v = os.environ.get(var)
        if v:
            out.append(v)
    nvcc = shutil.which("nvcc")
    if nvcc:
        out.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    out.append("/usr/local/cuda")
    try:
        versions = sorted(
            (d for d in os.listdir("/usr/local") if d.startswith("cuda-")), reverse=True
        )
    except OSError:
        versions = []
    out.extend(os.path.join("/usr/local", d) for d in versions)
    out.append("/usr")
    seen = []
    for p in out:
        if os.path.isdir(p) and p not in seen:
            seen.append(p)
    return seen
