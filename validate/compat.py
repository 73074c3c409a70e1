"""Can this torch build run kernels on this GPU?  Judged as CUDA does.

CUDA C++ Programming Guide, "Binary Compatibility": a cubin built for compute
capability X.y runs on devices of capability X.z with z >= y (same major);
"PTX Compatibility": PTX built for X.y can be JIT-compiled by the driver for
any capability >= X.y.  Arch-specific targets (``sm_90a``) run only on that
exact capability.  torch itself accepts a device when the build has an
``sm_`` of the same major (torch/cuda/__init__.py ``_check_cubins``: "NVIDIA
GPU compute architectures are backward compatible within major version").
So an L4 / L40S / RTX 4090 (sm_89) runs a build with sm_86 or sm_80 kernels.
"""

from __future__ import annotations

import re
from typing import Iterable

NATIVE = "native"            # a cubin for exactly this capability
BINARY = "binary-compatible"  # a cubin for the same major, lower or equal minor
PTX = "ptx-jit"               # only PTX the driver JIT-compiles (slow first run)
NONE = "none"

_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def _parse(arch: str) -> tuple[str, int, int, str] | None:
    m = _ARCH.match(arch.strip())
    if not m:
        return None
    num = int(m.group(2))
    return m.group(1), num // 10, num % 10, m.group(3)


def kernel_support(major: int, minor: int, arch_list: Iterable[str] | None) -> tuple[str, str | None]:
    """(status, via) for a device of capability major.minor and a torch build's
    ``torch.cuda.get_arch_list()``; status is NATIVE, BINARY, PTX or NONE, via
    the arch entry that qualifies (or None)."""
    best: tuple[str, str | None] = (NONE, None)
    best_key = (0, -1)
    rank = {NONE: 0, PTX: 1, BINARY: 2, NATIVE: 3}
    for arch in arch_list or []:
        parsed = _parse(arch)
        if parsed is None:
            continue
        kind, amaj, amin, suffix = parsed
        if kind == "sm":
            if suffix == "a":  # arch-specific: this exact capability only
                ok = (amaj, amin) == (major, minor)
            else:  # plain and family ("f") cubins: same major, minor <= device
                ok = amaj == major and amin <= minor
            status = (NATIVE if (amaj, amin) == (major, minor) else BINARY) if ok else NONE
        else:  # compute_XY: PTX, JIT-compiled for any newer capability
            status = PTX if (amaj, amin) <= (major, minor) and suffix != "a" else NONE
        key = (rank[status], amin)  # the closest cubin: the highest minor that runs
        if status != NONE and key > best_key:
            best, best_key = (status, arch), key
    return best
