"""Apt locks: the exact Debian package versions of one stack row in one NVIDIA repository, as
`gpuprov lock --apt` writes them (remote/lock/apt.py). Read on the control side only: the `apt`
kind pins a step's packages, and their dependencies, to the lock's versions.

Format (one package a line; `#` starts a comment, the header is comments):

    cuda-toolkit-13-0=13.0.2-1                          # sha256:HEX of the .deb
    cuda-compiler-13-0=13.0.88-1 via cuda-toolkit-13-0  # a dependency of that package

`via NAME[,NAME]` marks a package of a locked package's dependency closure: a step that installs
NAME installs it at this version too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..ground.errors import InputError
from .lockfile import read_lock_text

MAX_APT_LOCK_BYTES = 1024 * 1024   # a CUDA toolkit's closure is a few hundred lines
_NAME = r"[a-z0-9][a-z0-9+.-]*"     # Debian policy 5.6.1 (Package)
# Debian policy 5.6.12 (Version): [epoch:]upstream[-revision], of alphanumerics and . + - ~ :
_VERSION = r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*"
COMMAND_LINE = "# command:"
SHA256_COMMENT = re.compile(r"^\s*sha256:([0-9a-f]{64})\b")
LINE = re.compile(rf"({_NAME})=({_VERSION})(?:\s+via\s+({_NAME}(?:,{_NAME})*))?")


@dataclass(frozen=True)
class AptPin:
    """One locked package: name, exact version, the locked packages it is a dependency of
    (empty: named by the stack itself), and the line it is on."""

    name: str
    version: str
    via: tuple[str, ...]
    line: int
    sha256: str = ""    # the .deb's, from the line's `# sha256:HEX` ("" where the index gave none)


@dataclass
class AptLock:
    path: Path
    pins: dict[str, AptPin] = field(default_factory=dict)
    command: str = ""   # the header's `# command:` line: how to refresh this lock

    def missing(self, names: list[str]) -> list[str]:
        """The `names` the lock does not pin."""
        return [n for n in names if n not in self.pins]

    def pins_for(self, names: list[str]) -> list[AptPin]:
        """The pins of `names` (all must be in the lock: see `missing`), then those of their
        dependency closures, each once, in the lock's order."""
        wanted = set(names)
        return sorted((p for p in self.pins.values()
                       if p.name in wanted or wanted.intersection(p.via)), key=lambda p: p.line)


def parse_apt_lock(text: str, path: Path) -> AptLock:
    """The lock in `text`; InputError naming the file and line of the first bad line."""
    lock = AptLock(path)
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.startswith(COMMAND_LINE) and not lock.command:
            lock.command = raw[len(COMMAND_LINE):].strip()
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = LINE.fullmatch(line)
        if not match:
            raise InputError(f"not an apt pin (package=version [via package,...]): {line[:80]!r}",
                             path, number)
        name, version, via = match.groups()
        if name in lock.pins:
            raise InputError(f"{name} is pinned twice (first on line {lock.pins[name].line})",
                             path, number)
        digest = SHA256_COMMENT.search(raw.partition("#")[2])
        lock.pins[name] = AptPin(name, version, tuple(via.split(",")) if via else (), number,
                                 digest.group(1) if digest else "")
    if not lock.pins:
        raise InputError("the apt lock pins no package", path)
    return lock


def read_apt_lock(path: Path) -> AptLock:
    """Read and parse the apt lock at `path` (InputError when missing, too big or malformed)."""
    return parse_apt_lock(read_lock_text(path, "apt lock", MAX_APT_LOCK_BYTES), path)
