"""Record each host's stack manifest (`remote/stack/manifest.py`) after a `provision` or `validate`
job, as `<logs>/<host>/<run-id>/stack.json`: one more round trip, a python run on the host with
the stack's python (`validate_python`, else the one the host remembers, else the host's).

The answer is untrusted: bounded and schema-checked (`remote.stack.manifest.parse`); a bad one is
logged and not written. A failed record never fails the host.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from ...ground.errors import CommandTimeout
from ...ground.runfolder import STACK_MANIFEST, run_dir
from ...kinds import Probe
from ...stack.manifest import HOST_SCRIPT, ManifestError, parse
from ..results import StepStatus
from ..session import HostSession
from . import Job
from .logs import remote_root

TIMEOUT_S = 60.0


# After the manifest, the python writes where its answer came from to $GPUPROV_STACK_PATHS:
# itself, the folders its distributions are found in (sys.path) and dpkg's database.
_PATHS_SCRIPT = r'''
import os as _os, sys as _sys
_where = _os.environ.get("GPUPROV_STACK_PATHS")
if _where:
    _paths = [_os.path.realpath(_sys.executable), *_sys.path, "/var/lib/dpkg/status"]
    with open(_where, "w") as _f:
        _f.write("".join(p + "\n" for p in dict.fromkeys(_paths) if p and _os.path.exists(p)))
'''


def manifest_command(host_name: str, python: str) -> str:
    """Run the manifest script with the stack's python: `python` when given (a recipe's
    `validate_python`; remembered on the host as validation remembers it, so a later `validate`
    reads the same environment), else the python remembered there, else python3.

    The host keeps the last manifest with a key of what it was read from: the python, the
    modification time (to the nanosecond), size and link count of each folder its packages are
    found in and of dpkg's status file, the kernel release, the driver's and the CUDA
    toolkit's version files. Installing, upgrading or removing a wheel adds or removes a folder
    in site-packages, and dpkg rewrites its status file, so while the key is the same the
    stack is, and the kept manifest is sent without starting python (a converged re-run: a
    few milliseconds instead of a python start and a scan of every package per host). The
    key is taken before the manifest is read, so a change while it is read shows next time.
    Where `ls` fails (no GNU options) or the folder cannot be written, python runs each time."""
    root = remote_root(host_name)
    if python:
        choose = (f'PY={shlex.quote(python)}\n'
                  f'if command -v "$PY" >/dev/null 2>&1; then '
                  f'mkdir -p {root} && printf "%s\\n" "$PY" > {root}/python\n'
                  f'else read -r PY < {root}/python; fi 2>/dev/null\n')
    else:
        choose = f'read -r PY 2>/dev/null < {root}/python\n'
    return (f'{choose}command -v "$PY" >/dev/null 2>&1 || PY=python3\n'
            f'S={root}/stack\n'
            'K=$([ -s "$S.paths" ] && command -v "$PY" && (set -f; IFS="\n"; exec ls -lLd '
            '--time-style=+%s.%N -- $(cat "$S.paths")) && { cat /proc/sys/kernel/osrelease '
            '/proc/driver/nvidia/version /usr/local/cuda/version.json 2>/dev/null; :; }) || K=\n'
            'manifest() {\n'
            f"GPUPROV_STACK_PATHS=\"$1\" \"$PY\" - <<'GPUPROV_MANIFEST'\n{HOST_SCRIPT}\n"
            f"{_PATHS_SCRIPT}\nGPUPROV_MANIFEST\n}}\n"
            'if [ -n "$K" ] && [ "$K" = "$(cat "$S.key" 2>/dev/null)" ] && cat "$S.json" 2>/dev/null; then :\n'
            f'elif {{ mkdir -p {root} && rm -f "$S.key" && : > "$S.$$"; }} 2>/dev/null; then\n'
            '  manifest "$S.paths" > "$S.$$"; rc=$?\n'
            '  if [ $rc = 0 ] && mv -f "$S.$$" "$S.json"; then\n'
            '    [ -z "$K" ] || printf \'%s\\n\' "$K" > "$S.key"; cat "$S.json"\n'
            '  else cat "$S.$$"; rm -f "$S.$$"; exit $rc; fi\n'
            'else manifest ""; fi')


class RecordStack:
    """`job`, then the host's stack manifest written into its run's log folder.

    The manifest of the python the host remembers rides along with the facts (no extra round
    trip); when the job changed nothing on the host and that python is the one the recipe
    names, that answer is the stack after the job too, and is used. Otherwise the manifest is
    read again at the end (one round trip)."""

    def __init__(self, job: Job, logs_dir: Optional[Path]):
        self.job = job
        self.logs_dir = logs_dir

    @property
    def outcome(self) -> Optional[str]:
        return self.job.outcome

    def __call__(self, session: HostSession) -> None:
        early = manifest_command(session.host.name, "")
        if self.logs_dir is not None and not session.options.check:
            session.ride_along.append(early)
        self.job(session)
        if self.logs_dir is not None and not session.options.check:
            record(session, run_dir(self.logs_dir, session.host.name, session.options.run_id),
                   session.ride_along_answers.get(early))


def _unchanged(session: HostSession) -> bool:
    """True when no step changed or failed (a failed step may have changed part of its work)."""
    return all(s.status in (StepStatus.OK, StepStatus.SKIPPED) for s in session.result.steps)


def record(session: HostSession, dest: Path, early: Optional[Probe] = None) -> Optional[Path]:
    """Write the host's manifest to `dest/stack.json`: `early` (the answer that rode along with
    the facts) when it still holds, else asked now. None when not recorded (the reason goes to
    the run log)."""
    python = str(session.context.get("validate_python") or "")
    manifest = None
    if early is not None and early.rc == 0 and _unchanged(session):
        try:
            manifest = parse(early.out.encode())
        except ManifestError:
            manifest = None
        if manifest is not None and python and \
                manifest["environment"] != str(PurePosixPath(python).parent.parent):
            manifest = None  # the recipe names another python than the host remembered
    if manifest is None and session.stalled:
        # asked again, a host that went silent holds the fleet's recap up to TIMEOUT_S more
        # (a dribbling host: 65 s instead of 5 s with timeouts.idle 5)
        session.log.event(f"stack manifest not recorded: {session.stalled}")
        return None
    if manifest is None:
        manifest = _ask(session, python)
    if manifest is None:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / STACK_MANIFEST
    tmp = dest / f".{STACK_MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    session.log.event(f"stack manifest: {len(manifest['packages'])} packages, "
                      f"{len(manifest['apt'])} apt packages -> {path}")
    return path


def _ask(session: HostSession, python: str) -> Optional[dict[str, Any]]:
    """Run the manifest script now; the checked manifest, or None (the reason logged)."""
    try:
        res = session.conn.run(manifest_command(session.host.name, python), timeout=TIMEOUT_S)
    except CommandTimeout as exc:
        session.log.event(f"stack manifest not recorded: {exc}")
        return None
    session.log.command("stack manifest", "python - (stack manifest)", res.rc, res.elapsed_s,
                        "", res.err)
    if res.rc != 0 or not res.complete:
        session.log.event(f"stack manifest not recorded: exit {res.rc}"
                          + ("" if res.complete else ", answer over the output limit"))
        return None
    try:
        return parse(res.stdout)
    except ManifestError as exc:
        session.log.event(f"stack manifest not recorded: {exc}")
        return None
