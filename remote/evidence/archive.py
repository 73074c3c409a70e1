"""Bringing an evidence archive home from a host that may be hostile (see the package's doc).

The host sends a folder holding one file, `evidence-<host>-<serials>.tar.gz`; both the folder's
tarball and that archive go through the transport's checks (`pull`, `publish_pull`: the one
strict tar reader, remote/transport/tarstream.py; no link, device, absolute or `..` name,
sizes within `PullLimits`, nothing replaced), each into its own hidden folder under the run
folder, so nothing lands outside it. The archive must hold one folder named as the archive,
whose manifest.json lists exactly its other files, each with its size and sha256; its name
must be exactly the one the collector gives this host's evidence (validate/evidence.py
`archive_stem`, from this host's inventory name and the manifest's own GPU list), and the
manifest must name this host. Then not the host's bytes but an archive made here of the
checked files is kept (`repack`: manifest.json first, then the files by name; root's, 0644,
dated 0, gzip without a name or date): what is kept is exactly what was checked, whatever the
host's tar or gzip stream held besides.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any, Optional

from validate.evidence import archive_stem
from validate.shared import EVIDENCE_MANIFEST as MANIFEST
from validate.shared import EVIDENCE_STEM_CHARS

from ..ground.errors import PullError
from ..ground.fileio import HashingReader, sha256_file
from ..ground.resultsfile import UnusableFile, read_capped
from ..ground.runfolder import EVIDENCE_PREFIX, EVIDENCE_SUFFIX
from ..transport.connection import BaseConnection, publish_pull, pull

SUFFIX = EVIDENCE_SUFFIX
NAME = re.compile(re.escape(EVIDENCE_PREFIX) + "[" + EVIDENCE_STEM_CHARS + "]{1,250}" + re.escape(SUFFIX))
HIDDEN = ".evidence"  # the hidden folder of the run folder the archive is checked in
CHUNK = 1 << 20


def bring_home(conn: BaseConnection, remote_out: str, run_folder: Path, run_id: str,
               timeout: float, idle_timeout: Optional[float]) -> tuple[Path, dict[str, Any]]:
    """Pull the host's `remote_out` (a quoted shell word: the folder holding the archive) and
    store an archive of its checked files, named for the host of `conn`, in `run_folder`: (its
    path, its manifest). PullError otherwise, with nothing left in `run_folder` but what was
    there."""
    hidden = run_folder / HIDDEN
    try:
        pulled = hidden / "pulled" / run_id
        res, names = pull(conn, remote_out, pulled, timeout=timeout, idle_timeout=idle_timeout)
        if res.rc != 0:
            raise PullError(f"no evidence archive on the host ({res.err.strip()[:200] or f'exit {res.rc}'})")
        if len(names) != 1 or not NAME.fullmatch(names[0]) or not (pulled / names[0]).is_file():
            raise PullError(f"the host sent {names[:5]!r}, not one {EVIDENCE_PREFIX}<host>-<serials>{SUFFIX}")
        name = names[0]
        stem = name[:-len(SUFFIX)]
        opened = hidden / "opened" / run_id
        with (pulled / name).open("rb") as archive:
            publish_pull(archive, opened)
        manifest = check_manifest(opened, stem)
        check_name(conn.host.name, stem, manifest)
        target = run_folder / name
        if target.exists() or target.is_symlink():
            raise PullError(f"{target} already exists: an archive is never replaced")
        repacked = hidden / name
        repack(opened / stem, manifest, repacked)
        os.replace(repacked, target)
        return target, manifest
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


def check_name(host_name: str, stem: str, manifest: dict[str, Any]) -> None:
    """`stem` is exactly the name the collector gives `host_name`'s evidence with the
    manifest's GPUs (a host cannot hand in evidence under another host's name, nor one that
    merely begins like it), and the manifest names that host."""
    gpus = manifest.get("gpus", [])
    if not isinstance(gpus, list) or not all(
            isinstance(g, dict) and isinstance(g.get("serial"), (str, type(None))) for g in gpus):
        raise PullError(f"the evidence archive's {MANIFEST} has no list of GPUs with their serials")
    expected = archive_stem(host_name, gpus)
    if stem != expected:
        raise PullError(f"the host sent {stem + SUFFIX!r}, not one {EVIDENCE_PREFIX}<host>-<serials>{SUFFIX} "
                        f"of {host_name} ({expected + SUFFIX!r} from its manifest's GPUs)")
    if manifest.get("host") != host_name:
        raise PullError(f"the evidence archive's {MANIFEST} names the host {str(manifest.get('host'))[:80]!r}, "
                        f"not {host_name!r}")


def _info(name: str, size: int = 0, folder: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.uid, info.gid, info.uname, info.gname = size, 0, 0, 0, "", ""
    info.type, info.mode = (tarfile.DIRTYPE, 0o755) if folder else (tarfile.REGTYPE, 0o644)
    return info


def repack(folder: Path, manifest: dict[str, Any], out: Path) -> None:
    """`out`: a gzip tarball of the checked `folder` (its name the archive's stem), the same
    for the same files: manifest.json, then the files the manifest lists, by name. Each file's
    bytes are hashed as they go in and must be the manifest's (its own, as checked)."""
    stem = folder.name
    listed = {f["name"]: f["sha256"] for f in manifest["files"]}
    expected = [(MANIFEST, None)] + sorted(listed.items())
    with open(out, "xb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(stem, folder=True))
        for name, sha256 in expected:
            with (folder / name).open("rb") as f:
                checked = HashingReader(f)
                tar.addfile(_info(f"{stem}/{name}", os.fstat(f.fileno()).st_size), checked)
            if sha256 is not None and checked.digest.hexdigest() != sha256:
                raise PullError(f"the evidence archive's {name!r} changed after it was checked")


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
        if entry.get("bytes") != path.stat().st_size or entry.get("sha256") != sha256_file(path):
            raise PullError(f"the evidence archive's {name!r} is not the one its {MANIFEST} lists "
                            "(size or sha256 differ)")
    return manifest
