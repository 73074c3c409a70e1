"""host_memory: the node's memory against the profile (``host.memory_gib``: MemTotal in
/proc/meminfo at least that, proc(5)), and the memory controllers' error counts since boot
(EDAC, /sys/devices/system/edac/mc/mc*/ce_count and ue_count: Documentation/admin-guide/ras.rst).

* less memory than the profile's: a DIMM missing or disabled; action: drain and replace (RMA)
  (ours: a hardware fault, as a GPU missing from the bus is reboot-then-RMA);
* uncorrected errors (``ue_count`` above 0, host_floors.EDAC_UE_MAX): the memory lost data;
  action: drain and replace (RMA), naming the controller;
* corrected errors (``ce_count``): a note (action none) unless the profile's
  ``host.edac_corrected_max`` is exceeded, then drain and replace.

The size part does not apply without ``host.memory_gib``, the EDAC part without an EDAC
driver (no ``devices/system/edac/mc`` under ``--sysfs-root``, default /sys); neither: n/a.
"""

import glob
import os

from .. import actions
from . import host_floors

MEMINFO = "/proc/meminfo"


def mem_total_gib(path=MEMINFO):
    """MemTotal in GiB (the file's kB are KiB), or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2.0 ** 20
    except (OSError, ValueError, IndexError):
        pass
    return None


def _count(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def edac_counts(sysfs_root):
    """[{"mc", "ce", "ue"}] of each memory controller, or None without EDAC."""
    base = os.path.join(sysfs_root, "devices", "system", "edac", "mc")
    if not os.path.isdir(base):
        return None
    return [{"mc": os.path.basename(d), "ce": _count(os.path.join(d, "ce_count")),
             "ue": _count(os.path.join(d, "ue_count"))}
            for d in sorted(glob.glob(os.path.join(base, "mc[0-9]*")))]


def judge_edac(mcs, ce_max):
    """[(finding, action, fails)] of the controllers' counts."""
    out = []
    for m in mcs:
        if m["ue"] is not None and m["ue"] > host_floors.EDAC_UE_MAX:
            out.append(("memory controller %s: %d uncorrected error(s) since boot (EDAC ue_count): replace "
                        "the DIMM it names" % (m["mc"], m["ue"]), actions.DRAIN_RMA, True))
        if m["ce"]:
            over = ce_max is not None and m["ce"] > ce_max
            out.append(("memory controller %s: %d corrected error(s) since boot (EDAC ce_count%s)" % (
                m["mc"], m["ce"], ", over the profile's %d" % ce_max if over else ""),
                actions.DRAIN_RMA if over else actions.NONE, over))
    return out


def run(ctx, res):
    h = (ctx.profile or {}).get("host") or {}
    floor = h.get("memory_gib")
    mcs = edac_counts(getattr(ctx.opts, "sysfs_root", None) or "/sys")
    if floor is None and mcs is None:
        res.waive("not applicable: no host.memory_gib in the node profile and no EDAC driver "
                  "(devices/system/edac/mc)", warning=False)
        return
    total = mem_total_gib()
    res.figures.update({"memory_gib": round(total, 2) if total is not None else None, "floor_gib": floor,
                        "edac": mcs})
    parts = []
    if floor is not None:
        if total is None or total < floor:
            res.problem("memory %s GiB (MemTotal), below the profile's %g GiB: a DIMM missing or disabled" % (
                "?" if total is None else "%.1f" % total, floor), actions.DRAIN_RMA)
        parts.append("%.1f GiB (floor %g)" % (total or 0, floor))
    if mcs is not None:
        for what, action, fails in judge_edac(mcs, h.get("edac_corrected_max")):
            (res.problem if fails else res.notice)(what, action)
        parts.append("EDAC %d controller(s): %d corrected, %d uncorrected" % (
            len(mcs), sum(m["ce"] or 0 for m in mcs), sum(m["ue"] or 0 for m in mcs)))
    else:
        parts.append("no EDAC driver")
    res.summary = "; ".join(parts)
