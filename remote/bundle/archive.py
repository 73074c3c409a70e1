"""A bundle's archive: an uncompressed tar (its wheels and .debs are compressed already) of

    manifest.json          what the bundle is (row, distribution, python) and every other file
                           with its sha256, size and origin
    SHA256SUMS             the same digests as `sha256sum -c` reads them, for the host's check
    locks/NAME.txt         the locks its wheels were taken from, as they were
    wheels/FILE.whl        every wheel those locks pin for the target (uv's among them)
    apt/FILE.deb           the recipe's Debian packages and their dependencies, and with
                           `--apt-repo` the NVIDIA .debs its apt lock (locks/apt-...) pins
    apt/Packages, Release, InRelease, bundle-key.gpg
                           a flat apt repository of them (Debian's "Flat Repository Format",
                           https://wiki.debian.org/DebianRepository/Format), signed by a key made
                           for this bundle alone (its public half, as apt's Signed-By reads it)
    validate/...           the validation package, as this gpuprov pushes it (without caches):
                           after the recipe, the host validates from this copy, nothing pushed

`read_bundle` checks an archive before any host is touched, reading it once: only plain files
in those folders, with plain names; each file's sha256 and size as the manifest says; nothing
missing, nothing extra; the locks the same as the recipe's (when it has them); every wheel's
sha256 one its lock allows; its validate/ the same files as this gpuprov's. The first thing
wrong is one line naming the file (BundleError, an InputError: exit status 2).
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..config.aptlock import parse_apt_lock
from ..config.lockfile import parse_lock
from ..errors import InputError
from ..kinds.route import BundleRoute
from ..transport.connection import package_files

SCHEMA = 1
MANIFEST = "manifest.json"
SUMS = "SHA256SUMS"
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


class BundleError(InputError):
    """A bundle that cannot be used: changed after it was built, or not the recipe's."""


@dataclass
class Bundle:
    """A checked bundle: its archive, manifest and id (the first 16 hex digits of the
    manifest's sha256, which names every file's)."""

    path: Path
    manifest: dict[str, Any]
    id: str

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


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sums_text(files: list[dict[str, Any]]) -> str:
    """SHA256SUMS for `files` (manifest entries), as `sha256sum -c` reads it."""
    return "".join(f"{f['sha256']}  {f['path']}\n" for f in sorted(files, key=lambda f: f["path"]))


