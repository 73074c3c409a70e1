"""The job that puts a checked bundle on a host before the recipe's steps (`provision --bundle`).

The host keeps each bundle unpacked in `/var/lib/gpuprov/bundles/<id>/` (the id names the
manifest, which names every file). A host that already has the bundle whole gets nothing: one
probe, and the step is `ok`; else the archive goes over the SSH session's stdin once (streamed
from the file: the control machine never holds it in memory) and is unpacked into a folder
beside that one while the host hashes the same bytes as they arrive (`tee` into a fifo); the
folder is given the apt source that reads its repository and renamed into place only if that
sha256 is the archive's as `read_bundle` took it. A failed transfer or check leaves nothing
behind and fails that host alone, saying so.

Why the archive's sha256 checks what a `sha256sum -c` of every unpacked file against its
SHA256SUMS did (the push's check until 2026-11), at no second read of 1.25 GB on the host:
`read_bundle` read the archive once, front to back, checking each member's bytes against the
manifest and SHA256SUMS, and hashing those same bytes, all of them, into the archive's sha256
(remote/bundle/archive.py). A host whose received bytes have that sha256 received exactly the
archive that was checked, so `tar -x` wrote exactly the checked files: a byte changed in
transit, a stream cut short, or another archive put at the bundle's path after the check (the
same id, other bytes: the old check passed one that was consistent with its own SHA256SUMS)
fails the comparison, and nothing is renamed into place. What it does not re-check is the disk
under the files after `tar -x` wrote them (tar fails on a write error); apt checks each .deb
against the signed repository's Packages and `uv pip install --require-hashes` each wheel
against its lock again at install.

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
from ..ground.errors import GpuprovError
from .archive import Bundle

STEP = "bundle"
PRESENT = "gpuprov-bundle-present"
RATE_FLOOR = 5e6     # bytes a second a push is allowed at least (a slow link's floor; unsourced)


def probe_command(root: str) -> str:
    return f"[ -f {shlex.quote(root)}/.complete ] && echo {PRESENT} || true"


# The stream's sha256 on the host, by the first there of: openssl's and python3's (OpenSSL's
# SHA-256, which uses the CPU's SHA instructions) or coreutils' sha256sum (its own C code, about
# 8 times the CPU: docs/explanation/figures.md, "Installing from a bundle against the fleet
# cache"). Each prints the hex digest first.
HASHER = ("if command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r; "
          "elif command -v python3 >/dev/null 2>&1; then python3 -c 'import hashlib, sys\n"
          "h = hashlib.sha256()\n"
          "for b in iter(lambda: sys.stdin.buffer.read(1 << 20), b\"\"): h.update(b)\n"
          "print(h.hexdigest())'; "
          "else sha256sum; fi")


def unpack_command(root: str, sha256: str) -> str:
    """Unpack the archive on stdin as `root` if its bytes have `sha256` (the module docstring).

    POSIX sh and coreutils (a stock Debian or Ubuntu host): `tee` copies the stream into a fifo
    that HASHER reads in the background while `tar -x` unpacks. Had tar stopped reading before
    the stream's end, tee would stop too (SIGPIPE) and the hash would not match: the check
    fails closed, never passes on bytes it did not see."""
    r = shlex.quote(root)
    sources = ("Types: deb\n"
               f"URIs: file:{root}/apt\n"
               "Suites: ./\n"
               f"Signed-By: {root}/apt/bundle-key.gpg\n")
    return "\n".join([
        "umask 022",
        f"R={r}; T=$R.partial.$$; S={shlex.quote(sha256)}",
        "trap 'rm -rf \"$T\" \"$T.fifo\" \"$T.sum\"' EXIT",
        'mkdir -p "$T" && mkfifo "$T.fifo" || exit 1',
        f'({HASHER}) < "$T.fifo" > "$T.sum" & H=$!',
        'tee "$T.fifo" | tar -x -f - -C "$T" --no-same-owner --no-same-permissions || '
        '{ wait "$H"; exit 1; }',
        'wait "$H" && read -r GOT REST < "$T.sum" || exit 1',
        '[ "$GOT" = "$S" ] || { echo "the bundle arrived changed: its sha256 here is $GOT, '
        'not $S as checked before the push" >&2; exit 1; }',
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
        route = session.options.bundle
        from_site = route is not None and bool(route.site)   # remote/bundle/site.py set it up
        if not session.options.check and not from_site and not self.push(session):
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
                res = session.conn.run(unpack_command(root, self.bundle.sha256), become=True, stdin=archive,
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
