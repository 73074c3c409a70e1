"""Versions of the CUDA stack as the tools print them: cuDNN's integer and header defines,
nvcc's banner.  Pure functions over text, standard library only; imports nothing of validate/.
"""

from __future__ import annotations

import re
from typing import Any

# --------------------------------------------------------------------------
# cuDNN versions


def decode_cudnn_version(n: int | str | None) -> tuple[int, int, int] | None:
    """cudnnGetVersion()/torch.backends.cudnn.version() integer -> (major, minor, patch).

    cuDNN 9+: MAJOR*10000 + MINOR*100 + PATCH (9.1.0 -> 90100).
    cuDNN 8 and older: MAJOR*1000 + MINOR*100 + PATCH (8.9.7 -> 8907).
    The encodings cannot collide: the old one stays below 10000.
    """
    if n is None:
        return None
    v = int(n)
    if v <= 0:
        return None
    if v >= 10000:
        return (v // 10000, (v % 10000) // 100, v % 100)
    return (v // 1000, (v % 1000) // 100, v % 100)


def cudnn_version_string(n: int | str | None) -> str | None:
    v = decode_cudnn_version(n)
    return None if v is None else "%d.%d.%d" % v


_DEFINE = r"^\s*#\s*define\s+%s\s+\(?\s*(\d+)\s*\)?\s*$"


def parse_cudnn_header(text: str) -> dict[str, Any] | None:
    """Version defines of cudnn_version.h (cuDNN 8+), or cudnn.h (cuDNN 7 and
    older). Returns {"major","minor","patch","version","encoded"} or None."""
    vals: dict[str, int] = {}
    for name in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"):
        m = re.search(_DEFINE % name, text, re.M)
        if not m:
            return None
        vals[name] = int(m.group(1))
    major, minor, patch = vals["CUDNN_MAJOR"], vals["CUDNN_MINOR"], vals["CUDNN_PATCHLEVEL"]
    m = re.search(r"#\s*define\s+CUDNN_VERSION\s+\(?\s*CUDNN_MAJOR\s*\*\s*(\d+)", text)
    if m:
        factor = int(m.group(1))
    else:
        factor = 10000 if major >= 9 else 1000
    return {
        "major": major,
        "minor": minor,
        "patch": patch,
        "version": "%d.%d.%d" % (major, minor, patch),
        "encoded": major * factor + minor * 100 + patch,
    }


def parse_nvcc_version(text: str | None) -> dict[str, str] | None:
    """'Cuda compilation tools, release 13.0, V13.0.88' -> {"release","version"}."""
    m = re.search(r"release\s+(\d+\.\d+),\s*V([\d.]+)", text or "")
    if not m:
        return None
    return {"release": m.group(1), "version": m.group(2)}
