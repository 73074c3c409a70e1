"""`gpuprov bundle --apt-repo REPO`: the .debs of a stack row's apt lock (`gpuprov lock --apt`,
`playbooks/locks/apt-<repo>-cuda-<row>.txt`) from NVIDIA's repository, for the bundle's own
apt repository.

Every pin of the lock (what the apt route installs, with its dependency closure inside NVIDIA's
index: the lock's `via` lines) is found in the repository's index (`remote.lock.apt`'s reader)
at exactly the lock's version, fetched from the index's `Filename`, and its sha256 checked
against the lock's `# sha256:` (and the index's): a file that is not the locked one is refused
naming it. Its index stanza in the bundle is its own control file (`dpkg-deb --field`, as
dpkg-scanpackages makes one) with the file's Filename, Size and SHA256. The dependencies that
lie outside NVIDIA's index (libc6, ...) are returned by name, for the bundle to take with the
recipe's Debian packages from this machine's apt.
"""
from __future__ import annotations

import hashlib
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from ..config.aptlock import AptLock, read_apt_lock
from ..lock.apt import READ_TIMEOUT, Entry, fetch_index
from ..lock.apt import lock_name as apt_lock_name
from .archive import CHUNK, NAME, BundleError

MAX_DEB_BYTES = 8 << 30    # one .deb (unsourced: NVIDIA's largest, cuDNN's, are about 1 GB)


def lock_path(locks_dir: Path, repo: str, cuda: str) -> Path:
    return locks_dir / apt_lock_name(repo, cuda)


def _download(url: str, dest: Path) -> str:
    """`url` into `dest`; its sha256. BundleError naming the URL."""
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=READ_TIMEOUT) as response, open(dest, "wb") as out:
            for block in iter(lambda: response.read(CHUNK), b""):
                size += len(block)
                if size > MAX_DEB_BYTES:
                    raise BundleError(f"{url}: over {MAX_DEB_BYTES >> 30} GiB: not a .deb of the lock")
                digest.update(block)
                out.write(block)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise BundleError(f"cannot fetch {url}: {getattr(exc, 'reason', exc)}") from None
    return digest.hexdigest()


def _stanza(deb: Path, filename: str, digest: str) -> str:
    try:
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True,
                                 timeout=120)
    except FileNotFoundError:
        raise BundleError("dpkg-deb is not installed on this machine") from None
    if control.returncode != 0:
        raise BundleError(f"{deb.name}: not a .deb ({control.stderr.strip()[:200]})")
    return (control.stdout.rstrip("\n") + f"\nFilename: ./{filename}\nSize: {deb.stat().st_size}\n"
            f"SHA256: {digest}")


def _outside(entries: list[Entry], inside: set[str]) -> set[str]:
    """The dependencies of `entries` that none of `inside` meets: the distribution's."""
    names = set()
    for entry in entries:
        for group in entry.depends:
            if not any(name in inside for name, _ in group):
                names.add(group[0][0])
    return names


def fetch_apt_lock(lock: AptLock, base: str, repo: str,
                   dest: Path) -> tuple[dict[str, str], dict[str, tuple[str, str]], list[str], set[str]]:
    """The lock's .debs in `dest`: (package -> version, file name -> (origin, sha256), their
    index stanzas, the names of their dependencies outside NVIDIA's index)."""
    index = fetch_index(base, repo)
    rebuild = lock.command or "gpuprov lock --apt"
    debs: dict[str, str] = {}
    files: dict[str, tuple[str, str]] = {}
    stanzas: list[str] = []
    entries: list[Entry] = []
    for pin in lock.pins.values():
        entry = next((e for e in index.packages.get(pin.name, []) if e.version == pin.version), None)
        if entry is None or not entry.filename:
            raise BundleError(f"{lock.path.name}: {pin.name}={pin.version} is not in {index.url} "
                              f"(the repository moved on: `{rebuild}` makes a new lock)")
        url = f"{base.rstrip('/')}/{repo}/{entry.filename.removeprefix('./')}"
        plain = entry.filename.rpartition("/")[2]     # the index is untrusted: a plain name
        if not (NAME.fullmatch(plain) and plain.endswith(".deb")) or plain in files:
            raise BundleError(f"{index.url}: {pin.name}={pin.version}'s Filename {entry.filename[:80]!r} "
                              "is not a plain .deb name")
        digest = _download(url, dest / plain)
        wanted = pin.sha256 or entry.sha256
        if not wanted or digest != wanted or (entry.sha256 and entry.sha256 != digest):
            (dest / plain).unlink()
            raise BundleError(f"{plain}: sha256 {digest[:16]}... is not the one {lock.path.name} "
                              f"locks for {pin.name}={pin.version} ({(wanted or 'none')[:16]}...): "
                              f"{url} gave another file")
        debs[pin.name] = pin.version
        files[plain] = (url, digest)
        stanzas.append(_stanza(dest / plain, plain, digest))
        entries.append(entry)
    return debs, files, stanzas, _outside(entries, set(lock.pins))


def read_lock(locks_dir: Path, repo: str, cuda: str) -> AptLock:
    """The row's apt lock for `repo` (InputError naming it when missing or malformed)."""
    return read_apt_lock(lock_path(locks_dir, repo, cuda))
