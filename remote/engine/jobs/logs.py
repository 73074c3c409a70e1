"""Pull what a validation left on a host (`logs`), and the pull every validation ends with.

On the host a validation's output lives in `$HOME/.gpuprov/<host>/runs/<run-id>/` (kept, so it
can be fetched again) with `runs/latest` naming the newest; it comes back as one tarball into
`<logs>/<host>/<run-id>/`, its `results.json` written last.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

from validate.shared import NOTHING_COUNTED, counted

from ...ground.errors import CommandTimeout, PullError, PullNoOutput, PullTimedOut
from ...ground.resultsfile import MAX_FILE_BYTES, UnusableFile, read_results
from ...ground.runfolder import run_dir
from ...output.term import printable_line
from ...transport.connection import COMMIT_FILE, pull
from ..results import Outcome
from ..session import HostSession

OUTCOME = "validation"
PULL = "pull"  # the outcome of a `logs` pull that failed: no verdict
# A pull (at most 256 MiB) and a readlink get this long, or the inventory's timeouts.command
# when that is shorter; a pull also fails after timeouts.idle without a byte.
PULL_TIMEOUT_S = 600.0
READLINK_TIMEOUT_S = 60.0
# The quarantine mark `gpuprov remediate` leaves in the host's gpuprov folder while the host is
# out of service (remote/remediation/ssh.py): one line, the reason. Read here, the folder's owner.
QUARANTINE_MARK = "quarantine"
QUARANTINE_READ_MAX = 300  # characters of the mark shown (chosen: one line)


def remote_root(host_name: str) -> str:
    """The host's gpuprov folder, as a shell word."""
    return f'"$HOME"/.gpuprov/{shlex.quote(host_name)}'


def quarantine_note(session: HostSession) -> None:
    """Warn when the host carries `gpuprov remediate`'s quarantine mark (a line; the run goes
    on: the mark says who holds the host and why, it locks nothing)."""
    try:
        res = session.conn.run(f"cat {remote_root(session.host.name)}/{QUARANTINE_MARK} 2>/dev/null",
                               timeout=READLINK_TIMEOUT_S)
    except CommandTimeout as exc:  # a slow host: the validation says the rest
        session.log.event(f"quarantine mark not read: {exc}")
        return
    text = " ".join(res.out.split())[:QUARANTINE_READ_MAX]
    if res.rc == 0 and text and session.options.run_id not in text:  # not this run's own mark
        session.warn(f"quarantined (gpuprov remediate holds it out of service): {text}")


def pull_run(session: HostSession, run_id: str, dest: Path) -> None:
    """Pull validation run `run_id`'s output folder from the host into `dest`; `PullError` with
    the reason when it did not come home (refused, too large, timed out, tar failed on the
    host): no verdict, the caller's to word (`summarize` judges what did come)."""
    remote = f"{remote_root(session.host.name)}/runs/{shlex.quote(run_id)}"
    try:
        # streamed into a file beside `dest` and capped: never whole in memory
        timeouts = session.inventory.timeouts
        res, names = pull(session.conn, remote, dest, timeout=min(PULL_TIMEOUT_S, timeouts.command),
                          idle_timeout=timeouts.idle)
    except PullError as exc:
        session.log.event(f"pull failed: {exc}")
        raise
    except CommandTimeout as exc:
        session.log.event(f"pull {exc}")
        raise PullTimedOut(f"the pull {exc}") from None
    if res.rc != 0:
        said = "; ".join(line.strip() for line in res.err.strip().splitlines())
        session.log.event(f"pull failed: exit {res.rc}: {said}")
        raise PullNoOutput(f"no output on the host ({printable_line(said)[:200]})")
    session.log.event(f"pulled {res.stdout_bytes} bytes into {dest}: {', '.join(names)}")


# A results.json larger than this is not read (remote.ground.resultsfile, the one reader).
MAX_RESULTS_BYTES = MAX_FILE_BYTES


DEFERRED_MAX = 80  # the longest action of validate/actions.py is 22 characters


