"""The evidence jobs: `CollectEvidence` (`gpuprov evidence`) and `AfterRMA`, which runs a job
(provision's or validate's) and then collects the evidence when the host's validation in that
run ended with the worst action "drain and replace (RMA)".

Round trips: the last results.json and stack.json this side holds for the host go up as a
tarball (skipped when there is none); the validate package goes up and validate/evidence.py
runs, bounded by its own time limits plus a margin; the archive comes back (`archive.py`); the
host's working folder (`~/.gpuprov/<host>/evidence-<run>/`) is removed.
"""
from __future__ import annotations

import functools
import shlex
import tempfile
from pathlib import Path
from typing import Any, Optional

from validate.actions import DRAIN_RMA
from validate.shared import BUG_REPORT_FULL_TIMEOUT_S as FULL_TIMEOUT_S
from validate.shared import BUG_REPORT_SAFE_TIMEOUT_S as SAFE_TIMEOUT_S

from ..engine.jobs import Job
from ..engine.jobs.logs import PULL_TIMEOUT_S, remote_root
from ..engine.jobs.validate import UNPACK_FAILED, choose_python, package_bytes, suite_args
from ..engine.results import Outcome
from ..engine.session import HostSession
from ..ground.errors import CommandTimeout, ConnectionLost, GpuprovError, HostError, Interrupted, Unreachable
from ..ground.resultsfile import UnusableFile, read_capped, read_results
from ..ground.runfolder import RESULTS, STACK_MANIFEST, run_dir
from ..ground.runid import is_run_id
from ..output.term import printable_line
from ..transport.connection import pack
from .archive import bring_home

OUTCOME = "evidence"
RMA = DRAIN_RMA  # the worst action, in validate/actions.py's words
# The command gets the collector's own bounds (validate/shared.py) and this margin for what the
# collector waits for besides: nvidia-smi -q (60 s there), the kernel log (journalctl, then
# dmesg: 60 s each, validate/checks/xid.py) and a minute to pack (ours, unsourced).
# tests/test_evidence_collect.py holds the margin against them.
MARGIN_S = 240.0
CLEANUP_TIMEOUT_S = 60.0


def latest_file(logs_dir: Path, host: str, name: str) -> Optional[Path]:
    """`name` in the newest run folder of `host` under `logs_dir` that has it."""
    folder = Path(logs_dir) / host
    try:
        runs = sorted((p.name for p in folder.iterdir() if is_run_id(p.name)), reverse=True)
    except OSError:
        return None
    for run in runs:
        path = folder / run / name
        if path.is_file():
            return path
    return None


def evidence_args(context: dict[str, Any]) -> list[str]:
    """`--kernel-log FILE` when the host's validation reads one (its `validate_args`), so the
    Xid lines come from the log the verdict came from."""
    args = suite_args("full", context)
    for n, arg in enumerate(args):
        if arg == "--kernel-log" and n + 1 < len(args):
            return ["--kernel-log", args[n + 1]]
        if arg.startswith("--kernel-log="):
            return ["--kernel-log", arg.partition("=")[2]]
    return []


