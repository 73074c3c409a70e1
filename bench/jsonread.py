"""What validate/jsonread.py's limits cost (issue 41, attack 7): time and peak memory of reading
a document with `validate.jsonread.loads` (a depth count, then json with an integer hook)
against plain `json.loads`, for honest and hostile texts at the control side's results.json cap.

    python3 -m bench.jsonread

Cases: a real results.json (tests/fixtures/validate/h200/full/results.json); 16 MiB of `[]`
pairs (depth 1: the count walks every bracket); 16 MiB of text inside one string full of
brackets and quotes escaped (the count skips it); 100,000 `[` (refused). Each case runs 5 times;
prints the median seconds and the peak of Python allocations (tracemalloc) per reader; a
refused text shows what it raised.
"""
from __future__ import annotations

import json
import statistics
import time
import tracemalloc
from typing import Any, Callable

from bench.common import REPO
from remote.ground.runfolder import RESULTS
from validate import jsonread

CAP = 16 << 20  # remote/ground/resultsfile.py MAX_FILE_BYTES
RUNS = 5


def cases() -> dict[str, str]:
    fixture = (REPO / "tests" / "fixtures" / "validate" / "h200" / "full" / RESULTS).read_text()
    pairs = "[" + ",".join(["[]"] * ((CAP - 2) // 3)) + "]"
    text = json.dumps({"s": ('[{"\\' * (CAP // 8))[: CAP - 16]})
    return {"real %s (%d KiB)" % (RESULTS, len(fixture) >> 10): fixture,
            "16 MiB of [] pairs": pairs, "16 MiB string of brackets": text,
            "100,000 [": "[" * 100_000}


def measure(read: Callable[[str], Any], text: str) -> tuple[float, float, str]:
    times, peak, said = [], 0, "read"
    for _ in range(RUNS):
        tracemalloc.start()
        started = time.perf_counter()
        try:
            read(text)
        except (ValueError, RecursionError) as exc:
            said = f"{type(exc).__name__}: {str(exc)[:50]}"
        times.append(time.perf_counter() - started)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return statistics.median(times), peak / (1 << 20), said


def main() -> None:
    for name, text in cases().items():
        for reader, read in (("json.loads", json.loads),
                             ("jsonread.loads", lambda t: jsonread.loads(t, max_bytes=CAP))):
            seconds, mib, said = measure(read, text)
            print(f"{name:32} {reader:15} {seconds:8.3f} s {mib:8.1f} MiB  {said}")


if __name__ == "__main__":
    main()