def write_archive(stage: Path, manifest: dict[str, Any], out: Path) -> str:
    """The archive of `stage` (whose files `manifest` lists) at `out`; the bundle's id. Every
    member is root's, 0644, dated 0: the same files make the same archive."""
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()

    def info(name: str, size: int) -> tarfile.TarInfo:
        member = tarfile.TarInfo(name)
        member.size, member.mode, member.mtime = size, 0o644, 0
        return member

    with tarfile.TarFile(out, "w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK) as tar:
        tar.addfile(info(MANIFEST, len(manifest_bytes)), io.BytesIO(manifest_bytes))
        sums = sums_text(manifest["files"]).encode()
        tar.addfile(info(SUMS, len(sums)), io.BytesIO(sums))
        for entry in sorted(manifest["files"], key=lambda f: f["path"]):
            with open(stage / entry["path"], "rb") as f:
                tar.addfile(info(entry["path"], entry["size"]), f)
    return hashlib.sha256(manifest_bytes).hexdigest()[:16]


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


def _hash_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    digest = hashlib.sha256()
    f = tar.extractfile(member)
    assert f is not None   # a regular file (checked by the caller)
    for block in iter(lambda: f.read(CHUNK), b""):
        digest.update(block)
    return digest.hexdigest()


def read_bundle(path: Path, locks_dir: Optional[Path] = None,  # noqa: C901  one pass over the archive, one check per kind of member
                validate_dir: Optional[Path] = None) -> Bundle:
    """The bundle at `path`, checked (see the module docstring); BundleError naming the first
    file that is wrong. `locks_dir`: the recipe's locks, which the bundle's must equal;
    `validate_dir`: this gpuprov's validate/, which the bundle's must equal."""
    try:
        tar = tarfile.open(path, "r|")     # a stream: read once, whatever its size
    except FileNotFoundError:
        raise BundleError("no such bundle (gpuprov bundle makes one)", path) from None
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"not a bundle archive: {exc}", path) from None
    manifest: Optional[dict[str, Any]] = None
    bundle_id = ""
    seen: dict[str, str] = {}
    locks: dict[str, bytes] = {}
    try:
        with tar:
            for member in tar:
                name = member.name
                if manifest is None:
                    if name != MANIFEST or not member.isfile() or member.size > MAX_MANIFEST:
                        raise BundleError(f"the archive does not start with its {MANIFEST}: "
                                          "not a bundle made by gpuprov bundle", path)
                    f = tar.extractfile(member)
                    raw = f.read() if f is not None else b""
                    manifest = _manifest(raw, path)
                    bundle_id = hashlib.sha256(raw).hexdigest()[:16]
                    expected = {e["path"]: e for e in manifest["files"]}
                    continue
                if not member.isfile():
                    raise BundleError(f"{name}: not a plain file (a link or device in a bundle is "
                                      "refused)", path)
                if name == SUMS:
                    f = tar.extractfile(member)
                    if f is None or f.read(MAX_MANIFEST + 1) != sums_text(manifest["files"]).encode():
                        raise BundleError(f"{SUMS} does not match {MANIFEST}: the bundle was changed "
                                          "after it was built", path)
                    seen[SUMS] = ""
                    continue
                entry = expected.get(name)
                if entry is None or name in seen:
                    why = "twice in the archive" if name in seen else "not in the bundle manifest"
                    raise BundleError(f"{name}: {why}: the bundle was changed after it was built", path)
                if name.startswith("locks/") and member.size <= MAX_MANIFEST:
                    f = tar.extractfile(member)
                    data = f.read() if f is not None else b""
                    digest = hashlib.sha256(data).hexdigest()
                    locks[name] = data
                else:
                    digest = _hash_member(tar, member)
                if digest != entry["sha256"] or member.size != entry["size"]:
                    raise BundleError(f"{name}: sha256 {digest[:16]}... ({member.size} bytes), the "
                                      f"manifest says {entry['sha256'][:16]}... ({entry['size']} "
                                      "bytes): the bundle was changed after it was built", path)
                seen[name] = digest
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise BundleError(f"not a whole bundle archive: {exc}", path) from None
    if manifest is None:
        raise BundleError("an empty archive: not a bundle", path)
    missing = sorted(set(expected) - set(seen)) + ([] if SUMS in seen else [SUMS])
    if missing:
        raise BundleError(f"{missing[0]}: in the manifest but not in the archive", path)
    _check_locks(path, manifest, locks, locks_dir)
    if validate_dir is not None:
        _check_validate(path, manifest, validate_dir)
    return Bundle(path, manifest, bundle_id)


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
    debs = {e["sha256"] for e in manifest["files"] if e["path"].endswith(".deb")}
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


def _check_apt_lock(path: Path, name: str, data: bytes, debs: set[str]) -> None:
    """Every .deb an apt lock pins (with its sha256) is in the bundle, that very file."""
    try:
        lock = parse_apt_lock(data.decode("utf-8"), Path(name))
    except (InputError, UnicodeDecodeError) as exc:
        raise BundleError(f"{name}: not an apt lock ({exc})", path) from None
    for pin in lock.pins.values():
        if pin.sha256 and pin.sha256 not in debs:
            raise BundleError(f"{name}: {pin.name}={pin.version} (sha256 {pin.sha256[:16]}...) is "
                              "not a .deb of the bundle: the bundle does not match its locks", path)


def _wheel_project(path: str) -> str:
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        return str(canonicalize_name(parse_wheel_filename(Path(path).name)[0]))
    except InvalidWheelFilename:
        return ""
