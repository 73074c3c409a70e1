"""A bundle's archive: an uncompressed tar (its wheels and .debs are compressed already) of

    locks/NAME.txt         the locks its wheels were taken from, as they were
    validate/...           the validation package, as this gpuprov pushes it (without caches):
                           after the recipe, the host validates from this copy, nothing pushed
    wheels/FILE.whl        every wheel those locks pin for the target (uv's among them)
    apt/FILE.deb           the recipe's Debian packages and their dependencies, and with
                           `--apt-repo` the NVIDIA .debs its apt lock (locks/apt-...) pins
    apt/Packages, Release, InRelease, bundle-key.gpg
                           a flat apt repository of them (Debian's "Flat Repository Format",
                           https://wiki.debian.org/DebianRepository/Format), signed by a key made
                           for this bundle alone (its public half, as apt's Signed-By reads it)
    SHA256SUMS             every file's sha256 as `sha256sum -c` reads it, for the host's check
    manifest.json          what the bundle is (row, distribution, python) and every other file
                           with its sha256, size and origin
    manifest.json.sig      with `gpuprov bundle --sign-key`: the site key's detached OpenPGP
                           signature of manifest.json's bytes (checked by remote/bundle/trust.py
                           against an anchor that never comes from the bundle)

in that order: the build writes each file as soon as it has it (the wheels while the .debs
download), so the list of them comes last.

`read_bundle` checks an archive before any host is touched, reading it once with the one strict
tar reader (remote/transport/tarstream.py): only plain files in those folders, with plain
names; each member's header the one ArchiveWriter writes for its name and size (root's, 0644,
dated 0, no owner names, the name as written, a PAX `path` only for a name over 100 bytes);
each file's sha256 and size as the manifest says; nothing missing, nothing extra; the locks the
same as the recipe's (when it has them); every wheel's sha256 one its lock allows; its
validate/ the same files as this gpuprov's. The first thing wrong is one line naming the file
(BundleError, an InputError: exit status 2). In the same pass it takes the sha256 of the
archive's bytes, all of them, as read: the digest of exactly the archive it checked, which each
host compares with what it received before GNU tar's files are used (remote/bundle/push.py).

Why the bundle's id (the manifest's sha256) covers the bytes a host installs: the strict reader
refuses every header it does not read one way only, and anything after the end but zeros, so
the member list it checked is the one GNU tar extracts from the same bytes (no member hidden
behind a header tarfile gave up on, as Python's tarfile did: issue 41). The headers are
required to be the writer's own (`_check_header`): what GNU tar makes of a header (mode, owner,
name) is then fixed by the member's name and size alone, not by fields the checks would not
see. The member's data are the bytes whose sha256 the manifest names; the padding is zeros.
So every file GNU tar writes on the host is a file of the manifest with its sha256 and mode
0644, and the manifest's sha256 names all of them. A field-by-field check was chosen over
comparing the header's bytes with what this Python's tarfile would write: a bundle built by
another Python (the connected machine's) must still read, and the strict reader has one
reading of every field, so equal fields are an equal extraction.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile  # the writer only: a bundle is read by transport/tarstream.py
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Optional

from ..config.aptlock import parse_apt_lock
from ..config.lockfile import parse_lock
from ..ground.errors import InputError
from ..ground.fileio import HashingReader, sha256_file
from ..kinds.route import BundleRoute
from ..transport.connection import package_files
from ..transport.tarstream import Member, TarReader, TarRefused

SCHEMA = 1
MANIFEST = "manifest.json"
SUMS = "SHA256SUMS"
SIGNATURE = "manifest.json.sig"   # a detached OpenPGP signature of MANIFEST (remote/bundle/trust.py)
MAX_SIGNATURE = 64 * 1024         # chosen: one signature is a few hundred bytes (RSA-4096: ~600)
FOLDERS = ("locks", "wheels", "apt", "validate")
# A file name in a folder: wheels (PEP 427, `+` in a local version), .debs as apt-get download
# names them (`%3a` for an epoch's colon, `~` and `+` in versions), the index files.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~%-]{0,199}")
# A path part under validate/ (a package: `__init__.py`), at most VALIDATE_DEPTH parts deep.
PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
VALIDATE_DEPTH = 4
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_MANIFEST = 8 * 1024 * 1024    # 20,000 files at ~250 bytes is 5 MB
MAX_FILES = 20000
HOST_ROOT = "/var/lib/gpuprov/bundles"   # where a host keeps unpacked bundles, one folder each
CHUNK = 1 << 20
# The members outside the folders; the reader takes each once, whole (at most MAX_MANIFEST,
# MAX_SIGNATURE for the signature).
TOP = (MANIFEST, SUMS, SIGNATURE)


class BundleError(InputError):
    """A bundle that cannot be used: changed after it was built, or not the recipe's."""


