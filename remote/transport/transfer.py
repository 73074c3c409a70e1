"""Moving folders to and from hosts as one tarball each way, over the command channel.

`pack` builds a gzip tarball of a local folder in memory; `unpack_command` is the host-side
half. `pull` runs `pack_command` on the host with its stdout streamed into an unnamed temporary
file (never held in memory, refused past `PullLimits.archive_bytes`); `publish_pull` extracts
that tarball beside its destination, checks it is complete, then renames its files into place
with the `COMMIT_FILE` last, so a reader never sees a half-pulled run, and an interrupted pull
leaves only a hidden temporary folder behind.

A pulled archive is untrusted: the host chose its run id, its names and its sizes. A pull lands
only in `<logs>/<host>/<run id>/` with a run id shaped like the ones the control side makes,
never replaces a file already there (an earlier pull, the control side's provision.log), never
brings a file the control side writes, and stays within `PullLimits`, all checked before
anything is written.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional, Union

from ..errors import OutputTooLarge, PullError
from ..fileio import current_umask
from ..runfolder import CONTROL_FILES, RESULTS
from ..runid import is_run_id
from .base import BaseConnection, CommandResult

COMMIT_FILE = RESULTS  # moved into place last: its presence says the pull is whole
SKIP = {"__pycache__", ".pytest_cache"}


@dataclass(frozen=True)
class PullLimits:
    """Caps on one pulled archive: its own size as it streams in (`archive_bytes`), and what it
    may unpack to, checked from its headers before anything is written (a 10 MiB archive of
    zeros unpacks to 10 GiB; a sparse member of a few bytes claims 1 GiB). Chosen (unsourced)
    far above a validation run's output, which is a few dozen files of well under 1 MiB each;
    `GPUPROV_PULL_MAX_ARCHIVE_BYTES`, `GPUPROV_PULL_MAX_BYTES`, `GPUPROV_PULL_MAX_FILE_BYTES`
    and `GPUPROV_PULL_MAX_FILES` change them."""

    total_bytes: int = 1 << 30
    file_bytes: int = 256 << 20
    members: int = 10_000
    archive_bytes: int = 256 << 20

    @classmethod
    def from_env(cls) -> PullLimits:
        """The defaults, with any of the environment variables applied."""
        limits = {}
        for field, variable in (("total_bytes", "GPUPROV_PULL_MAX_BYTES"),
                                ("file_bytes", "GPUPROV_PULL_MAX_FILE_BYTES"),
                                ("members", "GPUPROV_PULL_MAX_FILES"),
                                ("archive_bytes", "GPUPROV_PULL_MAX_ARCHIVE_BYTES")):
            text = os.environ.get(variable)
            if text is None:
                continue
            try:
                limits[field] = int(text)
            except ValueError:
                raise PullError(f"{variable} must be a whole number, not {text!r}") from None
            if limits[field] < 1:
                raise PullError(f"{variable} must be at least 1, not {text!r}")
        return cls(**limits)


def _cache(rel: str) -> bool:
    """A path inside a package that `pack` leaves out (caches, bytecode)."""
    return any(p in SKIP for p in Path(rel).parts) or rel.endswith(".pyc")


def package_files(folder: Path) -> dict[str, Path]:
    """The files of `folder` that `pack` sends, by path relative to it."""
    return {path.relative_to(folder).as_posix(): path for path in sorted(folder.rglob("*"))
            if path.is_file() and not _cache(path.relative_to(folder).as_posix())}


def pack(folder: Path, arcname: str) -> bytes:
    """A gzip tarball of `folder` (without caches) whose top folder is `arcname`."""
    buffer = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        if _cache(info.name):
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


def pull(conn: BaseConnection, remote_dir: str, dest: Path, timeout: float = 600.0,
         limits: Optional[PullLimits] = None,
         idle_timeout: Optional[float] = None) -> tuple[CommandResult, list[str]]:
    """Pull the host's `remote_dir` (a quoted shell word) into `dest` (see `publish_pull`):
    (the pack command's result, the names stored; none when it failed on the host).

    The archive streams into an unnamed file in `dest`'s parent, never whole in memory, and is
    refused with `PullError` past `limits.archive_bytes`; `result.stdout_bytes` is its size."""
    _check_run_id(dest)  # before anything is made in `dest`'s parent
    limits = limits or PullLimits.from_env()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        archive = tempfile.TemporaryFile(prefix=".pull-", dir=str(dest.parent))
    except OSError as exc:
        raise PullError(f"cannot write in {dest.parent}: {exc.strerror}") from None
    with archive:
        try:
            result = conn.run(pack_command(remote_dir), timeout=timeout, stdout_to=archive,
                              stdout_max_bytes=limits.archive_bytes, idle_timeout=idle_timeout)
        except OutputTooLarge:
            raise PullError(f"the pulled archive is over the {_size(limits.archive_bytes)} "
                            "allowed (GPUPROV_PULL_MAX_ARCHIVE_BYTES)") from None
        except OSError as exc:  # the archive file: disk full
            raise PullError(f"cannot store the pulled archive in {dest.parent}: "
                            f"{exc.strerror or exc}") from None
        if result.rc != 0:
            return result, []
        archive.seek(0)
        return result, publish_pull(archive, dest, limits)


def publish_pull(data: Union[bytes, BinaryIO], dest: Path,
                 limits: Optional[PullLimits] = None) -> list[str]:
    """Store a pulled tarball (bytes, or a file at its start) in `dest` = `<logs>/<host>/<run
    id>` (created if needed); return the names stored. `limits` defaults to
    `PullLimits.from_env()`.

    Extraction goes to a hidden temporary folder in `dest`'s parent first; only a complete,
    safe archive is moved into place, results.json last.
    """
    _check_run_id(dest)
    limits = limits or PullLimits.from_env()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".pull-{dest.name}-", dir=str(dest.parent)))
    except OSError as exc:
        raise PullError(f"cannot write in {dest.parent}: {exc.strerror}") from None
    try:
        try:
            archive = io.BytesIO(data) if isinstance(data, bytes) else data
            with tarfile.open(fileobj=archive, mode="r:gz") as tar:
                members = _checked_members(tar, limits)
                _check_new(dest, members)
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
                os.replace(tmp / name, dest / name)
        except OSError as exc:
            raise PullError(f"cannot store the pulled files in {dest}: {exc.strerror or exc}") from None
        return names
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_run_id(dest: Path) -> None:
    if not is_run_id(dest.name):
        raise PullError(f"the host's run id {dest.name!r} is not one gpuprov makes (like "
                        "20261122T055742.123Z-14af): refusing to store its files")


def _checked_members(tar: tarfile.TarFile, limits: PullLimits) -> list[tarfile.TarInfo]:
    """The archive's members, read header by header and refused at the first one past a limit
    (iterating decompresses only up to that header, so a bomb stops early)."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        members.append(member)
        if len(members) > limits.members:
            raise PullError(f"the pulled archive has more than {limits.members} members "
                            "(GPUPROV_PULL_MAX_FILES)")
        _check_member(member)
        if member.issparse():
            raise PullError(f"the pulled archive has a sparse file: {member.name!r}")
        if member.size > limits.file_bytes:
            raise PullError(f"the pulled archive's {member.name!r} unpacks to "
                            f"{_size(member.size)}, over the {_size(limits.file_bytes)} allowed "
                            "per file (GPUPROV_PULL_MAX_FILE_BYTES)")
        total += member.size
        if total > limits.total_bytes:
            raise PullError(f"the pulled archive unpacks to more than "
                            f"{_size(limits.total_bytes)} (GPUPROV_PULL_MAX_BYTES)")
    return members


def _check_member(member: tarfile.TarInfo) -> None:
    path = Path(member.name)
    if path.is_absolute() or ".." in path.parts:
        raise PullError(f"the pulled archive has an unsafe path: {member.name!r}")
    if not (member.isfile() or member.isdir()):
        raise PullError(f"the pulled archive has a link or device: {member.name!r}")
    if path.parts and path.parts[0] in CONTROL_FILES:
        raise PullError(f"the pulled archive has {path.parts[0]}, which only the control side "
                        "writes: refusing it")


def _check_new(dest: Path, members: list[tarfile.TarInfo]) -> None:
    """Refuse a pull that would replace anything already in `dest` (an earlier pull of the
    same run, or what the control side wrote there)."""
    for name in sorted({Path(m.name).parts[0] for m in members if Path(m.name).parts}):
        target = dest / name
        if target.exists() or target.is_symlink():
            raise PullError(f"{target} already exists (pulled before?): a pull never replaces "
                            "files; move the folder away to pull again")


def _size(count: int) -> str:
    """`count` bytes for a message: in MiB when it is a whole number of them."""
    return f"{count >> 20} MiB" if count and count % (1 << 20) == 0 else f"{count} bytes"