class CollectEvidence:
    """The `evidence` job: gather the host's evidence, bring the archive home."""

    outcome = OUTCOME

    def __init__(self, logs_dir: Path, full_timeout: float = FULL_TIMEOUT_S,
                 safe_timeout: float = SAFE_TIMEOUT_S):
        self.logs_dir = logs_dir
        self.full_timeout = full_timeout
        self.safe_timeout = safe_timeout

    @functools.cached_property
    def package(self) -> bytes:
        """The validate package, built when a host first needs it: most runs of the validate
        command gather no evidence (only after an RMA verdict) and never build it."""
        return package_bytes()

    def __call__(self, session: HostSession) -> None:
        session.gather_facts(session.var_facts)
        session.build_context()
        text, path = self.run(session)
        session.conclude(Outcome(OUTCOME, text, path is not None))

    def run(self, session: HostSession) -> tuple[str, Optional[Path]]:
        """Collect on the host of `session` (its context built): (text for the recap, the
        archive's path; None when it was not collected)."""
        host = session.host
        session.reporter.running(host.name, "evidence")
        run_id = session.options.run_id
        # the host's working folder as the login user names it; then its absolute path, which
        # the collector (as root with `become`: nvidia-bug-report.sh refuses anyone else) and
        # the clean-up use whatever sudo makes of $HOME
        stage = f"{remote_root(host.name)}/evidence-{shlex.quote(run_id)}"
        folder = run_dir(self.logs_dir, host.name, run_id)
        try:
            try:
                stage, given = self._prepare(session, stage)
                res = session.conn.run(self._command(session, stage, given), stdin=self.package,
                                       timeout=self.full_timeout + self.safe_timeout + MARGIN_S,
                                       become=host.become, become_user=host.become_user)
                session.log.command("evidence", "python -m validate.evidence", res.rc, res.elapsed_s,
                                    res.out, res.err)
                if res.rc == UNPACK_FAILED:
                    return f"evidence not collected: the package did not unpack ({res.err.strip()[:200]})", None
                if res.rc != 0:
                    last = (res.err or res.out).strip().splitlines()[-1:] or [f"exit {res.rc}"]
                    return f"evidence not collected: {printable_line(last[0])[:200]}", None
                timeouts = session.inventory.timeouts
                path, manifest = bring_home(session.conn, f"{stage}/out", folder, run_id,
                                            min(PULL_TIMEOUT_S, timeouts.command), timeouts.idle)
            finally:
                session.remove_folder(stage, CLEANUP_TIMEOUT_S, become=True)
        except (Interrupted, ConnectionLost, Unreachable):
            raise  # the session's to handle, as for any job: the run stops, the host is unreachable
        except CommandTimeout as exc:
            session.log.event(f"evidence {exc}")
            return f"evidence not collected: {exc}", None
        except GpuprovError as exc:
            session.log.event(f"evidence not collected: {exc}")
            return f"evidence not collected: {exc}", None
        text = summary(path, manifest)
        session.log.event(text)
        return text, path

    def _prepare(self, session: HostSession, stage: str) -> tuple[str, list[str]]:
        """Make the host's working folder `stage` afresh with the last results.json and
        stack.json held here for the host: (its absolute path as a shell word, the collector's
        arguments naming the files that went)."""
        found = {}
        for name in (RESULTS, STACK_MANIFEST):
            path = latest_file(self.logs_dir, session.host.name, name)
            if path is None:
                continue
            try:
                found[name] = read_capped(path)
            except UnusableFile:
                continue
        command = f"rm -rf {stage} && mkdir -p {stage}/in && cd {stage} && pwd"
        tarball = None
        if found:
            with tempfile.TemporaryDirectory(prefix="gpuprov-evidence-") as tmp:
                for name, data in found.items():
                    (Path(tmp) / name).write_bytes(data)
                tarball = pack(Path(tmp), ".")
            command = f"rm -rf {stage} && mkdir -p {stage}/in && tar -xzf - -C {stage}/in && cd {stage} && pwd"
        res = session.conn.run(command, stdin=tarball, timeout=CLEANUP_TIMEOUT_S)
        where = res.out.strip()
        if res.rc != 0 or not where.startswith("/") or "\n" in where:
            raise HostError(f"the host could not make {stage} (exit {res.rc}: {res.err.strip()[:200]})")
        absolute = shlex.quote(where)
        flags = {RESULTS: "--results", STACK_MANIFEST: "--stack"}
        return absolute, [f"{flags[name]} {shlex.quote(where + '/in/' + name)}" for name in found]

    def _command(self, session: HostSession, stage: str, given: list[str]) -> str:
        python = str(session.context.get("validate_python") or session.host.python)
        args = ["--host", session.host.name, "--bug-report-timeout", f"{self.full_timeout:g}",
                "--safe-mode-timeout", f"{self.safe_timeout:g}"] + evidence_args(session.context)
        quoted = " ".join([shlex.quote(a) for a in args] + given)  # `given`: already shell words
        return (f"cd {stage} && rm -rf pkg out && mkdir pkg && "
                f"tar -xzf - -C pkg || exit {UNPACK_FAILED}\n"
                f"{choose_python(session.host.name, python)}"
                f'cd {stage}/pkg && "$PY" -m validate.evidence --out {stage}/out {quoted}\n'
                f"rc=$?\ncd / && rm -rf {stage}/pkg\nexit $rc")


def summary(path: Path, manifest: dict[str, Any]) -> str:
    """One line for the recap: where the archive is, its GPUs' serials and what is missing."""
    gpus = _list(manifest.get("gpus"))
    serials = [str(g.get("serial")) for g in gpus if isinstance(g, dict) and g.get("serial")]
    names = [str(m.get("name")) for m in _list(manifest.get("missing")) if isinstance(m, dict)]
    text = (f"evidence in {path}: {len(gpus)} GPU(s)"
            + (f", serials {', '.join(serials[:8])}" if serials else "")
            + (f"; missing: {', '.join(names[:8])}" if names else ""))
    return str(printable_line(text))[:400]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def worst_action(results: Path) -> Optional[str]:
    """The worst action of a pulled results.json (validate's `action`), or None."""
    try:
        action = read_results(results).data.get("action")
    except UnusableFile:
        return None
    return str(action) if isinstance(action, str) else None


class AfterRMA:
    """`job`, then the evidence when this run's validation of the host ended with the worst
    action "drain and replace (RMA)". The host's outcome stays the validation's; the evidence's
    line goes to the recap's notes and the run log, the archive's path to the host's `--json`
    result (`evidence`)."""

    def __init__(self, job: Job, collect: CollectEvidence):
        self.job = job
        self.collect = collect

    @property
    def outcome(self) -> Optional[str]:
        return self.job.outcome

    def __call__(self, session: HostSession) -> None:
        self.job(session)
        folder = run_dir(self.collect.logs_dir, session.host.name, session.options.run_id)
        if worst_action(folder / RESULTS) != RMA:
            return
        text, path = self.collect.run(session)
        if path is not None:
            session.result.evidence = str(path)
        session.reporter.note(f"{session.host.name}: {RMA}: {text}")
