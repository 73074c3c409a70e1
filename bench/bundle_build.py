"""Bundles for air-gapped sites (issue 35): what building one costs over downloading the same
files alone (installing hosts from it: bench/bundle_install.py).

    python3 -m bench.bundle_build [--cuda 13.0] [--locks DIR] [--recipe FILE] [--rounds 1]
                                  [--json PATH]

Build, per round (the order alternates between rounds, so neither side always gets the warmer
network; pip's cache is off for both, PIP_NO_CACHE_DIR=1):
- gpuprov: the whole `build_bundle` call (remote/bundle/build.py), as `gpuprov bundle` waits
  for it, up to its last line (the archive's sha256; until 2026-11-29 the bench took the
  build's own `total_s`, which left out the archive read again for that line): pip download
  of the row's lock and uv's for Debian 12 x86_64 (meanwhile a new gpg key, the recipe's
  .debs' dependency closure and their index stanzas), apt-get download of the .debs
  (meanwhile the wheels copied into the archive, each hashed on the way and checked against
  its lock, the archive's own sha256 taken beside), the signed index, the .debs into the
  archive, the manifest last;
- the floor: the same `pip download` command alone, then the package list (`apt-cache depends
  --recurse`, as the bundle computes it: `apt-get download` needs the list) and `apt-get
  download` of it, into a scratch folder.
The ratio is gpuprov's time over the floor's (target: at most 1.2). Each round prints a line;
the end prints min/median/max per side and the median of the rounds' ratios. The network is
shared and noisy: give --rounds 4 or more, and note when it ran (the summary says).

Needs root (apt-get download), PyPI and the Debian mirror.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, stats
from remote.bundle.build import (
    DEFAULT_RECIPE,
    DISTROS,
    BundleOptions,
    build_bundle,
    dependency_closure,
    marker_environment,
    recipe_needs,
    this_distro,
)
from remote.config.lockfile import read_lock
from remote.lock import LOCKS_DIR, PYPI, lock_name


def _floor(cuda: str, locks: Path, recipe: Path, scratch: Path) -> dict:
    """The same downloads, by the tools alone."""
    distro = DISTROS[this_distro()]
    env = marker_environment(distro, "x86_64")
    pins = {}
    for name in (lock_name(cuda, False), "uv.txt"):
        for pin in read_lock(locks / name).pins_for(env).values():
            pins[(pin.name, pin.version)] = pin
    reqs = scratch / "requirements.txt"
    reqs.write_text("".join(f"{n}=={v} " + " ".join(f"--hash=sha256:{h}" for h in p.hashes) + "\n"
                            for (n, v), p in sorted(pins.items())))
    wheels, debs = scratch / "wheels", scratch / "debs"
    wheels.mkdir()
    debs.mkdir()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
           "--only-binary=:all:", "--disable-pip-version-check", "--no-input", "-q",
           "--python-version", distro.python, "--implementation", "cp",
           "--abi", "cp" + distro.python.replace(".", ""), "--abi", "abi3", "--abi", "none",
           "-d", str(wheels), "-r", str(reqs)]
    for minor in range(distro.glibc_minor, 16, -1):
        cmd += ["--platform", f"manylinux_2_{minor}_x86_64"]
    cmd += ["--platform", "manylinux2014_x86_64", "--platform", "linux_x86_64"]
    env_vars = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_NO_INDEX")}
    env_vars.update(PIP_INDEX_URL=PYPI, PIP_NO_CACHE_DIR="1")
    started = time.monotonic()
    subprocess.run(cmd, check=True, env=env_vars, timeout=3600)
    wheel_s = time.monotonic() - started
    started = time.monotonic()   # the list is part of the job: apt-get download needs it
    closure = dependency_closure(list(recipe_needs(recipe, this_distro(), "x86_64", cuda).packages))
    subprocess.run(["apt-get", "download", "-q", *closure], cwd=debs, check=True,
                   capture_output=True, timeout=3600)
    deb_s = time.monotonic() - started
    size = sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file())
    return {"wheel_s": round(wheel_s, 2), "deb_s": round(deb_s, 2),
            "total_s": round(wheel_s + deb_s, 2), "bytes": size}


def _gpuprov(cuda: str, locks: Path, recipe: Path, out: Path) -> dict:
    os.environ["PIP_NO_CACHE_DIR"] = "1"
    # the last round's bundle goes before the clock starts (as the floor's scratch folder
    # does): replacing it would time the freeing of its 1.2 GB
    out.unlink(missing_ok=True)
    started = time.monotonic()   # the whole call: its last lines (the archive's sha256) too
    report = build_bundle(BundleOptions(cuda, str(out), recipe=str(recipe), locks=str(locks)),
                          progress=lambda line: None)
    total = time.monotonic() - started
    return {"wheel_s": round(report.wheel_s, 2), "deb_s": round(report.deb_s, 2),
            "total_s": round(total, 2), "build_s": round(report.total_s, 2),
            "bytes": out.stat().st_size,
            "wheels": report.wheels, "debs": report.debs}


def _summary(rounds: list) -> dict:
    """Per side: min/median/max of the total and of each phase; the median of the ratios."""
    out: dict = {}
    for side in ("gpuprov", "floor"):
        out[side] = {key: stats([r[side][key] for r in rounds])
                     for key in ("total_s", "wheel_s", "deb_s")}
    out["ratio_median"] = round(statistics.median(r["ratio"] for r in rounds), 3)
    out["ratio_of_medians"] = round(out["gpuprov"]["total_s"]["median_s"]
                                    / out["floor"]["total_s"]["median_s"], 3)
    return out


def _summary_text(summary: dict, where: dict) -> str:
    lines = [f"bundle build, {where['date']} (load {where['loadavg_1m_at_start']} at start), "
             f"{len(summary['gpuprov']['total_s']['runs_s'])} rounds:"]
    for side in ("gpuprov", "floor"):
        parts = [f"{key[:-2]} {v['min_s']:.1f}/{v['median_s']:.1f}/{v['max_s']:.1f}"
                 for key, v in summary[side].items()]
        lines.append(f"  {side:8} min/median/max s: " + ", ".join(parts))
    lines.append(f"  ratio gpuprov/floor: median {summary['ratio_median']:.2f} (of the rounds' "
                 f"ratios), {summary['ratio_of_medians']:.2f} (median over median); target <= 1.2")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuda", default="13.0")
    ap.add_argument("--locks", type=Path, default=LOCKS_DIR)
    ap.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (apt-get download)")
    result: dict = {"machine": machine(), "cuda": args.cuda, "locks": str(args.locks), "rounds": []}
    work = Path(tempfile.mkdtemp(prefix="gpuprov-bench-bundle-"))
    try:
        bundle = work / "site.bundle.tar"
        for n in range(args.rounds):
            scratch = work / f"floor-{n}"
            scratch.mkdir()
            row = {}
            for side in (("gpuprov", "floor") if n % 2 == 0 else ("floor", "gpuprov")):
                if side == "gpuprov":
                    row["gpuprov"] = _gpuprov(args.cuda, args.locks, args.recipe, bundle)
                else:
                    row["floor"] = _floor(args.cuda, args.locks, args.recipe, scratch)
            shutil.rmtree(scratch)
            row["ratio"] = round(row["gpuprov"]["total_s"] / row["floor"]["total_s"], 3)
            print(json.dumps(row), flush=True)
            result["rounds"].append(row)
        result["summary"] = _summary(result["rounds"])
        print(_summary_text(result["summary"], result["machine"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
