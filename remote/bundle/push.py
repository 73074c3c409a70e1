"""The job that puts a checked bundle on a host before the recipe's steps (`provision --bundle`).

The host keeps each bundle unpacked in `/var/lib/gpuprov/bundles/<id>/` (the id names the
manifest, which names every file). A host that already has the bundle whole gets nothing: one
probe, and the step is `ok`; else the archive goes over the SSH session's stdin once (streamed
from the file: the control machine never holds it in memory), is unpacked into a folder beside
that one, checked there with `sha256sum -c` against its SHA256SUMS (what
was written is what was checked on the control machine), given the apt source that reads its
repository, and renamed into place. A failed transfer or check leaves nothing behind and fails
that host alone, naming the file.

The apt source is deb822 (sources.list(5), "DEB822-STYLE FORMAT") with `Signed-By:` the
bundle's own key, never `[trusted=yes]`: apt checks InRelease's signature with that key alone
(apt-secure(8)). It lives in the bundle's folder, not in /etc/apt/sources.list.d: only the
bundle's steps read it (`BundleRoute.apt_options`), and the host's own sources stay as they
were. Signed-By keyrings "have to be accessible and readable for the _apt system user"
(sources.list(5)): the folder is world-readable.
"""
from __future__ import annotations

import shlex
import time
from typing import Optional

from ..engine.jobs import Job
from ..engine.results import StepResult, StepStatus
from ..engine.session import HostSession
from ..errors import GpuprovError
from .archive import SUMS, Bundle

STEP = "bundle"
PRESENT = "gpuprov-bundle-present"
RATE_FLOOR = 5e6     # bytes a second a push is allowed at least (a slow link's floor; unsourced)


def probe_command(root: str) -> str:
    return f"[ -f {shlex.quote(root)}/.complete ] && echo {PRESENT} || true"


def unpack_command(root: str) -> str:
    """Unpack the archive on stdin as `root` (see the module docstring)."""
    r = shlex.quote(root)
    sources = ("Types: deb\n"
               f"URIs: file:{root}/apt\n"
               "Suites: ./\n"
               f"Signed-By: {root}/apt/bundle-key.gpg\n")
    return "\n".join([
        "umask 022",
        f"R={r}; T=$R.partial.$$",
        "trap 'rm -rf \"$T\"' EXIT",
        'mkdir -p "$T" || exit 1',
        'tar -x -f - -C "$T" --no-same-owner --no-same-permissions || exit 1',
        f'(cd "$T" && sha256sum -c --quiet --strict {SUMS}) >&2 || '
        "{ echo 'the bundle arrived changed: the files above do not match its SHA256SUMS' >&2; exit 1; }",
        'mkdir -p "$T/sources.d" "$T/lists/partial" || exit 1',
        f"printf '%s' {shlex.quote(sources)} > \"$T/sources.d/gpuprov-bundle.sources\" || exit 1",
        'rm -rf "$R" && mv "$T" "$R" && touch "$R/.complete"',
    ])


class PushBundle:
    """`job`, after the bundle is on the host (see the module docstring)."""

    def __init__(self, bundle: Bundle, job: Job):
        self.bundle = bundle
        self.job = job

    @property
    def outcome(self) -> Optional[str]:
        return self.job.outcome

    def __call__(self, session: HostSession) -> None:
        if not session.options.check and not self.push(session):
            return
        self.job(session)

    def push(self, session: HostSession) -> bool:
        """Put the bundle on the host; False (the host failed, the step says why) otherwise."""
        root = session.options.bundle.root if session.options.bundle else ""
        started = time.monotonic()
        timeouts = session.inventory.timeouts
        session.reporter.running(session.host.name, STEP)
        try:
            probe = session.conn.run(probe_command(root), become=True, timeout=timeouts.command)
            if PRESENT in probe.out:
                session.record(StepResult(f"{STEP} {self.bundle.id} on the host", StepStatus.OK,
                                          time.monotonic() - started))
                return True
            size = self.bundle.size
            # streamed from the file, a piece at a time, by each host's own reader: the control
            # machine holds no archive in memory, whatever its size or the number of hosts
            with open(self.bundle.path, "rb") as archive:
                res = session.conn.run(unpack_command(root), become=True, stdin=archive,
                                       timeout=max(timeouts.command, 60 + size / RATE_FLOOR))
        except OSError as exc:
            session.fail(STEP, f"could not read the bundle {self.bundle.path}: {exc}")
            return False
        except GpuprovError as exc:
            session.fail(STEP, f"could not push the bundle: {exc}")
            return False
        session.log.command(STEP, f"unpack the bundle into {root} ({size} bytes pushed)", res.rc,
                            res.elapsed_s, res.out, res.err)
        if res.rc != 0:
            last = (res.err.strip() or res.out.strip()).splitlines()
            session.fail(STEP, " ".join(last[-3:])[:400] or f"unpacking exited {res.rc}")
            return False
        session.record(StepResult(f"{STEP} {self.bundle.id} pushed ({size / 1e6:.1f} MB)",
                                  StepStatus.CHANGED, time.monotonic() - started))
        return True
