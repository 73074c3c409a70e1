"""Time to split streamed command output into lines, with and without newlines (issue 15,
item 8: 64 MiB without newlines took 69 s, against 4.3 s with).

    python3 -m bench.line_split [MiB ...]        (default: 16 64)

For each size, feeds that much text in 64 KiB chunks (what one SSH read returns) to:
- `engine`: the splitter `invoke validate` used (remote/engine/validation.py `_LineSplitter`
  before issue 15, copied here as `PendingTextSplitter`: appends each chunk to the pending text
  and splits all of it again);
- `transport`: `remote.transport.base.LineSplitter` (sets a chunk without a newline aside);
- `end to end`: a local command printing it, through the I/O loop into `LineSplitter`, with the
  default output limit (1 MiB kept) and with GPUPROV_OUTPUT_MAX_BYTES raised past the size.
Prints seconds per case; the engine splitter is skipped past 64 MiB without newlines.
"""
from __future__ import annotations

import os
import sys
import time

from remote.config.inventory import Host, Timeouts
from remote.ground.errors import Where
from remote.transport.base import LineSplitter
from remote.transport.local import LocalConnection

CHUNK = 64 << 10


class PendingTextSplitter:
    """The engine's splitter as it was: quadratic in a line's length."""

    def __init__(self, emit):
        self.emit = emit
        self.buffer = {"stdout": "", "stderr": ""}

    def __call__(self, stream: str, text: str) -> None:
        self.buffer[stream] += text
        *lines, self.buffer[stream] = self.buffer[stream].split("\n")
        for line in lines:
            if line.strip():
                self.emit(line.rstrip("\r"))

    def flush(self) -> None:
        for stream, rest in self.buffer.items():
            if rest.strip():
                self.emit(rest)
            self.buffer[stream] = ""


def text(mib: int, newlines: bool) -> str:
    line = "x" * 79 + "\n" if newlines else "x" * 80
    return line * ((mib << 20) // 80)


def split_time(splitter_class: type, data: str) -> float:
    lines: list[str] = []
    splitter = splitter_class(lines.append)
    started = time.perf_counter()
    for at in range(0, len(data), CHUNK):
        splitter("stdout", data[at:at + CHUNK])
    splitter.flush()
    return time.perf_counter() - started


def end_to_end(mib: int, newlines: bool, limit: int | None) -> float:
    if limit is None:
        os.environ.pop("GPUPROV_OUTPUT_MAX_BYTES", None)
    else:
        os.environ["GPUPROV_OUTPUT_MAX_BYTES"] = str(limit)
    conn = LocalConnection(Host("localhost", "localhost", Where("bench", 1), connection="local"),
                           Timeouts())
    lines: list[str] = []
    splitter = LineSplitter(lines.append)
    produce = "yes " + "x" * 79 if newlines else "cat /dev/zero | tr '\\0' x"
    started = time.perf_counter()
    conn.run(f"{produce} | head -c {mib << 20}", on_output=splitter)
    splitter.flush()
    return time.perf_counter() - started


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [16, 64]
    print(f"{'MiB':>5} {'newlines':>8} {'engine':>8} {'transport':>9} "
          f"{'e2e 1 MiB kept':>14} {'e2e all kept':>12}")
    for mib in sizes:
        for newlines in (True, False):
            data = text(mib, newlines)
            old = (f"{split_time(PendingTextSplitter, data):8.2f}"
                   if newlines or mib <= 64 else f"{'-':>8}")
            new = split_time(LineSplitter, data)
            capped = end_to_end(mib, newlines, None)
            whole = end_to_end(mib, newlines, (mib + 1) << 20)
            print(f"{mib:5d} {'yes' if newlines else 'no':>8} {old} {new:9.2f} "
                  f"{capped:14.2f} {whole:12.2f}", flush=True)


if __name__ == "__main__":
    main()
