"""Writing files on the control machine so a reader never sees half of one; a file's sha256,
taken as it is read (a bundle's and an evidence archive's members).

The bottom layer: imports nothing of gpuprov, so every package may use it. (The sandbox keeps its
own copy: it also runs as a stand-alone script.)
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Optional


def write_atomic(path: Path, text: str, mode: Optional[int] = None) -> None:
    """Replace `path` with `text` at once (temp file beside it + rename): a reader, or a crash,
    sees the old file or the new one, never a mix. `mode` defaults to what the user's umask
    gives a new file (mkstemp alone would leave it 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~current_umask() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def current_umask() -> int:
    """This process's umask, read without changing it (os.umask would race other threads)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


class HashingReader:
    """A file read through once: what was read, hashed on the way (a file's sha256 taken while
    it is copied into an archive, never in a pass of its own)."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.digest.update(data)
        return data


def sha256_file(path: Path) -> str:
    """The sha256 of the file at `path`, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
