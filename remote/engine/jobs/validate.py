"""Validate a host (`validate`, and `provision` after its steps): push `validate/`, run it
there, pull its results into `<logs>/<host>/<run-id>/`.

One round trip pushes and runs (the package travels as a tarball on the command's stdin and is
unpacked into a fresh folder), one more pulls the output folder back as a tarball (`logs`).
The run is bounded by the inventory's `timeouts.command` and, as validate prints progress lines
all along, by `timeouts.idle` without a line: a host that stalls or dribbles fails alone with
the reason, and the others' recap does not wait for it.

Under `provision --bundle` the host runs the bundle's own copy of validate/ (the same files as
this gpuprov's, checked before any host was touched: remote/bundle/archive.py) where the bundle
was unpacked: nothing is pushed, and validation needs nothing else (it installs and fetches
nothing; it runs the host's python, or the recipe's venv, on what is there).
"""
from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path
from typing import Any, Optional, Union

from validate import profile
from validate.core import CHECK_NAMES

from ...config.inventory import yaml_reader
from ...config.templating import is_template
from ...container import Container
from ...container.host import host_command
from ...container.image import NO_VERDICT as CONTAINER_NO_VERDICT
from ...ground.errors import (
    CommandTimeout,
    GpuprovError,
    InputError,
    Interrupted,
    PullError,
    PullNoOutput,
    PullNotStored,
    PullTimedOut,
    Where,
)
from ...ground.fileio import write_atomic
from ...ground.paths import VALIDATE_DIR
from ...ground.runfolder import (
    CRASHED,
    NOT_STORED,
    NOT_UNPACKED,
    REFUSED,
    TIMED_OUT,
    VALIDATION_ATTEMPT,
    attempt_record,
    run_dir,
)
from ...transport.connection import COMMIT_FILE, LineSplitter, pack, unpack_command
from ..results import Outcome
from ..session import HostSession
from .logs import OUTCOME, pull_run, quarantine_note, remote_root, summarize

SUITES = ("quick", "full")
UNPACK_FAILED = 90  # the exit status of `validate_command` when the package did not unpack
# The `rm` of an unpacked package after Ctrl-C; a Ctrl-C waits for it (ours, unsourced: the
# package is a few hundred files, removed in well under a second).
CLEANUP_TIMEOUT_S = 10.0


def package_bytes() -> bytes:
    """The validate/ package as one gzip tarball (built once per run)."""
    return pack(VALIDATE_DIR, "validate")


def validate_command(host_name: str, python: str, run_id: str, args: list[str],
                     remember: bool = False, package_dir: str = "",
                     container: Optional[Container] = None) -> str:
    """The command that unpacks the package (on stdin) and runs it with `python`; with
    `package_dir`, runs the package already there (a bundle's, read-only: no bytecode written).

    With `remember`, `python` was chosen explicitly (`validate_python`) and is written to the
    host's .gpuprov folder; without, a python remembered there wins over `python` (the host's
    default), so `invoke validate` after provisioning uses the venv the recipe built.

    With `container` (`--container`), validate runs in that image (remote/container/host.py);
    `$PY` then only reports the host's own stack beside the container's.
    """
    root = remote_root(host_name)
    out = f'{root}/runs/{shlex.quote(run_id)}'
    pkg = package_folder(host_name, run_id)
    quoted = " ".join(shlex.quote(a) for a in args)
    if package_dir:
        where = shlex.quote(package_dir)
        return (f"mkdir -p {root}/runs && [ -f {where}/validate/__main__.py ] || exit {UNPACK_FAILED}\n"
                f"{choose_python(host_name, python, remember)}"
                f'echo "validate: python $PY, from the bundle at {package_dir}"\n'
                f'cd {where} && PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 "$PY" -m validate '
                f"--out {out} {quoted}\n"
                f"rc=$?\ncd /\nln -sfn {shlex.quote(run_id)} {root}/runs/latest\nexit $rc")
    run = (f'echo "validate: python $PY"\ncd {pkg} && PYTHONUNBUFFERED=1 "$PY" -m validate '
           f"--out {out} {quoted}\n" if container is None else host_command(container, pkg, out, args))
    return (f"mkdir -p {root}/runs && {unpack_command(pkg)} || exit {UNPACK_FAILED}\n"
            f"{choose_python(host_name, python, remember)}{run}"
            f"rc=$?\ncd / && rm -rf {pkg}\n"
            f"ln -sfn {shlex.quote(run_id)} {root}/runs/latest\nexit $rc")


