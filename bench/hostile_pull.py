"""How fast and in how much memory a hostile pulled archive is refused (issue 15, item 3).

    python3 -m bench.hostile_pull

Builds each archive a compromised host could answer a pull with, hands it to
`publish_pull` (what `invoke validate` and `invoke logs` call), and prints the archive's size,
the time to refusal and the process's peak memory (VmHWM) for that case, each in its own
process so the peaks do not mix:
- `bomb`: one file declaring 10 GiB of zeros, as a 10 MiB gzip (gzip members back to back);
- `members`: 200,000 empty files;
- `total`: five files of 255 MiB of zeros (each under the per-file cap, 1275 MiB in all).
"""
from __future__ import annotations

import gzip
import io
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from remote.ground.runfolder import BENCH_LOG

from .common import REPO

RUN_ID = "20261122T055742.123Z-14af"
MIB_OF_ZEROS = gzip.compress(bytes(1 << 20), compresslevel=9)


def zeros(name: str, size: int) -> list[bytes]:
    info = tarfile.TarInfo(f"./{name}")
    info.size = size
    return [gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT))] + [MIB_OF_ZEROS] * (size >> 20)


def empty_members(count: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for i in range(count):
            tar.addfile(tarfile.TarInfo(f"./f{i}"), io.BytesIO(b""))
    return buffer.getvalue()


ARCHIVES = {
    "bomb": lambda: b"".join(zeros(BENCH_LOG, 10 << 30) + [gzip.compress(bytes(1024))]),
    "members": lambda: empty_members(200_000),
    "total": lambda: b"".join(sum((zeros(f"part{i}.log", 255 << 20) for i in range(5)), [])
                              + [gzip.compress(bytes(1024))]),
}


def measure(case: str) -> str:
    from remote.transport.transfer import PullError, publish_pull

    data = ARCHIVES[case]()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        try:
            publish_pull(data, Path(tmp) / "h1" / RUN_ID)
            outcome = "STORED"
        except PullError as exc:
            outcome = f"refused: {exc}"
        elapsed = time.monotonic() - started
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    return (f"{case}: {len(data) / 2**20:.1f} MiB archive, {elapsed:.2f} s, "
            f"VmHWM {int(peak) // 1024} MiB (archive built in-process), {outcome}")


def main() -> None:
    if len(sys.argv) == 2:
        print(measure(sys.argv[1]))
        return
    for case in ARCHIVES:
        subprocess.run([sys.executable, "-m", "bench.hostile_pull", case], check=True, cwd=REPO)


if __name__ == "__main__":
    main()
