"""Lock files: a requirements file in which every package is pinned `==` with its hashes, as
`uv pip compile --generate-hashes` writes it (`gpuprov lock`, remote/lock/). Read on the control
side only: the `pip_lock` kind plans from it, and the file itself travels to the host on the
install command's stdin.

Format (pip's requirements-file format, the subset uv writes): `name==version [; marker]`
followed by `--hash=sha256:HEX` options, lines continued with a backslash; `#` comments;
`--index-url URL` / `--extra-index-url URL` lines (uv's `--emit-index-url`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..ground.errors import InputError

MAX_LOCK_BYTES = 4 * 1024 * 1024  # a torch lock is ~60 KB
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)\s*(?:;\s*(.+?))?\s*")


def canonical(name: str) -> str:
    """A distribution name as compared (PEP 503: runs of `-_.` become `-`, lower case)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One locked package: canonical name, exact version, its marker (None: everywhere), the
    sha256 digests its files may have, and the line it starts on."""

    name: str
    version: str
    marker: Optional[str]
    hashes: tuple[str, ...]
    line: int


@dataclass
class LockFile:
    path: Path
    text: str
    pins: list[Pin] = field(default_factory=list)
    index_urls: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return sorted({p.name for p in self.pins})

    def pins_for(self, environment: dict[str, str]) -> dict[str, Pin]:
        """The pins whose marker holds in `environment` (PEP 508 marker variables), by name."""
        from packaging.markers import Marker

        out: dict[str, Pin] = {}
        for pin in self.pins:
            if pin.marker is None or Marker(pin.marker).evaluate(environment):
                out[pin.name] = pin
        return out


def parse_lock(text: str, path: Path) -> LockFile:
    """The lock in `text`; InputError naming the file and line of the first thing that is not a
    hash-pinned requirement."""
    lock = LockFile(path, text)
    logical: list[tuple[int, str]] = []
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not parts:
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        joined = " ".join(p for p in parts if p).strip()
        parts = []
        if joined:
            logical.append((start, joined))
    for number, line in logical:
        if line.startswith(("--index-url", "--extra-index-url")):
            lock.index_urls.append(line.split(None, 1)[-1].split("=", 1)[-1].strip())
            continue
        hashes = tuple(HASH.findall(line))
        requirement = HASH.sub("", line).strip()
        match = PIN.fullmatch(requirement)
        if not match:
            raise InputError(f"not a pinned requirement (name==version): {requirement[:80]!r}",
                             path, number)
        if not hashes:
            raise InputError(f"{match.group(1)}=={match.group(2)} has no --hash=sha256:", path,
                             number)
        lock.pins.append(Pin(canonical(match.group(1)), match.group(2), match.group(3), hashes,
                             number))
    if not lock.pins:
        raise InputError("the lock pins no package", path)
    return lock


def read_lock_text(path: Path, what: str, max_bytes: int) -> str:
    """The text of the `what` ("lock", "apt lock") at `path`; InputError when it is missing,
    over `max_bytes` or unreadable."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InputError(f"the {what} is {size} bytes, over {max_bytes}", path)
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"no such {what} file (`gpuprov lock` makes it; docs/how-to/locks-and-drift.md)",
                         path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the {what}: {exc}", path) from None


def read_lock(path: Path) -> LockFile:
    """Read and parse the lock at `path` (InputError when missing, too big or malformed)."""
    return parse_lock(read_lock_text(path, "lock", MAX_LOCK_BYTES), path)
