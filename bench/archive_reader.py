"""Peak memory of reading hostile archives, and the time of reading an honest bundle (issue 41).

    python3 -m bench.archive_reader [--bundle-mb 200] [--rounds 3]

Each case runs in a process of its own (the archives are built before, by the parent) and
prints its outcome, its time and the process's peak memory (VmHWM):
- `pull-pax`, `pull-longname`: `publish_pull` (what `gpuprov logs` and `validate` call) on a
  tar.gz of under 1 MiB whose PAX header (GNU long name) is 800 MiB of one letter;
- `pull-hidden`: `publish_pull` on a tar.gz with members behind a uid field of `0 00000`;
- `bundle-pax`: `read_bundle` on a bundle with a 1 GiB PAX header before its manifest (a hole
  of a sparse file);
- `bundle-honest`: `read_bundle` on an honest bundle of `--bundle-mb` MB of .debs (random
  bytes, 10 MB each), best and median of `--rounds` reads (the file in the page cache).

The reader measured is the `remote` of the checkout this file is in: for an earlier commit's
figures, copy this file and tests/tarcraft.py into a checkout of it (`git archive COMMIT | tar
-x -C DIR`) and run it there.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from remote.ground.runfolder import RESULTS

from .common import REPO

RUN_ID = "20261122T055742.123Z-14af"
UV = "uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"


def peak_mib() -> int:
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmHWM:"))) // 1024


def pull_archive(case: str, out: Path) -> Path:
    """The tar.gz of `case` at `out`, built a piece at a time."""
    from tests import tarcraft

    honest = [tarcraft.member("./" + RESULTS, b"{}")]
    if case == "pull-hidden":
        extra = [tarcraft.member("./x.log", b"x", tarcraft.bad_uid(tarcraft.header("./x.log", 1)))]
    else:
        kind = tarfile.XHDTYPE if case == "pull-pax" else tarfile.GNUTYPE_LONGNAME
        extra = list(tarcraft.huge_extended(kind, 800 << 20)) + [tarcraft.member("./y.json", b"{}")]
    out.write_bytes(tarcraft.gzipped(honest + extra + [bytes(1024)]))
    return out


def pull_case(case: str, path: Path) -> str:
    from remote.ground.errors import PullError
    from remote.transport.transfer import publish_pull

    with tempfile.TemporaryDirectory() as tmp, open(path, "rb") as archive:
        started = time.monotonic()
        try:
            publish_pull(archive, Path(tmp) / "h1" / RUN_ID)
            outcome = "STORED"
        except PullError as exc:
            outcome = f"refused: {str(exc)[:100]}"
        elapsed = time.monotonic() - started
    size = path.stat().st_size
    return f"{case}: {size / 2**10:.0f} KiB tar.gz, {elapsed:.2f} s, VmHWM {peak_mib()} MiB, {outcome}"


def make_bundle(folder: Path, megabytes: int) -> Path:
    """An honest bundle of `megabytes` MB of .debs (random bytes), a uv wheel and its lock."""
    from remote.bundle.archive import SCHEMA, write_archive

    stage = folder / "stage"
    for sub in ("locks", "wheels", "apt"):
        (stage / sub).mkdir(parents=True)
    uv = os.urandom(1 << 20)
    (stage / "wheels" / UV).write_bytes(uv)
    (stage / "locks" / "uv.txt").write_text(f"uv==0.13.8 \\\n    --hash=sha256:{hashlib.sha256(uv).hexdigest()}\n")
    for n in range(max(1, megabytes // 10)):
        (stage / "apt" / f"pkg{n}_1.0_amd64.deb").write_bytes(os.urandom(10_000_000))
    files = [{"path": p.relative_to(stage).as_posix(), "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
              "size": p.stat().st_size, "origin": "bench"} for p in sorted(stage.rglob("*")) if p.is_file()]
    manifest = {"schema": SCHEMA, "cuda": "13.0", "uv_wheel": f"wheels/{UV}", "debs": {}, "files": files}
    out = folder / "bundle.tar"
    write_archive(stage, manifest, out)
    return out


def sparse_pax_bundle(honest: Path, out: Path) -> Path:
    """`honest` with a 1 GiB PAX header (a hole) before its manifest."""
    from tests import tarcraft

    data = honest.read_bytes()
    with tarfile.open(honest) as tar:
        last = tar.getmembers()[-1]
    with open(out, "wb") as f:
        f.write(data[:last.offset])
        f.write(tarcraft.header("././@PaxHeader", 1 << 30, tarfile.XHDTYPE, tarfile.USTAR_FORMAT))
        f.seek(1 << 30, os.SEEK_CUR)
        f.write(data[last.offset:])
    return out


def bundle_case(case: str, path: Path, rounds: int) -> str:
    from remote.bundle import BundleError, read_bundle

    times = []
    outcome = ""
    for _ in range(rounds):
        started = time.monotonic()
        try:
            outcome = f"id {read_bundle(path).id}"
        except BundleError as exc:
            outcome = f"refused: {str(exc)[-100:]}"
        times.append(time.monotonic() - started)
    size = path.stat().st_size
    return (f"{case}: {size / 1e6:.0f} MB archive, best {min(times):.3f} s, median "
            f"{statistics.median(times):.3f} s ({size / 1e6 / min(times):.0f} MB/s), "
            f"VmHWM {peak_mib()} MiB, {outcome}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle-mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--case")
    parser.add_argument("--path")
    args = parser.parse_args()
    if args.case:
        if args.case.startswith("pull-"):
            print(pull_case(args.case, Path(args.path)))
        else:
            print(bundle_case(args.case, Path(args.path), args.rounds))
        return
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = [sys.executable, "-m", "bench.archive_reader"]
    with tempfile.TemporaryDirectory(prefix="bench-archive-") as tmp:
        for case in ("pull-pax", "pull-longname", "pull-hidden"):
            path = pull_archive(case, Path(tmp) / f"{case}.tgz")
            subprocess.run(run + ["--case", case, "--path", str(path)], check=True, cwd=REPO, env=env)
        honest = make_bundle(Path(tmp), args.bundle_mb)
        sparse = sparse_pax_bundle(honest, Path(tmp) / "sparse.tar")
        subprocess.run(run + ["--case", "bundle-pax", "--path", str(sparse), "--rounds", "1"],
                       check=True, cwd=REPO, env=env)
        subprocess.run(run + ["--case", "bundle-honest", "--path", str(honest), "--rounds", str(args.rounds)],
                       check=True, cwd=REPO, env=env)
    print(json.dumps({"python": sys.version.split()[0], "bundle_mb": args.bundle_mb}))


if __name__ == "__main__":
    main()
