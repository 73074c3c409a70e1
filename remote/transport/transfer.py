"""Moving folders to and from hosts as one tarball each way, over the command channel.

`pack` builds a gzip tarball of a local folder in memory; `unpack_command` is the host-side
half. `publish_pull` extracts a pulled tarball beside its destination, checks it is complete,
then renames its files into place with the `COMMIT_FILE` last, so a reader never sees a
half-pulled run, and an interrupted pull leaves only a hidden temporary folder behind.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

from ..errors import PullError
from ..fileio import current_umask

COMMIT_FILE = "results.json"
SKIP = {"__pycache__", ".pytest_cache"}


def pack(folder: Path, arcname: str) -> bytes:
    """A gzip tarball of `folder` (without caches) whose top folder is `arcname`."""
    buffer = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        parts = Path(info.name).parts
        if any(p in SKIP for p in parts) or info.name.endswith(".pyc"):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        tar.add(str(folder), arcname=arcname, filter=keep)
    return buffer.getvalue()


def unpack_command(remote_dir: str) -> str:
    """Host-side command that replaces `remote_dir`'s contents with the tarball on stdin.

    `remote_dir` is a shell word, already quoted (it may use "$HOME").
    """
    return f"rm -rf {remote_dir} && mkdir -p {remote_dir} && tar -xzf - -C {remote_dir}"


def pack_command(remote_dir: str) -> str:
    """Host-side command that writes `remote_dir` (a quoted shell word) as a tarball to stdout."""
    return f"tar -czf - -C {remote_dir} ."


def publish_pull(data: bytes, dest: Path) -> list[str]:
    """Store a pulled tarball's files in `dest` (created if needed); return their names.

    Extraction goes to a hidden temporary folder in `dest`'s parent first; only a complete,
    safe archive is moved into place, results.json last.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".pull-{dest.name}-", dir=str(dest.parent)))
    except OSError as exc:
        raise PullError(f"cannot write in {dest.parent}: {exc.strerror}") from None
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = tar.getmembers()
                for member in members:
                    _check_member(member)
                mask = current_umask()
                # Files land as the user's own umask says, not as the host had them.
                tar.extractall(str(tmp), members=members, filter=lambda member, where: (
                    tarfile.data_filter(member, where).replace(mode=member.mode & ~mask & 0o777,
                                                               deep=False)))
        except (tarfile.TarError, EOFError, ValueError) as exc:
            raise PullError(f"the pulled archive is damaged or incomplete: {exc}") from None
        except OSError as exc:
            raise PullError(f"cannot store the pulled files in {dest.parent}: "
                            f"{exc.strerror or exc}") from None
        names = sorted(p.name for p in tmp.iterdir())
        try:
            dest.mkdir(exist_ok=True)
            for name in sorted(names, key=lambda n: n == COMMIT_FILE):
                target = dest / name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                os.replace(tmp / name, target)
        except OSError as exc:
            raise PullError(f"cannot store the pulled files in {dest}: {exc.strerror or exc}") from None
        return names
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_member(member: tarfile.TarInfo) -> None:
    path = Path(member.name)
    if path.is_absolute() or ".." in path.parts:
        raise PullError(f"the pulled archive has an unsafe path: {member.name}")
    if not (member.isfile() or member.isdir()):
        raise PullError(f"the pulled archive has a link or device: {member.name}")
