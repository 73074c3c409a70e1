"""What the sandbox needs of this machine (root, tools, mounts) and its errors: the controller
side's lowest module (`rootfs` and `hosts` import it; the stand-alone `init` does not).

`SandboxError` is the sandbox's own root error, not a `remote.ground.errors.GpuprovError`: the sandbox
stands alone (see remote/ground/errors.py).
"""
from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Callable, List

Progress = Callable[[str], None]


class SandboxError(Exception):
    """Something the sandbox cannot do, with a message meant for the user."""


class NotRootError(SandboxError):
    """The sandbox was asked to do something that needs root, and this process is not root."""


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NotRootError(
            f"sandbox {what} needs root (it mounts overlay filesystems and creates namespaces); "
            f"run it as root, e.g. `sudo invoke sandbox {what}`")


def mounts_under(path: Path) -> List[str]:
    """Mount points at or below `path` in this process's mount namespace."""
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == prefix or mnt.startswith(prefix + "/"):
                found.append(mnt)
    return found


def safe_rmtree(path: Path) -> None:
    """Remove a folder this module made, refusing when something is mounted inside it."""
    if not path.exists() and not path.is_symlink():
        return
    mounted = mounts_under(path)
    if mounted:
        raise SandboxError(f"refusing to remove {path}: still mounted there: {', '.join(mounted)}")
    shutil.rmtree(path)


def dpkg_arch() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                              text=True).stdout.strip()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "ppc64le": "ppc64el",
            "s390x": "s390x", "riscv64": "riscv64"}.get(platform.machine(), platform.machine())


def need_tool(name: str, package: str) -> str:
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None)
    if not path:
        raise SandboxError(f"`{name}` not found: install it with `apt-get install -y {package}`")
    return path


