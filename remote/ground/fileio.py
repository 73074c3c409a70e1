"""Writing files on the control machine so a reader never sees half of one.

The bottom layer: imports nothing of gpuprov, so every package may use it. (The sandbox keeps its
own copy: it also runs as a stand-alone script.)
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional


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
