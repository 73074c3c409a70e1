"""What the private apt configuration of `gpuprov bundle --distro X` (remote/bundle/distro.py)
costs against this machine's own apt sources, for this machine's own distribution: whether the
same-distribution build should use it too.

    python3 -m bench.bundle_distro_apt [--rounds 3] [--mirror URL] [--json PATH]

Per round, in alternating order, the recipe's packages (python3-venv, g++) and their closure:
- plain: `apt-cache depends --recurse` then `apt-get download`, this machine's sources (the
  floor bench/bundle_build.py compares the bundle with);
- own: the bundle's `fetch_debs` with this machine's sources (closure, download, apt-cache
  show, each file's sha256 checked against the index);
- private: a fresh private configuration of this machine's distribution (`--mirror`, default
  the archive this machine's apt reads), its `apt-get update`, then the same `fetch_debs`.

Needs the Debian mirror; no root.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import machine
from remote.bundle.build import apt_environment, dependency_closure, fetch_debs, this_distro

PACKAGES = ["python3-venv", "g++"]


def _plain(folder: Path) -> dict:
    started = time.monotonic()
    closure = dependency_closure(PACKAGES)
    subprocess.run(["apt-get", "download", "-q", *closure], cwd=folder, check=True,
                   capture_output=True, timeout=3600)
    return {"total_s": round(time.monotonic() - started, 2)}


def _own(folder: Path) -> dict:
    started = time.monotonic()
    fetch_debs(PACKAGES, folder)
    return {"total_s": round(time.monotonic() - started, 2)}


def _private(folder: Path, mirror: str) -> dict:
    started = time.monotonic()
    env = apt_environment(this_distro(), "x86_64", folder / "config", mirror=mirror,
                          progress=lambda line: None)
    update = time.monotonic() - started
    (folder / "debs").mkdir()
    fetch_debs(PACKAGES, folder / "debs", env=env)
    return {"total_s": round(time.monotonic() - started, 2), "update_s": round(update, 2)}


def main() -> int:
    from remote.sandbox.rootfs import host_apt_sources

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mirror", default="")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    mirror = args.mirror or host_apt_sources()["mirror"]
    result: dict = {"machine": machine(), "rounds": []}
    for n in range(args.rounds):
        row = {}
        sides = ["plain", "own", "private"]
        for side in sides if n % 2 == 0 else sides[::-1]:
            folder = Path(tempfile.mkdtemp(prefix="gpuprov-bench-distro-apt-"))
            try:
                row[side] = (_private(folder, mirror) if side == "private" else
                             _own(folder) if side == "own" else _plain(folder))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        print(json.dumps(row), flush=True)
        result["rounds"].append(row)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