def summarize(results_path: Path, rc: Optional[int]) -> tuple[str, bool]:
    """(text for the recap, ok) from a pulled results.json: what the host wrote is untrusted, so
    anything but a list of checks with names is 'not validated', and so are zero checks and a run
    in which no check counted (validate exit 3: 'not validated: nothing counted')."""
    try:
        data = read_results(results_path).data
    except UnusableFile as exc:
        if exc.reason == "too_large":
            return f"not validated: {COMMIT_FILE} is larger than {MAX_RESULTS_BYTES >> 20} MiB", False
        if exc.reason == "checks":
            return f"not validated: {COMMIT_FILE} has no list of named checks", False
        return f"not validated: no readable {COMMIT_FILE} (validate exit {rc})", False
    if "checks" not in data:
        return f"not validated: no readable {COMMIT_FILE} (validate exit {rc})", False
    checks = data["checks"]
    if not all(isinstance(c.get("name"), str) for c in checks):
        return f"not validated: {COMMIT_FILE} has no list of named checks", False
    if not checks:
        return f"not validated: {COMMIT_FILE} lists no checks", False

    def names(status: str) -> str:
        # printable_line: a check name from the host cannot forge lines of the recap
        return ", ".join(printable_line(c["name"]) for c in checks
                         if c.get("required") and c.get("status") == status)

    waived = waivers_used(data)
    if not counted(checks):
        # every check left out or not applicable here: nothing counted is not a pass (issue 45)
        apart = ", ".join(printable_line(c["name"]) for c in checks if isinstance(c.get("waived"), str))
        return f"not validated: {NOTHING_COUNTED}" + (f" ({apart} n/a)" if apart else "") + waived, False
    if names("fail"):
        return "failed: " + names("fail") + waived, False
    if names("skip"):
        return "not validated: " + names("skip") + " skipped", False
    ok = data.get("ok") is True and rc == 0
    passed = sum(1 for c in checks if c.get("status") == "pass")
    if not ok:
        return f"failed (validate exit {rc})", False
    # A passing node may still owe an action once idle (a pending row remap: "reset the GPU",
    # issue 30): the recap says so, as the health line does. One printable line, cut.
    deferred = data.get("deferred_action")
    later = (f" [action: {printable_line(deferred)[:DEFERRED_MAX]}, deferred]"
             if isinstance(deferred, str) and deferred else "")
    return f"passed ({passed} checks){later}{waived}", True


def waivers_used(data: dict[str, Any]) -> str:
    """' [waived: warn_only p2p, ignore_xids]': the inventory's waivers a run used (results.json
    `waivers`, validate/profile.py), named in the recap; '' for none. Untrusted: printable, cut."""
    used = data.get("waivers")
    if not isinstance(used, list):
        return ""
    words = []
    for w in used:
        if isinstance(w, dict) and isinstance(w.get("waiver"), str):
            word = printable_line(w["waiver"])[:40]
            if isinstance(w.get("check"), str) and w["waiver"] == "warn_only":
                word += " " + printable_line(w["check"])[:40]
            if word not in words:
                words.append(word)
    return f" [waived: {', '.join(words[:8])}]" if words else ""


def latest_run_id(session: HostSession) -> Optional[str]:
    """The run id `runs/latest` names on the host, if any and its folder is there (one removed
    by hand leaves the link behind: no validation run either)."""
    res = session.conn.run(f"cd {remote_root(session.host.name)}/runs 2>/dev/null && run=$(readlink latest) "
                           '&& [ -d "$run" ] && printf "%s\\n" "$run"',
                           timeout=min(READLINK_TIMEOUT_S, session.inventory.timeouts.command))
    run_id = res.out.strip()
    # any other shape (`..`, `.`) is refused by transfer.pull, before anything is made or pulled
    return run_id if res.rc == 0 and run_id else None


class PullLogs:
    """The `logs` job: the latest validation run's folder into `<logs_dir>/<host>/<run-id>/`."""

    outcome = OUTCOME

    def __init__(self, logs_dir: Path):
        self.logs_dir = logs_dir

    def __call__(self, session: HostSession) -> None:
        run_id = latest_run_id(session)
        if run_id is None:
            # Nothing to pull (a host only provisioned) is no failed validation: said plainly,
            # exit 0, as `gpuprov report` over runs without validation (remote/exitcodes.NOTHING).
            name = session.host.name
            session.conclude(Outcome(OUTCOME, "none on the host: nothing to pull", True))
            session.reporter.note(f"{name}: no validation run on the host, nothing to pull "
                                  f"(`gpuprov validate --host {name}` runs one)")
            return
        dest = run_dir(self.logs_dir, session.host.name, run_id)
        try:
            pull_run(session, run_id, dest)
        except PullError as exc:
            # Not pulled: nothing was judged, so no verdict either; the job's own work failed
            # (exit 1, remote/ground/exitcodes.py), not a validation.
            session.conclude(Outcome(PULL, f"{run_id}: not pulled: {exc}", False))
            return
        text, _ = summarize(dest / COMMIT_FILE, 0)
        # The pull is the job and it succeeded, whatever the verdict it fetched ("passed",
        # "failed: ...", "not validated: ..."): shown in the recap, exit 0 (remote/exitcodes.PULLED);
        # `gpuprov validate` is the command whose status is the verdict.
        session.conclude(Outcome(OUTCOME, f"{run_id}: {text}", True))
        session.reporter.note(f"{session.host.name}: logs of run {run_id} in {dest}")