@dataclass
class Bundle:
    """A checked bundle: its archive, manifest, id (the first 16 hex digits of the manifest's
    sha256, which names every file's) and the archive's own sha256."""

    path: Path
    manifest: dict[str, Any]
    id: str
    sha256: str     # of the whole archive, as read_bundle read and checked it
    raw_manifest: bytes = b""    # manifest.json's bytes, as signed (remote/bundle/trust.py)
    signature: Optional[bytes] = None    # manifest.json.sig's bytes; None: the bundle has none

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return {f["path"]: f for f in self.manifest["files"]}

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def route(self) -> BundleRoute:
        """Where the kinds find it on a host once pushed (remote/bundle/push.py)."""
        return BundleRoute(
            id=self.id, root=f"{HOST_ROOT}/{self.id}",
            locks={Path(p).name: f["sha256"] for p, f in self.files.items() if p.startswith("locks/")},
            debs=frozenset(self.manifest.get("debs", {})),
            uv_wheel=f"{HOST_ROOT}/{self.id}/{self.manifest['uv_wheel']}",
            validate=f"{HOST_ROOT}/{self.id}" if any(p.startswith("validate/") for p in self.files) else "",
            rebuild=str(self.manifest.get("command", "gpuprov bundle")),
            wheel_files=tuple(sorted(Path(p).name for p in self.files if p.startswith("wheels/"))),
            files={f["sha256"]: p for p, f in self.files.items()})


def sums_text(files: list[dict[str, Any]]) -> str:
    """SHA256SUMS for `files` (manifest entries), as `sha256sum -c` reads it."""
    return "".join(f"{f['sha256']}  {f['path']}\n" for f in sorted(files, key=lambda f: f["path"]))


