"""Validation of a host: push `validate/`, run it there, pull its results into logs/.

One round trip pushes and runs (the package travels as a tarball on the command's stdin and
is unpacked into a fresh folder), one more pulls the output folder back as a tarball into
`logs/<host>/<run-id>/`. On the host everything lives under `$HOME/.gpuprov/<host>/`:
`runs/<run-id>/` (kept, so `invoke logs` can fetch it again) and `runs/latest`.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Optional

from ..transport.connection import CommandTimeout
from ..transport.transfer import COMMIT_FILE, PullError, pack, pack_command, publish_pull, unpack_command

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "validate"
SUITES = ("quick", "full")
DEFAULT_TIMEOUT_S = 7200.0


def package_bytes() -> bytes:
    """The validate/ package as one gzip tarball (built once per run)."""
    return pack(PACKAGE_DIR, "validate")


def remote_root(host_name: str) -> str:
    return f'"$HOME"/.gpuprov/{shlex.quote(host_name)}'


def validate_command(host_name: str, python: str, run_id: str, args: list,
                     remember: bool = False) -> str:
    """The command that unpacks the package (on stdin) and runs it with `python`.

    With `remember`, `python` was chosen explicitly (`validate_python`) and is written to the
    host's .gpuprov folder; without, a python remembered there wins over `python` (the host's
    default), so `invoke validate` after provisioning uses the venv the recipe built.
    """
    root = remote_root(host_name)
    out = f'{root}/runs/{shlex.quote(run_id)}'
    pkg = f'{root}/pkg-{shlex.quote(run_id)}'
    quoted = " ".join(shlex.quote(a) for a in args)
    if remember:
        choose = f'PY={shlex.quote(python)}; printf "%s\\n" "$PY" > {root}/python\n'
    else:
        # a remembered python that is gone (venv deleted) falls back to the default
        choose = (f'PY=$(cat {root}/python 2>/dev/null); '
                  f'command -v "$PY" >/dev/null 2>&1 || PY={shlex.quote(python)}\n')
    return (f"mkdir -p {root}/runs && {unpack_command(pkg)} || exit 90\n"
            f"{choose}"
            f'echo "validate: python $PY"\n'
            f'cd {pkg} && PYTHONUNBUFFERED=1 "$PY" -m validate --out {out} {quoted}\n'
            f"rc=$?\ncd / && rm -rf {pkg}\n"
            f"ln -sfn {shlex.quote(run_id)} {root}/runs/latest\nexit $rc")


def suite_args(suite: str, context: dict) -> list:
    args = ["--quick"] if suite == "quick" else []
    expected = context.get("gpu_expected")
    if expected not in (None, ""):
        args += ["--expect-gpus", str(expected)]
    extra = context.get("validate_args") or []
    args += shlex.split(extra) if isinstance(extra, str) else [str(a) for a in extra]
    return args


def summarize(results_path: Path, rc: Optional[int]) -> tuple:
    """(text for the recap, ok) from a pulled results.json."""
    try:
        data = json.loads(results_path.read_text())
        checks = data["checks"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"not validated: no readable {COMMIT_FILE} (validate exit {rc})", False
    failed = [c["name"] for c in checks if c.get("required") and c.get("status") == "fail"]
    skipped = [c["name"] for c in checks if c.get("required") and c.get("status") == "skip"]
    if failed:
        return "failed: " + ", ".join(failed), False
    if skipped:
        return "not validated: " + ", ".join(skipped) + " skipped", False
    ok = bool(data.get("ok", True)) and rc == 0
    passed = sum(1 for c in checks if c.get("status") == "pass")
    return (f"passed ({passed} checks)" if ok else f"failed (validate exit {rc})"), ok


class _LineSplitter:
    """Turns streamed output chunks into whole lines for the reporter."""

    def __init__(self, emit):
        self.emit = emit
        self.buffer = {"stdout": "", "stderr": ""}

    def __call__(self, stream: str, text: str) -> None:
        self.buffer[stream] += text
        *lines, self.buffer[stream] = self.buffer[stream].split("\n")
        for line in lines:
            if line.strip():
                self.emit(line.rstrip("\r"))

    def flush(self) -> None:
        for stream, rest in self.buffer.items():
            if rest.strip():
                self.emit(rest)
            self.buffer[stream] = ""


class Validator:
    """Runs validation on each host of a run (used as the runner's `after_steps`)."""

    def __init__(self, suite: str = "quick", timeout: float = DEFAULT_TIMEOUT_S):
        self.suite = suite
        self.timeout = timeout
        self.package = package_bytes()

    def __call__(self, host_run) -> None:
        host, conn, result = host_run.host, host_run.conn, host_run.result
        reporter, log = host_run.run.reporter, host_run.log
        run_id = host_run.run.options.run_id
        chosen = host_run.context.get("validate_python")
        python = str(chosen or host.python)
        args = suite_args(self.suite, host_run.context)
        reporter.running(host.name, f"validate ({self.suite})")
        lines = _LineSplitter(lambda line: reporter.output(host.name, line))
        try:
            res = conn.run(validate_command(host.name, python, run_id, args, remember=bool(chosen)),
                           stdin=self.package,
                           timeout=self.timeout, on_output=lines)
        except CommandTimeout as exc:
            lines.flush()
            result.validation, result.validation_ok = f"not validated: {exc}", False
            log.event(f"validate {exc}")
            return
        lines.flush()
        log.command("validate", f"python -m validate {' '.join(args)} ({len(self.package)} bytes pushed)",
                    res.rc, res.elapsed_s, res.out, res.err)
        if res.rc == 90:
            result.validation = f"not validated: could not unpack the package ({res.err.strip()[:200]})"
            result.validation_ok = False
            return
        dest = host_run.run.options.logs_dir / host.name / run_id
        result.validation, result.validation_ok = pull_results(host_run, run_id, res.rc, dest)


def pull_results(host_run, run_id: str, rc: Optional[int], dest: Path) -> tuple:
    """Pull a validation run's output folder from the host into `dest`; (recap text, ok)."""
    host, conn = host_run.host, host_run.conn
    remote = f"{remote_root(host.name)}/runs/{shlex.quote(run_id)}"
    res = conn.run(pack_command(remote), timeout=600)
    if res.rc != 0:
        return f"not validated: no output on the host ({res.err.strip()[:200]})", False
    try:
        names = publish_pull(res.stdout, dest)
    except PullError as exc:
        host_run.log.event(f"pull failed: {exc}")
        return f"not validated: {exc}", False
    host_run.log.event(f"pulled {len(res.stdout)} bytes into {dest}: {', '.join(names)}")
    return summarize(dest / COMMIT_FILE, rc)


def latest_run_id(conn, host_name: str) -> Optional[str]:
    res = conn.run(f"readlink {remote_root(host_name)}/runs/latest", timeout=60)
    run_id = res.out.strip()
    return run_id if res.rc == 0 and run_id and "/" not in run_id else None
