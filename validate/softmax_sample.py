"""The cuDNN softmax sample (validate/cudnn_softmax.cpp): its input generator, the CPU
reference, the readers of its stdout and stderr (measure), and the comparison of a run with the
reference (judge).  Standard library only.
"""

from __future__ import annotations

import array
import math
import re
from typing import Any

from .text import ParseError

# --------------------------------------------------------------------------
# the cuDNN softmax sample


SAMPLE_SEED = 1234
SAMPLE_SIZE = 1000
SAMPLE_TOP = 5


def additive_generator(seed: int, count: int) -> list[int]:
    """The glibc TYPE_3 additive-feedback stream (what rand() returns after
    srand(seed) with glibc), as validate/cudnn_softmax.cpp implements it."""
    r = [0] * (344 + count)
    r[0] = seed
    for i in range(1, 31):
        hi, lo = divmod(r[i - 1], 127773)
        word = 16807 * lo - 2836 * hi
        if word < 0:
            word += 2147483647
        r[i] = word
    for i in range(31, 34):
        r[i] = r[i - 31]
    for i in range(34, 344 + count):
        r[i] = (r[i - 31] + r[i - 3]) & 0xFFFFFFFF
    return [r[k] >> 1 for k in range(344, 344 + count)]


def sample_input(seed: int = SAMPLE_SEED, count: int = SAMPLE_SIZE) -> list[float]:
    """The sample's input as float32 values: float(r) / 2^31, rounded to float32
    exactly as the C++ float division does."""
    raw = array.array("f", (float(v) for v in additive_generator(seed, count)))
    return list(array.array("f", (v / 2147483648.0 for v in raw)))


def softmax_reference(values: list[float]) -> list[float]:
    """CPU softmax in double precision (max-shifted)."""
    m = max(values)
    exps = [math.exp(v - m) for v in values]
    s = sum(exps)
    return [e / s for e in exps]


def top_k(values: list[float], k: int) -> list[tuple[int, float]]:
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return [(i, values[i]) for i in order[:k]]


_LEGACY_TOP = re.compile(r"^\[(\d+)\]\s+pos\s+(\d+)\s+val\s+([-+0-9.eE]+)\s*$")


def parse_sample_output(stdout: str | None) -> dict[str, Any]:
    """Parse the sample's stdout (this project's format, or the original
    tutorial program's ``[k] pos P val V`` lines)."""
    top: list[tuple[int, float]] = []
    out: dict[str, Any] = {"format": None, "top": top, "status": None}
    for raw in (stdout or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _LEGACY_TOP.match(line)
        if m:
            out["format"] = out["format"] or "legacy"
            out["top"].append((int(m.group(2)), float(m.group(3))))
            continue
        parts = line.split()
        key = parts[0]
        try:
            if key == "gpuprov-cudnn-softmax":
                out["format"] = "gpuprov"
                out["format_version"] = int(parts[1])
            elif key in ("cudnn_header", "cudnn_runtime", "cudart_runtime", "cuda_driver", "devices"):
                out[key] = int(parts[1])
            elif key == "device":
                out["device"] = {
                    "index": int(parts[1]),
                    "capability": "%s.%s" % (parts[2], parts[3]),
                    "name": " ".join(parts[4:]),
                }
            elif key == "shape":
                out["shape"] = [int(p) for p in parts[1:5]]
            elif key in ("input_sum", "sum"):
                out[key] = float(parts[1])
            elif key == "top":
                out["top"].append((int(parts[2]), float(parts[3])))
            elif key == "status":
                out["status"] = parts[1]
        except (IndexError, ValueError):
            raise ParseError("malformed sample output line: %r" % line) from None
    if out["format"] == "legacy" and out["status"] is None and len(out["top"]) == SAMPLE_TOP:
        out["status"] = "ok"
    return out


_SAMPLE_ERROR = re.compile(r"^error (cuda|cudnn) (.*?): (.*)$")


def parse_sample_errors(stderr: str | None) -> list[dict[str, str]]:
    """``error cuda|cudnn CALL: NAME: TEXT`` lines from the sample's stderr."""
    errors = []
    for line in (stderr or "").splitlines():
        m = _SAMPLE_ERROR.match(line.strip())
        if m:
            api, call, rest = m.groups()
            name, _, text = rest.partition(": ")
            errors.append({"api": api, "call": call, "name": name, "text": text or name})
    return errors


def check_sample(parsed: dict[str, Any], seed: int = SAMPLE_SEED, size: int = SAMPLE_SIZE, sum_tol: float = 1e-5,
                 rel_tol: float = 1e-4) -> tuple[list[str], dict[str, Any]]:
    """Compare a parsed sample run with the CPU reference from the same input.

    Returns (problems, figures): no problems means the GPU softmax is right —
    the outputs sum to 1 within ``sum_tol`` and the top-5 positions equal the
    reference's, values within ``rel_tol``.
    """
    problems = []
    x = sample_input(seed, size)
    ref = softmax_reference(x)
    ref_top = top_k(ref, SAMPLE_TOP)
    figures: dict[str, Any] = {
        "reference_top5": [[p, v] for p, v in ref_top],
        "gpu_top5": [[p, v] for p, v in parsed.get("top", [])],
    }
    if "input_sum" in parsed:
        ref_in = sum(x)
        figures["input_sum_delta"] = parsed["input_sum"] - ref_in
        if abs(parsed["input_sum"] - ref_in) > 1e-4 * max(1.0, abs(ref_in)):
            problems.append(
                "input differs from the reference generator (sum %.6f vs %.6f)"
                % (parsed["input_sum"], ref_in)
            )
    if parsed.get("status") != "ok":
        problems.append("sample did not complete (status %s)" % (parsed.get("status") or "missing"))
        return problems, figures
    if "sum" in parsed:
        figures["sum"] = parsed["sum"]
        figures["sum_error"] = abs(parsed["sum"] - 1.0)
        if abs(parsed["sum"] - 1.0) > sum_tol:
            problems.append("softmax sums to %.9f, not 1 within %g" % (parsed["sum"], sum_tol))
    else:
        figures["sum"] = None
        if parsed.get("format") == "gpuprov":
            problems.append("the sample printed no sum")
    got = parsed.get("top", [])
    if len(got) != SAMPLE_TOP:
        problems.append("expected %d top entries, got %d" % (SAMPLE_TOP, len(got)))
        return problems, figures
    worst = 0.0
    for k, ((gp, gv), (rp, rv)) in enumerate(zip(got, ref_top)):
        if gp != rp:
            problems.append("top-%d position %d, reference %d" % (k + 1, gp, rp))
            continue
        rel = abs(gv - rv) / abs(rv)
        worst = max(worst, rel)
        if rel > rel_tol:
            problems.append("top-%d value %.9g, reference %.9g (rel. error %.2g)" % (k + 1, gv, rv, rel))
    figures["top5_max_rel_error"] = worst
    return problems, figures
