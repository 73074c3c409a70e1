"""Container images for the `--container` tests, built here from the sandbox's root filesystem
(remote/sandbox/rootfs.py: Debian 12 minbase with its python3 3.11), never pulled.

- `torch_rootfs()`: that root filesystem plus torch 2.13.0+cpu (the CPU-only wheel on this
  machine's disk, DESIGN.md "Environment facts", ~750 MB installed) in /usr/local, cached next
  to the sandbox's. The login user of the SSH tests (tests/sshd.py) has Debian's python3 and no
  torch, so the image's stack differs from the host's in torch, and where it does not
  (python 3.11.2 both) it is equal.
- `podman_import(root, name, user)`: `podman import` of a tarball of `root` into that user's
  rootless storage (podman-import(1): "Create a container image from the contents of the
  specified tarball"); `exclude` leaves paths out (an image without python3).
- `oci_bundle(root, folder)`: an OCI bundle for Slurm's `srun --container` (runc's `spec
  --rootless` config.json; the root filesystem hard-linked in, read-only, with a tmpfs /tmp).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from remote.sandbox import rootfs

TORCH = "torch==2.13.0+cpu"  # DESIGN.md: "torch==2.13.0 alone is CPU-only"
SITE = "usr/local/lib/python3.11/dist-packages"  # Debian's python3.11 reads /usr/local's


def torch_rootfs() -> Path:
    """The sandbox root filesystem plus torch, built once (hard links to the sandbox's cache:
    new files only, the cache itself is never written)."""
    base = rootfs.ensure_rootfs()
    final = base.parent / f"container-{base.name}-torch-2.13.0"
    if (final / SITE / "torch").is_dir():
        return final
    build = base.parent / f".build-{final.name}-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    subprocess.run(["cp", "-al", str(base), str(build)], check=True, timeout=300)
    # the machine's pip constraints pin torch 2.14.1 for the test venv: not for this image
    env = dict(os.environ, PIP_CONSTRAINT="")
    subprocess.run(["python3", "-m", "pip", "install", "--quiet", "--no-compile",
                    "--disable-pip-version-check", "--target", str(build / SITE),
                    "--python-version", "3.11", "--only-binary=:all:", TORCH],
                   check=True, timeout=900, env=env)
    shutil.rmtree(final, ignore_errors=True)
    build.rename(final)
    return final


def as_user(user: str, command: str, stdin=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`command` (sh) as `user`, with that user's HOME, from /tmp."""
    return subprocess.run(["su", "-s", "/bin/sh", user, "-c", f"cd /tmp && {command}"],
                          stdin=stdin, capture_output=True, text=True, timeout=timeout)


def podman_import(root: Path, name: str, user: str, exclude: Sequence[str] = ()) -> str:
    """Import `root` as image `name` into `user`'s podman storage; its id."""
    tar = subprocess.Popen(["tar", "-C", str(root), *[f"--exclude=./{p}" for p in exclude],
                            "-cf", "-", "."], stdout=subprocess.PIPE)
    try:
        done = as_user(user, f"podman import --quiet - {name}", stdin=tar.stdout)
    finally:
        tar.stdout.close()  # type: ignore[union-attr]
        tar.wait(timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"podman import {name}: {done.stderr}")
    return done.stdout.strip()


def podman_remove(name: str, user: str) -> None:
    as_user(user, f"podman rmi --force {name} >/dev/null 2>&1 || true", timeout=120)


def oci_bundle(root: Path, folder: Path) -> Path:
    """An OCI bundle in `folder` whose root filesystem is `root` (hard links, read-only) with a
    writable tmpfs at /tmp; runc's own `spec --rootless` for the rest."""
    folder.mkdir(parents=True)
    subprocess.run(["runc", "spec", "--rootless"], cwd=folder, check=True, timeout=30)
    subprocess.run(["cp", "-al", str(root), str(folder / "rootfs")], check=True, timeout=300)
    config = json.loads((folder / "config.json").read_text())
    config["root"] = {"path": "rootfs", "readonly": True}
    config["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                             "options": ["nosuid", "nodev", "mode=1777"]})
    (folder / "config.json").write_text(json.dumps(config))
    return folder
