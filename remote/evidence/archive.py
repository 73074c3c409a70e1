"""Bringing an evidence archive home from a host that may be hostile (see the package's doc).

The host sends a folder holding one file, `evidence-<host>-<serials>.tar.gz`; both the folder's
tarball and that archive go through the transport's checks (`pull`, `publish_pull`: no link,
device, absolute or `..` name, sizes within `PullLimits`, nothing replaced), each into its own
hidden folder under the run folder, so nothing lands outside it. The archive must hold one
folder named as the archive, whose manifest.json lists exactly its other files, each with its
size and sha256; then the archive, as the host made it, is moved into the run folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

from ..errors import PullError
from ..resultsfile import UnusableFile, read_capped
from ..runfolder import EVIDENCE_PREFIX, EVIDENCE_SUFFIX
from ..transport.connection import BaseConnection, publish_pull, pull

MANIFEST = "manifest.json"  # validate/evidence.py MANIFEST
SUFFIX = EVIDENCE_SUFFIX
# validate/evidence.py archive_stem: letters, digits, '.', '-', '_' and the '+N' of a cut list
NAME = re.compile(re.escape(EVIDENCE_PREFIX) + r"[A-Za-z0-9._+-]{1,250}" + re.escape(SUFFIX))
HIDDEN = ".evidence"  # the hidden folder of the run folder the archive is checked in
# validate/evidence.py archive_stem's host part: the name with runs of other characters as '_'
# (tests/test_evidence_collect.py holds the two equal)
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


def host_part(host_name: str) -> str:
    """The `<host>` of `evidence-<host>-<serials>.tar.gz` as the collector writes it."""
    return (_UNSAFE.sub("_", host_name).strip("._") or "host")[:64]


def bring_home(conn: BaseConnection, remote_out: str, run_folder: Path, run_id: str,
               timeout: float, idle_timeout: Optional[float]) -> tuple[Path, dict[str, Any]]:
    """Pull the host's `remote_out` (a quoted shell word: the folder holding the archive) and
    store its checked archive, named for the host of `conn`, in `run_folder`: (its path, its
    manifest). PullError otherwise, with nothing left in `run_folder` but what was there."""
    hidden = run_folder / HIDDEN
    prefix = f"{EVIDENCE_PREFIX}{host_part(conn.host.name)}-"
    try:
        pulled = hidden / "pulled" / run_id
        res, names = pull(conn, remote_out, pulled, timeout=timeout, idle_timeout=idle_timeout)
        if res.rc != 0:
            raise PullError(f"no evidence archive on the host ({res.err.strip()[:200] or f'exit {res.rc}'})")
        if len(names) != 1 or not NAME.fullmatch(names[0]) or not names[0].startswith(prefix) \
                or not (pulled / names[0]).is_file():  # another host's name is not this host's
            raise PullError(f"the host sent {names[:5]!r}, not one {EVIDENCE_PREFIX}<host>-<serials>{SUFFIX}")
        name = names[0]
        opened = hidden / "opened" / run_id
        with (pulled / name).open("rb") as archive:
            publish_pull(archive, opened)
        manifest = check_manifest(opened, name[:-len(SUFFIX)])
        target = run_folder / name
        if target.exists() or target.is_symlink():
            raise PullError(f"{target} already exists: an archive is never replaced")
        os.replace(pulled / name, target)
        return target, manifest
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_manifest(opened: Path, stem: str) -> dict[str, Any]:
    """The manifest of the archive opened in `opened`, once it is shown to list exactly the
    files of the archive's one folder `stem`, with their sizes and sha256s."""
    top = sorted(p.name for p in opened.iterdir())
    if top != [stem] or not (opened / stem).is_dir():
        raise PullError(f"the evidence archive holds {top[:5]!r}, not the one folder {stem!r}")
    folder = opened / stem
    try:
        data = json.loads(read_capped(folder / MANIFEST))
    except (UnusableFile, ValueError, RecursionError):
        raise PullError(f"the evidence archive has no readable {MANIFEST}") from None
    if not isinstance(data, dict):
        raise PullError(f"the evidence archive's {MANIFEST} is not a JSON object")
    manifest: dict[str, Any] = data
    files = manifest.get("files")
    if not isinstance(files, list) or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) for f in files):
        raise PullError(f"the evidence archive's {MANIFEST} has no list of files")
    listed = {f["name"]: f for f in files}
    present = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*")
               if p.relative_to(folder).as_posix() != MANIFEST}
    if set(listed) != set(present) or not all(p.is_file() for p in present.values()):
        unlisted = sorted(set(present) - set(listed))[:5]
        absent = sorted(set(listed) - set(present))[:5]
        raise PullError(f"the evidence archive's {MANIFEST} does not match its files "
                        f"(not listed: {unlisted}; listed, not there: {absent})")
    for name, path in sorted(present.items()):
        entry = listed[name]
        if entry.get("bytes") != path.stat().st_size or entry.get("sha256") != sha256_of(path):
            raise PullError(f"the evidence archive's {name!r} is not the one its {MANIFEST} lists "
                            "(size or sha256 differ)")
    return manifest