def package_folder(host_name: str, run_id: str) -> str:
    """Where a run unpacks the pushed package on the host (removed after it), a shell word."""
    return f'{remote_root(host_name)}/pkg-{shlex.quote(run_id)}'


def choose_python(host_name: str, python: str, remember: bool = False) -> str:
    """Shell lines that set $PY: with `remember`, `python` (chosen explicitly, written to the
    host's .gpuprov folder); without, the python remembered there, else `python`."""
    root = remote_root(host_name)
    if remember:
        return f'PY={shlex.quote(python)}; printf "%s\\n" "$PY" > {root}/python\n'
    # a remembered python that is gone (venv deleted) falls back to the default
    return (f'PY=$(cat {root}/python 2>/dev/null); '
            f'command -v "$PY" >/dev/null 2>&1 || PY={shlex.quote(python)}\n')


def idle_bound(idle: float, args: list[str]) -> float:
    """`idle` (timeouts.idle), plus the stress check's length when `--stress-seconds` asks for
    one: stress prints one line as it starts and one as it ends, silent in between."""
    for n, arg in enumerate(args):
        text = arg.partition("=")[2] if arg.startswith("--stress-seconds=") else (
            args[n + 1] if arg == "--stress-seconds" and n + 1 < len(args) else None)
        if text is not None:
            try:
                return idle + max(0.0, float(text))
            except ValueError:  # validate refuses it and says so
                pass
    return idle


def remember_python(session: HostSession) -> None:
    """Record the recipe's `validate_python` on the host without validating (provision
    --no-validate, a recipe with `validate: false`), as a validation would, so that a later
    `gpuprov validate` runs the venv the recipe built rather than the host's python."""
    chosen = session.context.get("validate_python")
    if not chosen:
        return
    root = remote_root(session.host.name)
    try:
        session.conn.run(f'mkdir -p {root} && printf "%s\\n" {shlex.quote(str(chosen))} '
                         f'> {root}/python', timeout=session.inventory.timeouts.command)
    except GpuprovError as exc:  # the recipe succeeded; only the reminder is lost
        session.log.event(f"could not record validate_python: {exc}")


# The host's vars that make its node profile (validate/profile.py): `node_profile`, a mapping
# (gpus, pcie, ib, floors, tolerance), and the operator's waivers beside it.
PROFILE_VARS = tuple(yaml_reader.PROFILE_VARS)  # node_profile, then the waivers
WAIVER_VARS = PROFILE_VARS[1:]


def waiver_value(name: str, value: Any) -> Any:
    """A waiver var as the profile takes it: a comma list (`--var ignore_xids=13,31`) as a
    list, Xid numbers written as text as numbers (ASCII digits only: '²' stays text, refused)."""
    if name in ("ignore_xids", "warn_only") and isinstance(value, (str, int)):
        value = [v.strip() for v in str(value).split(",") if v.strip()]
    if name == "ignore_xids" and isinstance(value, list):
        value = [int(v) if isinstance(v, str) and v.strip().isascii() and v.strip().isdigit() else v
                 for v in value]
    return value


