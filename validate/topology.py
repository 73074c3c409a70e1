"""``nvidia-smi topo -m`` and collective bandwidth: pure functions.

topo -m prints a matrix whose cells say how two GPUs connect: ``NV<n>`` (n
bonded NVLinks, through NVSwitch on HGX boards), ``PIX``/``PXB`` (PCIe
switches), ``PHB`` (host bridge), ``NODE`` (across host bridges in a NUMA
node), ``SYS`` (across the SMP interconnect), ``X`` (self); the legend is
printed by nvidia-smi itself below the matrix.
"""

from __future__ import annotations

import re

_GPU = re.compile(r"^GPU\d+$")


def parse_topo(text: str | None) -> dict[tuple[int, int], str]:
    """{(i, j): link} for every GPU pair of ``nvidia-smi topo -m``."""
    lines = [ln.rstrip() for ln in (text or "").splitlines() if ln.strip()]
    header: list[str] | None = None
    out: dict[tuple[int, int], str] = {}
    for ln in lines:
        cells = ln.split()
        if header is None:
            if cells and _GPU.match(cells[0].strip("\t")) and len(cells) > 1 and _GPU.match(cells[1]):
                header = [c for c in cells if _GPU.match(c)]
            continue
        if not cells or not _GPU.match(cells[0]):
            if cells and cells[0].lower().startswith("legend"):
                break
            continue
        i = int(cells[0][3:])
        for j, cell in enumerate(cells[1:1 + len(header)]):
            if cell != "X":
                out[(i, int(header[j][3:]))] = cell
    return out


def link_class(cell: str | None) -> str | None:
    """'nvlink' for NV<n>, 'pcie' for the PCIe/host paths, None if unknown."""
    if cell and cell.startswith("NV"):
        return "nvlink"
    if cell in ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC"):
        return "pcie"
    return None


def busbw_allreduce(nbytes: float, seconds: float, ranks: int) -> tuple[float, float]:
    """nccl-tests' bus bandwidth of an all-reduce (github.com/NVIDIA/nccl-tests
    doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw x 2(n-1)/n, GB/s."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2.0 * (ranks - 1) / ranks
