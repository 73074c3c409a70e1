"""How long does validate go without printing a line? (the default of `timeouts.idle`)

    python3 -m bench.validate_silence [VALIDATE ARGS...]     # e.g. --device cpu

Runs `python3 -m validate --out TMP ARGS` here, stamps each line it prints with the time since
the start and the silence before it, and ends with the longest silences and what came before
each. `timeouts.idle` must stay above the longest one of a healthy host.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gpuprov-silence-") as out:
        command = [sys.executable, "-m", "validate", "--out", f"{out}/run", *sys.argv[1:]]
        started = last = time.monotonic()
        silences: list[tuple[float, str, str]] = []
        before = "(start)"
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        for raw in proc.stdout:
            now = time.monotonic()
            line = raw.decode("utf-8", "replace").rstrip()
            silences.append((now - last, before, line))
            print(f"{now - started:8.1f} +{now - last:6.1f} {line}", flush=True)
            last, before = now, line
        rc = proc.wait()
    print(f"validate exit {rc} after {time.monotonic() - started:.1f} s, "
          f"load {os.getloadavg()[0]:.1f}")
    for silence, after, line in sorted(silences, reverse=True)[:5]:
        print(f"silent {silence:7.1f} s after {after[:70]!r}, until {line[:60]!r}")


if __name__ == "__main__":
    main()
