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

import hashlib
import io
import os
import shutil
import tarfile  # `pack` only: archives are read by tarstream
import tempfile
import zipfile  # `pack_zip` only
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Optional, Union

from ..ground.errors import OutputTooLarge, PullError, PullNotStored
from ..ground.fileio import current_umask
from ..ground.runfolder import CONTROL_FILES, RESULTS
from ..ground.runid import is_run_id
from .base import BaseConnection, CommandResult
from .tarstream import GzipStream, Member, TarReader, TarRefused

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


def pack_zip(folder: Path, arcname: str) -> bytes:
    """A zip of `folder` (the files `pack` sends) whose top folder is `arcname`: a package
    Python imports where it lies (`PYTHONPATH=<zip>`: "ZIP archives ... may be added to
    sys.path", docs.python.org/3/library/zipimport.html), so a node stores one file where the
    tarball had it create every one (the Slurm route's step: bench.slurm_overhead, issue 43)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for rel, path in package_files(folder).items():
            archive.write(path, f"{arcname}/{rel}")
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
        raise PullNotStored(f"cannot write in {dest.parent}: {exc.strerror}") from None
    with archive:
        try:
            result = conn.run(pack_command(remote_dir), timeout=timeout, stdout_to=archive,
                              stdout_max_bytes=limits.archive_bytes, idle_timeout=idle_timeout)
        except OutputTooLarge:
            raise PullError(f"the pulled archive is over the {_size(limits.archive_bytes)} "
                            "allowed (GPUPROV_PULL_MAX_ARCHIVE_BYTES)") from None
        except OSError as exc:  # the archive file: disk full
            raise PullNotStored(f"cannot store the pulled archive in {dest.parent}: "
                            f"{exc.strerror or exc}") from None
        if result.rc != 0:
            return result, []
        archive.seek(0)
        return result, publish_pull(archive, dest, limits)


def publish_pull(data: Union[bytes, BinaryIO], dest: Path,
                 limits: Optional[PullLimits] = None) -> list[str]:
    """Store a pulled tarball (bytes, or a seekable file at its start) in `dest` = `<logs>/<host>/
    <run id>` (created if needed); return the names stored. `limits` defaults to
    `PullLimits.from_env()`.

    Read twice with the one strict reader (remote/transport/tarstream.py): first to the end,
    every header and the archive's end checked against the limits and `dest`, nothing written;
    then each checked member is written by this function itself (plain files and folders, no
    name outside the folder) into a hidden temporary folder in `dest`'s parent, and only a
    complete archive is moved into place, results.json last.
    """
    _check_run_id(dest)
    limits = limits or PullLimits.from_env()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".pull-{dest.name}-", dir=str(dest.parent)))
    except OSError as exc:
        raise PullNotStored(f"cannot write in {dest.parent}: {exc.strerror}") from None
    try:
        archive = io.BytesIO(data) if isinstance(data, bytes) else data
        try:
            start = archive.tell()
            checker = _Checker(dest, limits)
            _read(archive, checker)
            archive.seek(start)
            writer = _Writer(tmp)
            _read(archive, writer.write)
            writer.finish(checker.digest.digest())
        except OSError as exc:
            raise PullNotStored(f"cannot store the pulled files in {dest.parent}: "
                            f"{exc.strerror or exc}") from None
        names = sorted(p.name for p in tmp.iterdir())
        try:
            dest.mkdir(exist_ok=True)
            for name in sorted(names, key=lambda n: n == COMMIT_FILE):
                os.replace(tmp / name, dest / name)
        except OSError as exc:
            raise PullNotStored(f"cannot store the pulled files in {dest}: {exc.strerror or exc}") from None
        return names
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read(archive: BinaryIO, each: Callable[[TarReader, Member], None]) -> None:
    """Each member of the gzip tarball `archive` handed to `each` as it is read, the archive
    read to its end; PullError for anything the reader refuses."""
    reader = TarReader(GzipStream(archive))
    try:
        for member in reader.members():
            each(reader, member)
    except TarRefused as exc:
        if exc.damaged:
            raise PullError(f"the pulled archive is damaged or incomplete: {exc}") from None
        if exc.not_plain and exc.why != "a sparse file":
            raise PullError(f"the pulled archive has a link or device ({exc.why}): {exc.where}") from None
        raise PullError(f"the pulled archive has {exc}") from None


def _check_run_id(dest: Path) -> None:
    if not is_run_id(dest.name):
        raise PullError(f"the host's run id {dest.name!r} is not one gpuprov makes (like "
                        "20261122T055742.123Z-14af): refusing to store its files")


class _Checker:
    """The first reading, member by member: within `limits`, not a file the control side
    writes, not one already in `dest` (an earlier pull of the same run, or what the control
    side wrote there). Refused at the first one wrong, before anything is written (reading
    only up to that header, so a bomb stops early)."""

    def __init__(self, dest: Path, limits: PullLimits):
        self.dest = dest
        self.limits = limits
        self.count = self.total = 0
        self.digest = hashlib.sha256()

    def __call__(self, reader: TarReader, member: Member) -> None:
        _add(self.digest, member)
        limits = self.limits
        self.count += 1
        self.total += member.size
        if self.count > limits.members:
            raise PullError(f"the pulled archive has more than {limits.members} members "
                            "(GPUPROV_PULL_MAX_FILES)")
        if member.size > limits.file_bytes:
            raise PullError(f"the pulled archive's {member.raw!r} unpacks to "
                            f"{_size(member.size)}, over the {_size(limits.file_bytes)} allowed "
                            "per file (GPUPROV_PULL_MAX_FILE_BYTES)")
        if self.total > limits.total_bytes:
            raise PullError(f"the pulled archive unpacks to more than "
                            f"{_size(limits.total_bytes)} (GPUPROV_PULL_MAX_BYTES)")
        if not member.name:
            return  # the folder itself (`./`)
        top = member.name.split("/")[0]
        if top in CONTROL_FILES:
            raise PullError(f"the pulled archive has {top}, which only the control side "
                            "writes: refusing it")
        target = self.dest / top
        if target.exists() or target.is_symlink():
            raise PullError(f"{target} already exists (pulled before?): a pull never replaces "
                            "files; move the folder away to pull again")


def _add(digest: hashlib._Hash, member: Member) -> None:
    """`member`'s fields into `digest` (the two readings compared without keeping a list of
    members: memory does not grow with their count)."""
    digest.update(repr((member.name, member.isdir, member.size, member.mode, member.mtime)).encode() + b"\0")


class _Writer:
    """The second reading: each member, the same as the first reading's, written into `tmp`
    (files as the user's own umask says, not as the host had them; folders' modes set last,
    so that a read-only folder still gets its files)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.digest = hashlib.sha256()
        self.mask = current_umask()
        self.folders: list[tuple[Path, Member]] = []

    def write(self, reader: TarReader, member: Member) -> None:
        _add(self.digest, member)
        if not member.name:
            return
        path = self.tmp / member.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if member.isdir:
            path.mkdir(mode=0o700, exist_ok=True)
            self.folders.append((path, member))
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            for data in reader.data():
                out.write(data)
            os.fchmod(out.fileno(), member.mode & ~self.mask & 0o777)
        os.utime(path, (member.mtime, member.mtime))

    def finish(self, checked: bytes) -> None:
        """Folders' modes set; PullError unless the members written are the ones checked (the
        same file read twice: a disk that gave other bytes the second time)."""
        if self.digest.digest() != checked:
            raise PullError("the pulled archive changed while it was read")
        for path, member in reversed(self.folders):
            os.chmod(path, (member.mode | 0o700) & ~self.mask & 0o777)
            os.utime(path, (member.mtime, member.mtime))


def _size(count: int) -> str:
    """`count` bytes for a message: in MiB when it is a whole number of them."""
    return f"{count >> 20} MiB" if count and count % (1 << 20) == 0 else f"{count} bytes"
