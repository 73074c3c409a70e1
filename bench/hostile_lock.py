"""`gpuprov lock` against a hostile index: its time to fail and its peak memory (issue 31, items
6 and 7).

    python3 -m bench.hostile_lock [CASE ...]

Serves each hostile answer on 127.0.0.91 and runs the command as a user does (`invoke lock ...`
in a subprocess, killed with its descendants after 300 s), then prints its exit status, time,
peak RSS (the most it and its descendants, uv included, held at once, sampled every 0.1 s from
/proc) and the last line of its stderr. The cases:
- `apt-bomb`: `Packages.gz` of 726 KB that decompresses to 700 MiB of zeros (`lock --apt`; the
  round-3 attack sent 713 KB);
- `apt-stanzas`: `Packages.gz` of 63 MiB of tiny stanzas with ten Depends each, under the cap
  on an index's size, over the cap on its stanzas (`lock --apt`);
- `apt-dribble`: an index that sends one byte every 5 s (`lock --apt`);
- `uv-dribble`, `uv-huge`, `uv-bomb`: `--torch-index` answering the simple-index page of every
  project with one byte every 5 s, with HTML without end, or with a gzip bomb (the 700 MiB of
  zeros, `Content-Encoding: gzip`) (`lock --cuda 13.0 --torch-index`; uv reads PyPI too, as
  the extra index: these cases need it).
GPUPROV_LOCK_DEADLINE, when set, is passed on; the commands run with the machine's defaults
otherwise.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Iterator

from tests.conftest import REPO
from tests.http_stub import serve
from tests.procs import descendants_of, kill_pids
from tests.test_lock_hostile_index import gzip_of_zeros

ADDRESS = "127.0.0.91"
MIB = 1 << 20
KILL_AFTER = 300.0


def gzip_of_stanzas(size: int) -> bytes:
    """A gzip file of `size` bytes of minimal stanzas: the most entries per byte."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"Package: a\nVersion: 1\nDepends: a, a, a, a, a, a, a, a, a, a\n\n" * (MIB // 64)
    return b"".join([packer.compress(chunk) for _ in range(size // len(chunk))] + [packer.flush()])


def dribble() -> Iterator[bytes]:
    while True:
        yield b"P"
        time.sleep(5)


def endless_html() -> Iterator[bytes]:
    line = b"".join(b'<a href="torch-2.0.0-cp310-none-any.whl#sha256=%064d">x</a>\n' % i
                    for i in range(1000))
    while True:
        yield line


def answers(case: str):
    bomb = gzip_of_zeros(700 * MIB) if case in ("apt-bomb", "uv-bomb") else b""
    stanzas = gzip_of_stanzas(63 * MIB) if case == "apt-stanzas" else b""
    return {
        "apt-bomb": lambda path, _h: (200, "application/gzip", bomb),
        "apt-stanzas": lambda path, _h: (200, "application/gzip", stanzas),
        "apt-dribble": lambda path, _h: (200, "application/gzip", dribble()),
        "uv-dribble": lambda path, _h: (200, "text/html", dribble()),
        "uv-huge": lambda path, _h: (200, "text/html", endless_html()),
        "uv-bomb": lambda path, _h: (200, "text/html", bomb, {"Content-Encoding": "gzip"}),
    }[case], len(bomb or stanzas)


def tree_rss(pid: int) -> int:
    """The resident bytes of `pid` and its descendants (uv runs in a session of its own)."""
    total = 0
    for each in [pid, *descendants_of(pid)]:
        try:
            total += int(Path(f"/proc/{each}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def run_sampled(argv: list, env: dict, cwd: str) -> tuple:
    """Run `argv`: (exit status, stderr, seconds, peak MiB of it and its descendants)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            if time.monotonic() - started > KILL_AFTER:
                kill_pids(descendants_of(proc.pid) + [proc.pid])   # before, uv outlived the command
                proc.wait()
                break
            time.sleep(0.1)
        err.seek(0)
        return proc.returncode, err.read().decode(errors="replace"), time.monotonic() - started, peak / MIB


def measure(case: str) -> str:
    answer, size = answers(case)
    server = serve(answer, address=ADDRESS)
    url = f"http://{ADDRESS}:{server.server_address[1]}"
    try:
        with tempfile.TemporaryDirectory() as out:
            if case.startswith("apt-"):
                args = ["lock", "--apt", "--cuda", "13.0", "--apt-repo", "debian12/x86_64",
                        "--apt-base", url, "--out", out]
            else:
                args = ["lock", "--cuda", "13.0", "--torch-index", f"{url}/whl", "--out", out]
            env = dict(os.environ, PYTHONPATH=str(REPO), UV_CACHE_DIR=os.path.join(out, "uv-cache"))
            rc, err, seconds, peak = run_sampled(
                [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args], env, out)
    finally:
        server.shutdown()
        server.server_close()
    last = (err.strip().splitlines() or [""])[-1][:300]
    sent = f", {size / 1000:.0f} KB sent" if size else ""
    return f"{case}{sent}: exit {rc}, {seconds:.1f} s, peak RSS {peak:.0f} MiB: {last}"


def main() -> None:
    for case in sys.argv[1:] or ["apt-bomb", "apt-stanzas", "apt-dribble",
                                 "uv-dribble", "uv-huge", "uv-bomb"]:
        print(measure(case), flush=True)


if __name__ == "__main__":
    main()