def profile_document(context: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The JSON document validate's `--profile` takes, from the host's vars (a group's or the
    host's: the innermost layer's `node_profile` wins whole); None when there is none. The
    control side checked every key before contacting the host (`check_profile_vars`); the
    host's validate checks them again (a value that was a template) and names a bad one."""
    doc = context.get("node_profile")
    if doc in (None, ""):
        doc = {}
    if not isinstance(doc, dict):
        raise InputError(f"node_profile: not a mapping (got {type(doc).__name__})")
    doc = dict(doc)
    for name in WAIVER_VARS:
        value = context.get(name)
        if value not in (None, "", []):
            doc[name] = waiver_value(name, value)
    return doc or None


def check_profile_vars(raw: dict[str, Any], where_of_var: dict[str, Where],
                       given_with_var: dict[str, Any]) -> None:
    """A host's `node_profile` and waivers as written (`raw`, at `where_of_var`), checked with
    the checker validate runs on the host (validate/profile.py), before any host is contacted:
    `InputError` at the line of the offending key; a var given with `--var` (`given_with_var`)
    is named so. A value that is or holds a template is checked on the host, once rendered."""
    for name in PROFILE_VARS:
        value = raw.get(name)
        if value in (None, "", []) or _templated(value):
            continue
        try:
            if name == "node_profile" and not isinstance(value, dict):
                raise profile.BadProfile(f"not a mapping (got {type(value).__name__})", "")
            piece = value if name == "node_profile" else {name: waiver_value(name, value)}
            profile.from_document(json.loads(_as_json(piece)), CHECK_NAMES)  # as the host reads it
        except profile.BadProfile as exc:
            what = str(exc).removeprefix("profile: ")
            what = f"node_profile: {what}" if name == "node_profile" else what
            from_var = name in given_with_var
            where = getattr(value, "where", None) if from_var else where_of_var.get(name)
            if where is None:
                raise InputError(f"--var {what}" if from_var else what) from None
            path = _key_path(exc.key)
            if name != "node_profile" and path[:1] == [name]:
                path = path[1:]
            raise _position(value, path, where).error(what) from None


def _as_json(doc: dict[str, Any]) -> str:
    """The profile as `--profile` carries it (a YAML date, `2026-11-20` unquoted, as text)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)


def _templated(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_templated(v) for v in value.values())
    if isinstance(value, list):
        return any(_templated(v) for v in value)
    return is_template(value)


def _key_path(key: str) -> list[Union[str, int]]:
    """'ib[0].rate_gbps' -> ['ib', 0, 'rate_gbps'] (BadProfile.key)."""
    return [int(part[1:-1]) if part.startswith("[") else part
            for part in re.findall(r"\[\d+\]|[^.\[\]]+", key)]


def _position(value: Any, path: list[Union[str, int]], where: Where) -> Where:
    """The deepest position along `path` that the loaded value remembers (the YAML loader's
    mappings and lists do; an INI value or a comma list stays at its var's line)."""
    for part in path:
        at = getattr(value, "at", None)
        found = (isinstance(value, dict) and part in value) or (
            isinstance(value, list) and isinstance(part, int) and part < len(value))
        if at is None or not found:
            break
        where, value = at(part), value[part]
    return where


def suite_args(suite: str, context: dict[str, Any]) -> list[str]:
    """validate's arguments for `suite` and the host's vars (`gpu_expected`, `node_profile` and
    the waivers, `validate_args`)."""
    args = ["--quick"] if suite == "quick" else []
    expected = context.get("gpu_expected")
    if expected not in (None, ""):
        args += ["--expect-gpus", str(expected)]
    profile = profile_document(context)
    if profile:
        args += ["--profile", _as_json(profile)]
    extra = context.get("validate_args") or []
    args += shlex.split(extra) if isinstance(extra, str) else [str(a) for a in extra]
    return args


class Validate:
    """The `validate` job; `run` is the part `provision` does after the steps."""

    outcome = OUTCOME

    def __init__(self, suite: str, logs_dir: Path, timeout: Optional[float] = None,
                 container: Optional[Container] = None):
        self.suite = suite
        self.container = container  # `--container IMAGE`: validate runs in it
        self.logs_dir = logs_dir
        self.timeout = timeout  # None: the inventory's timeouts.command
        self.package = package_bytes()

    def __call__(self, session: HostSession) -> None:
        session.gather_facts(session.var_facts)
        session.build_context()
        self.run(session)

    def run(self, session: HostSession) -> None:
        """Validate the host of `session`, whose context is built; conclude with the verdict.
        Before anything runs on the host, the run folder gets the control side's record that
        a validation was started (runfolder.VALIDATION_ATTEMPT, which no pull may bring), and
        how it ended once it has: a validation that gave no verdict (timed out, crashed, its
        archive refused) is then a failure in the host's history, not "provisioning only"."""
        quarantine_note(session)
        dest = run_dir(self.logs_dir, session.host.name, session.options.run_id)
        attempt = Attempt(dest)
        try:
            outcome, no_verdict, rc = self._validate(session, dest)
        except Interrupted:
            attempt.end("not validated: interrupted", "interrupted", counts=False)
            raise
        # this machine failing to store the results is no verdict on the host; what the host
        # said in the outcome may echo a secret of the run: masked as the terminal has it
        attempt.end(session.redact(outcome.text), no_verdict, counts=no_verdict != NOT_STORED, rc=rc)
        if attempt.error:
            session.log.event(attempt.error)
        session.conclude(outcome)

    def _validate(self, session: HostSession, dest: Path) -> tuple[Outcome, str, Optional[int]]:
        """Push, run and pull: (the outcome, why there is no verdict ("" when the results came
        home), validate's exit status)."""
        host, log = session.host, session.log
        run_id = session.options.run_id
        chosen = session.context.get("validate_python")
        python = str(chosen or host.python)
        args = suite_args(self.suite, session.context)
        session.reporter.running(host.name, f"validate ({self.suite})")
        lines = LineSplitter(lambda line: session.reporter.output(host.name, line))
        timeouts = session.inventory.timeouts
        bundle = session.options.bundle
        from_bundle = bundle.validate if bundle is not None else ""
        stdin = None if from_bundle else self.package
        pushed = (f"from the bundle at {from_bundle}, nothing pushed" if from_bundle
                  else f"{len(self.package)} bytes pushed")
        try:
            res = session.conn.run(validate_command(host.name, python, run_id, args,
                                                    remember=bool(chosen), package_dir=from_bundle,
                                                    container=self.container),
                                   stdin=stdin, timeout=self.timeout or timeouts.command,
                                   idle_timeout=idle_bound(timeouts.idle, args), on_output=lines)
        except Interrupted:
            # Ctrl-C or SIGTERM stopped the command's whole process group, the `rm` of the
            # unpacked package with it: removed here (the run's output folder is kept)
            if not from_bundle:
                session.remove_folder(package_folder(host.name, run_id), CLEANUP_TIMEOUT_S)
            raise
        except CommandTimeout as exc:
            lines.flush()
            # a timeout stops the command's process group as well (the host's `timeout`, or
            # the client's stop): its `rm` of the package did not run either
            if not from_bundle:
                session.remove_folder(package_folder(host.name, run_id), CLEANUP_TIMEOUT_S)
            session.stalled = f"validation {exc}"
            log.event(f"validate {exc}")
            return Outcome(OUTCOME, f"not validated: {exc}", False), TIMED_OUT, None
        lines.flush()
        log.command("validate", f"python -m validate {' '.join(args)} ({pushed})", res.rc,
                    res.elapsed_s, res.out, res.err)
        if res.rc == UNPACK_FAILED:
            what = (f"the bundle's validate/ is not in {from_bundle}" if from_bundle
                    else "could not unpack the package")
            return (Outcome(OUTCOME, f"not validated: {what} ({res.err.strip()[:200]})", False),
                    NOT_UNPACKED, res.rc)
        refused = self.container.refusal(res.rc) if self.container is not None else None
        if refused:  # the image is missing, has no python3, or did not start: named
            return Outcome(OUTCOME, f"not validated: {refused}", False), CONTAINER_NO_VERDICT, res.rc
        try:
            pull_run(session, run_id, dest)
        except PullError as exc:  # this run's output did not come home: it is not validated
            return Outcome(OUTCOME, f"not validated: {exc}", False), pull_failure(exc), res.rc
        return Outcome(OUTCOME, *summarize(dest / COMMIT_FILE, res.rc)), "", res.rc


def pull_failure(exc: PullError) -> str:
    """Why a pull that failed left the run without a verdict, in the report's words: the
    host had no output folder (validate died before writing one), the pull timed out, or
    the archive was refused (a file only the control side writes, a link, over a cap), or
    this machine could not store it (which does not count against the host)."""
    if isinstance(exc, PullNoOutput):  # logs.pull_run: tar failed on the host
        return CRASHED
    if isinstance(exc, PullTimedOut):
        return TIMED_OUT
    if isinstance(exc, PullNotStored):  # this machine's disk or folder: not the host's failure
        return NOT_STORED
    return REFUSED


class Attempt:
    """The control side's record of one validation of a host (runfolder.VALIDATION_ATTEMPT in
    its run folder `dest`): written when made, before the host runs anything, and at `end`."""

    def __init__(self, dest: Path):
        self.path = dest / VALIDATION_ATTEMPT
        self.started = _now()
        self.error = ""  # why the record could not be written (a full disk): said in the run log
        self._write(attempt_record(self.started))

    def end(self, outcome: str, no_verdict: str, counts: bool = True,
            rc: Optional[int] = None) -> None:
        self._write(attempt_record(self.started, _now(), outcome, no_verdict, counts, rc))

    def _write(self, text: str) -> None:
        try:
            write_atomic(self.path, text)
        except OSError as exc:  # the validation goes on; only the report's record is lost
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
