"""What a bundle's trust anchor costs (issue 41): the site key's signature of a manifest at
build time (`gpuprov bundle --sign-key`: gpg --detach-sign, then the check provision makes),
its check at provision time (`remote/bundle/trust.py`: gpgv against the keyring alone), and
the build's pass over the archive for the sha256 it prints (`--bundle-sha256`'s anchor).

    python3 -m bench.bundle_trust [--files 20000] [--archive-mb 1024] [--rounds 5]

The manifest is one of --files entries (bundle's MAX_FILES is 20,000), in the shape
`ArchiveWriter.finish` writes; the key an ed25519 key made for the run in a GNUPGHOME of its
own; the archive --archive-mb MB of incompressible bytes, written once and hashed --rounds
times (the page cache warm, as right after the build wrote it). Wall times, median and range.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import machine
from remote.bundle import trust
from remote.ground.fileio import sha256_file


def _timed(fn, rounds: int) -> dict:
    times = []
    for _ in range(rounds):
        started = time.monotonic()
        fn()
        times.append(time.monotonic() - started)
    return {"median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
            "max_s": round(max(times), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--archive-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bt"))
    home = work / "g"
    home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    try:
        subprocess.run(["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
                        "--quick-gen-key", "bench <bench@example.invalid>", "ed25519", "sign",
                        "never"], env=env, check=True, capture_output=True)
        listing = subprocess.run(["gpg", "--with-colons", "--list-secret-keys"], env=env,
                                 check=True, capture_output=True, text=True).stdout
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        files = [{"path": f"wheels/p{n}-1.0-py3-none-any.whl", "sha256": hashlib.sha256(str(n).encode()).hexdigest(),
                  "size": n, "origin": "https://pypi.org/simple p==1.0"} for n in range(args.files)]
        manifest = (json.dumps({"schema": 1, "files": files}, indent=1, sort_keys=True) + "\n").encode()
        os.environ["GNUPGHOME"] = str(home)
        sign = trust.signer(fpr)
        signature = sign(manifest)
        keyring = work / "site.gpg"
        subprocess.run(["gpg", "--output", str(keyring), "--export", fpr], env=env, check=True)
        results = {"machine": machine(), "manifest_bytes": len(manifest), "files": args.files,
                   "sign_and_self_check": _timed(lambda: sign(manifest), args.rounds),
                   "provision_check_gpgv": _timed(
                       lambda: trust.verify(manifest, signature, keyring, fpr), args.rounds)}
        archive = work / "archive"
        with open(archive, "wb") as f:
            for _ in range(args.archive_mb):
                f.write(os.urandom(1 << 20))
        results["archive_mb"] = args.archive_mb
        results["build_sha256_pass"] = _timed(lambda: sha256_file(archive), args.rounds)
        print(json.dumps(results, indent=1))
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