class ArchiveReader:
    """The archive's file read once, front to back, by the strict reader
    (remote/transport/tarstream.py: headers a block at a time, members' data in big pieces
    straight from the file). Every byte read is hashed into the archive's sha256 in the order
    of the file, on a thread of its own (hashlib lets go of the GIL for large updates), beside
    the members' hashes. Nothing is read twice, nothing skipped."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self._digest = hashlib.sha256()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="bundle-sha256")
        self._last: Optional[Future[None]] = None

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        if data:
            if self._last is not None:
                self._last.result()
            self._last = self._pool.submit(self._digest.update, data)
        return data

    def hexdigest(self) -> str:
        """The sha256 of every byte the file holds: what is left is read (and hashed) first."""
        while self.read(CHUNK):
            pass
        if self._last is not None:
            self._last.result()
        return self._digest.hexdigest()

    def close(self) -> None:
        self._pool.shutdown()
        self.f.close()


class _HashedOut:
    """The archive's file as tarfile writes it, front to back: every byte written is hashed
    into the archive's sha256 too (the anchor `gpuprov bundle` prints), on a thread of its own
    beside the writer's (hashlib lets go of the GIL for large updates, so the member's hash and
    the archive's run on two cores), so the build never reads the archive again to take it.
    At most one piece is hashed while the next is written (the bytes objects tarfile hands
    over are immutable)."""

    def __init__(self, path: Path):
        self.f = open(path, "wb")
        self.digest = hashlib.sha256()
        self.written = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="archive-sha256")
        self._pending: Optional[Future[None]] = None

    def write(self, data: bytes) -> int:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self.digest.update, data)
        self.f.write(data)
        self.written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.written

    def sha256(self) -> str:
        """The sha256 of every byte written (after the archive is closed)."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        return self.digest.hexdigest()

    def close(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        self._pool.shutdown()
        self.f.close()


class ArchiveWriter:
    """An archive written member by member as the build gets its files (the wheels while the
    .debs download), the manifest last: its members in the order they are added, then
    SHA256SUMS, then manifest.json (the reader takes them in any order). Every member is
    root's, 0644, dated 0: the same files added in the same order make the same archive.
    `sha256` is the whole archive's, taken as it was written (`_HashedOut`)."""

    def __init__(self, out: Path):
        self._out = _HashedOut(out)
        self.tar = tarfile.TarFile(fileobj=self._out, mode="w", format=tarfile.PAX_FORMAT,  # type: ignore[arg-type]
                                   copybufsize=CHUNK)
        self.files: list[dict[str, Any]] = []
        self.sha256 = ""
        self._lock = threading.Lock()    # members from two threads, one after the other

    @staticmethod
    def _info(name: str, size: int) -> tarfile.TarInfo:
        member = tarfile.TarInfo(name)
        member.size, member.mode, member.mtime = size, 0o644, 0
        return member

    def add(self, rel: str, source: Path, origin: str, expect: Iterable[str] = ()) -> str:
        """`source` as member `rel`, hashed while it is copied; its sha256. With `expect`, a
        digest outside it is refused (BundleError naming the file): the file is not the one
        its lock or index names."""
        with open(source, "rb") as f, self._lock:
            size = os.fstat(f.fileno()).st_size
            reader = HashingReader(f)
            self.tar.addfile(self._info(rel, size), reader)
            digest = reader.digest.hexdigest()
            allowed = set(expect)
            if allowed and digest not in allowed:
                raise BundleError(f"{rel}: sha256 {digest[:16]}... is not the one its lock or "
                                  "index names: the download was changed", source)
            self.files.append({"path": rel, "sha256": digest, "size": size, "origin": origin})
        return digest

    def finish(self, manifest: dict[str, Any],
               sign: Optional[Callable[[bytes], bytes]] = None) -> str:
        """SHA256SUMS and `manifest` (its "files": what was added), with `sign`'s signature of
        the manifest's bytes after it, and the archive closed; the bundle's id."""
        manifest = dict(manifest, files=sorted(self.files, key=lambda f: f["path"]))
        manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
        sums = sums_text(manifest["files"]).encode()
        signature = sign(manifest_bytes) if sign is not None else None
        with self._lock:
            self.tar.addfile(self._info(SUMS, len(sums)), io.BytesIO(sums))
            self.tar.addfile(self._info(MANIFEST, len(manifest_bytes)), io.BytesIO(manifest_bytes))
            if signature is not None:
                self.tar.addfile(self._info(SIGNATURE, len(signature)), io.BytesIO(signature))
            self.tar.close()
            self.sha256 = self._out.sha256()
            self._out.close()
        return hashlib.sha256(manifest_bytes).hexdigest()[:16]

    def close(self) -> None:
        """Stop writing (a failed build: the partial archive is thrown away)."""
        with self._lock:
            self.tar.close()
            self._out.close()


def write_archive(stage: Path, manifest: dict[str, Any], out: Path,
                  sign: Optional[Callable[[bytes], bytes]] = None) -> str:
    """The archive of `stage` (whose files `manifest` lists, in their order) at `out`, its
    manifest signed by `sign` when given; the bundle's id."""
    writer = ArchiveWriter(out)
    for entry in manifest["files"]:
        writer.add(entry["path"], stage / entry["path"], entry.get("origin", ""))
    return writer.finish(manifest, sign)


def _manifest(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BundleError(f"{MANIFEST} is not JSON: not a bundle made by gpuprov bundle", path) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or \
            not isinstance(data.get("files"), list) or len(data["files"]) > MAX_FILES:
        raise BundleError(f"{MANIFEST} is not a bundle manifest of schema {SCHEMA}", path)
    for n, entry in enumerate(data["files"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("path"), str)
                and _member_ok(entry["path"]) and isinstance(entry.get("sha256"), str)
                and SHA256.fullmatch(entry["sha256"]) and isinstance(entry.get("size"), int)):
            raise BundleError(f"{MANIFEST}: files[{n}] is not a path, sha256 and size", path)
    if not isinstance(data.get("uv_wheel"), str) or data["uv_wheel"] not in {f["path"] for f in data["files"]}:
        raise BundleError(f"{MANIFEST} names no uv wheel of the bundle", path)
    return data


def _member_ok(name: str) -> bool:
    folder, _, base = name.partition("/")
    if folder == "validate":
        parts = base.split("/")
        return len(parts) <= VALIDATE_DEPTH and all(PART.fullmatch(p) for p in parts)
    return folder in FOLDERS and bool(NAME.fullmatch(base))


def validate_files(folder: Path) -> dict[str, Path]:
    """The validation package's files as a bundle carries them, `validate/REL` -> the file in
    `folder`: what `validate` pushes (transport's `pack`), caches left out."""
    return {"validate/" + rel: path for rel, path in package_files(folder).items()}


def read_bundle(path: Path, locks_dir: Optional[Path] = None,
                validate_dir: Optional[Path] = None) -> Bundle:
    """The bundle at `path`, checked (see the module docstring); BundleError naming the first
    file that is wrong. `locks_dir`: the recipe's locks, which the bundle's must equal;
    `validate_dir`: this gpuprov's validate/, which the bundle's must equal.

    One pass, whatever the archive's size, in memory bounded whatever its headers claim: each
    member is hashed as it streams by and checked against the manifest, which comes last
    (gpuprov bundle writes it once every file is in; an archive with it first is read the
    same)."""
    try:
        reader = ArchiveReader(open(path, "rb"))
    except FileNotFoundError:
        raise BundleError("no such bundle (gpuprov bundle makes one)", path) from None
    except OSError as exc:
        raise BundleError(f"not a bundle archive: {exc}", path) from None
    try:
        return _read_bundle(path, reader, locks_dir, validate_dir)
    finally:
        reader.close()


def _read_bundle(path: Path, reader: ArchiveReader, locks_dir: Optional[Path],
                 validate_dir: Optional[Path]) -> Bundle:
    top: dict[str, bytes] = {}     # MANIFEST, SUMS, SIGNATURE: the members outside the folders
    seen: dict[str, tuple[str, int]] = {}     # member -> (sha256, size), in the archive's order
    locks: dict[str, bytes] = {}
    tar = TarReader(reader)
    try:
        for member in tar.members():
            _check_header(path, member)
            if member.name in TOP:
                top[member.name] = _small(path, member, tar)
                continue
            seen[member.name] = _hash_member(path, member, tar, seen, locks)
        whole = reader.hexdigest()
    except TarRefused as exc:
        if exc.not_plain:
            raise BundleError(f"{exc.name}: not a plain file ({exc.why}): a bundle holds plain files "
                              "only", path) from None
        if exc.damaged:
            raise BundleError(f"not a whole bundle archive: {exc}", path) from None
        raise BundleError(f"not a bundle archive as gpuprov bundle writes it: {exc}", path) from None
    except OSError as exc:
        raise BundleError(f"not a whole bundle archive: {exc}", path) from None
    raw = top.get(MANIFEST)
    if raw is None:
        raise BundleError(f"the archive has no {MANIFEST}: not a bundle made by gpuprov bundle", path)
    manifest = _manifest(raw, path)
    _check_files(path, manifest, seen, top.get(SUMS))
    _check_locks(path, manifest, locks, locks_dir)
    if validate_dir is not None:
        _check_validate(path, manifest, validate_dir)
    return Bundle(path, manifest, hashlib.sha256(raw).hexdigest()[:16], whole, raw,
                  top.get(SIGNATURE))


def _check_header(path: Path, member: Member) -> None:
    """`member`'s header is the one ArchiveWriter writes for its name and size (module
    docstring): a plain file, root's, 0644, dated 0, no owner names, its name as written (no
    `./`, no prefix field, no GNU long name; a PAX path only for a name over 100 bytes)."""
    if member.isdir:
        raise BundleError(f"{member.raw}: not a plain file (a folder): a bundle holds plain files only",
                          path)
    long = len(member.name.encode()) > 100
    canonical = (member.raw == member.name and member.posix and not member.prefixed
                 and not member.long_name and (member.mode, member.uid, member.gid, member.mtime) == (0o644, 0, 0, 0)
                 and member.uname == member.gname == "" and set(member.pax) == ({"path"} if long else set()))
    if not canonical:
        raise BundleError(f"{member.name}: its header is not the one gpuprov bundle writes (owner, mode, "
                          "date, or name fields): the bundle was changed after it was built", path)


def _small(path: Path, member: Member, tar: TarReader) -> bytes:
    """MANIFEST, SUMS or SIGNATURE, whole (each once, at most MAX_MANIFEST or MAX_SIGNATURE
    bytes)."""
    if member.size > (MAX_SIGNATURE if member.name == SIGNATURE else MAX_MANIFEST):
        raise BundleError(f"{member.name}: twice in the archive, or too large: not a bundle made by "
                          "gpuprov bundle", path)
    return b"".join(tar.data())


def _hash_member(path: Path, member: Member, tar: TarReader, seen: dict[str, tuple[str, int]],
                 locks: dict[str, bytes]) -> tuple[str, int]:
    """A folder's member, hashed as it streams by: (sha256, size); a lock's bytes kept."""
    name = member.name
    if not _member_ok(name) or len(seen) >= MAX_FILES:
        raise BundleError(f"{name}: not in the bundle manifest: the bundle was changed after it "
                          "was built", path)
    if name.startswith("locks/") and member.size + sum(map(len, locks.values())) <= MAX_MANIFEST:
        data = b"".join(tar.data())   # kept to read after the manifest: bounded
        locks[name] = data
        return hashlib.sha256(data).hexdigest(), member.size
    sha = hashlib.sha256()
    for data in tar.data():
        sha.update(data)
    return sha.hexdigest(), member.size


def _check_files(path: Path, manifest: dict[str, Any], seen: dict[str, tuple[str, int]],
                 sums: Optional[bytes]) -> None:
    """The members read are the manifest's files, each with its sha256 and size; SHA256SUMS is
    the manifest's."""
    expected = {e["path"]: e for e in manifest["files"]}
    for name, (digest, size) in seen.items():
        entry = expected.get(name)
        if entry is None:
            raise BundleError(f"{name}: not in the bundle manifest: the bundle was changed after "
                              "it was built", path)
        if digest != entry["sha256"] or size != entry["size"]:
            raise BundleError(f"{name}: sha256 {digest[:16]}... ({size} bytes), the manifest says "
                              f"{entry['sha256'][:16]}... ({entry['size']} bytes): the bundle was "
                              "changed after it was built", path)
    missing = sorted(set(expected) - set(seen)) + ([] if sums is not None else [SUMS])
    if missing:
        raise BundleError(f"{missing[0]}: in the manifest but not in the archive", path)
    if sums != sums_text(manifest["files"]).encode():
        raise BundleError(f"{SUMS} does not match {MANIFEST}: the bundle was changed after it was "
                          "built", path)


def _check_validate(path: Path, manifest: dict[str, Any], validate_dir: Path) -> None:
    """The bundle's validate/ is this gpuprov's, file for file: the host runs the bundle's copy
    and this gpuprov reads what it writes."""
    theirs = {e["path"]: e["sha256"] for e in manifest["files"] if e["path"].startswith("validate/")}
    ours = validate_files(validate_dir)
    rebuild = f"rebuild it with `{manifest.get('command', 'gpuprov bundle')}`"
    for name in sorted(set(ours) | set(theirs)):
        if name not in theirs:
            raise BundleError(f"{name}: this gpuprov's validation has it and the bundle does not: "
                              f"the bundle was built by another gpuprov; {rebuild}", path)
        if name not in ours or sha256_file(ours[name]) != theirs[name]:
            raise BundleError(f"{name}: differs from this gpuprov's {validate_dir}: the bundle was "
                              f"built by another gpuprov; {rebuild}", path)


def _check_locks(path: Path, manifest: dict[str, Any], locks: dict[str, bytes],
                 locks_dir: Optional[Path]) -> None:
    """The bundle's locks equal the recipe's; each wheel's sha256 is one of its lock's."""
    allowed: dict[str, set[str]] = {}
    debs = {e["path"]: e["sha256"] for e in manifest["files"] if e["path"].endswith(".deb")}
    for name, data in locks.items():
        ours = locks_dir / Path(name).name if locks_dir is not None else None
        if ours is not None and ours.is_file() and ours.read_bytes() != data:
            raise BundleError(f"{name} differs from {ours}: the bundle was built from another lock; "
                              f"rebuild it with `{manifest.get('command', 'gpuprov bundle')}`", path)
        if Path(name).name.startswith("apt-"):     # an apt lock (`--apt-repo`): its .debs
            _check_apt_lock(path, name, data, debs)
            continue
        try:
            lock = parse_lock(data.decode("utf-8"), Path(name))
        except (InputError, UnicodeDecodeError) as exc:
            raise BundleError(f"{name}: not a lock ({exc})", path) from None
        for pin in lock.pins:
            allowed.setdefault(pin.name, set()).update(pin.hashes)
    for entry in manifest["files"]:
        if entry["path"].startswith("wheels/"):
            project = _wheel_project(entry["path"])
            if entry["sha256"] not in allowed.get(project, set()):
                raise BundleError(f"{entry['path']}: its sha256 is not one its lock allows for "
                                  f"{project}: the bundle does not match its locks", path)


def _check_apt_lock(path: Path, name: str, data: bytes, debs: dict[str, str]) -> None:
    """Every .deb an apt lock pins (with its sha256) is in the bundle, that very file; and the
    other way round, every .deb of the bundle for a package the lock pins is the lock's file
    (the package named as `apt-get download` and NVIDIA's index name the file,
    NAME_VERSION_ARCH.deb: Debian policy 5.6.1 allows no `_` in a package's name): another
    version of a locked package, beside the locked one, is refused."""
    try:
        lock = parse_apt_lock(data.decode("utf-8"), Path(name))
    except (InputError, UnicodeDecodeError) as exc:
        raise BundleError(f"{name}: not an apt lock ({exc})", path) from None
    carried = set(debs.values())
    for pin in lock.pins.values():
        if pin.sha256 and pin.sha256 not in carried:
            raise BundleError(f"{name}: {pin.name}={pin.version} (sha256 {pin.sha256[:16]}...) is "
                              "not a .deb of the bundle: the bundle does not match its locks", path)
    for deb, digest in sorted(debs.items()):
        locked = lock.pins.get(Path(deb).name.split("_", 1)[0])
        if locked is not None and locked.sha256 and digest != locked.sha256:
            raise BundleError(f"{deb}: sha256 {digest[:16]}... is not the one {name} locks for "
                              f"{locked.name}={locked.version} ({locked.sha256[:16]}...): the "
                              "bundle does not match its locks", path)


def _wheel_project(path: str) -> str:
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        return str(canonicalize_name(parse_wheel_filename(Path(path).name)[0]))
    except InvalidWheelFilename:
        return ""
