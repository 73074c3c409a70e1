"""NVIDIA Xid events in a kernel log: parse, name, judge.  Pure functions.

The driver logs ``NVRM: Xid (PCI:DDDD:BB:DD): N, <details>`` for every GPU
error it sees (NVIDIA "Xid Errors", docs.nvidia.com/deploy/xid-errors/).
Names below follow that catalog (as copied into github.com/leptonai/gpud
components/accelerator/nvidia/query/xid/xid.go, r555).  The ones that mean a
sick GPU or node are Azure's list (github.com/Azure/azurehpc-health-checks
customTests/azure_gpu_xid.nhc: XID_EC="48 56 57 58 62 63 64 65 68 69 73 74
79 80 81 92 119 120"); others (13, 31, 43, 45, 94: an application's fault or
a contained error the driver recovered from) are reported, not failed.
"""

import re

XID_NAMES = {
    8: "GPU stopped processing (timeout)",
    13: "Graphics engine exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double-bit ECC error",
    56: "Display engine error",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    65: "Video processor exception",
    68: "NVDEC0 exception",
    69: "Graphics engine class error",
    73: "NVENC2 error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    80: "Corrupted data sent to GPU",
    81: "VGA subsystem error",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "Unrecovered ECC error",
    145: "NVLink RLW error",
    149: "NVLink NETIR error",
}

# Azure HPC node health checks fail the node on these (azure_gpu_xid.nhc).
SICK_XIDS = frozenset([48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120])

_XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (\d+),\s*(.*)$")
_PID = re.compile(r"pid='?([^,' ]+)'?")
_NAME = re.compile(r"name=([^,]+)")


def parse(text):
    """[{"xid", "pci", "pid", "process", "detail", "line"}] for every Xid line
    of a kernel log (dmesg, journalctl -k, or a saved copy of either)."""
    events = []
    for line in (text or "").splitlines():
        m = _XID_LINE.search(line)
        if not m:
            continue
        detail = m.group(3).strip()
        pid = _PID.search(detail)
        name = _NAME.search(detail)
        events.append({
            "xid": int(m.group(2)),
            "pci": m.group(1).lower(),
            "pid": pid.group(1) if pid else None,
            "process": name.group(1).strip() if name else None,
            "detail": detail,
            "line": line.strip(),
        })
    return events


_DMESG_TIME = re.compile(r"^\[\s*(\d+\.\d+)\]")


def dmesg_start(text):
    """Seconds after boot of the first line of ``dmesg`` output, or None when
    the lines carry no such timestamp.  The kernel's ring buffer is fixed in
    size: on a long-running host its first line is no longer the boot's
    [    0.000000], and the Xids logged before it are gone."""
    for line in (text or "").splitlines():
        m = _DMESG_TIME.match(line)
        if m:
            return float(m.group(1))
        if line.strip():
            return None
    return None


def name_of(xid):
    return XID_NAMES.get(xid, "Xid %d (not in our copy of NVIDIA's catalog)" % xid)


def judge(events):
    """(problems, notes): one problem per (Xid, GPU) on the sick list, one
    note per other (Xid, GPU); counts and the last line of each."""
    groups = {}
    for e in events:
        k = (e["xid"], e["pci"])
        g = groups.setdefault(k, {"count": 0, "last": None})
        g["count"] += 1
        g["last"] = e["line"]
    problems, notes = [], []
    for (xid, pci), g in sorted(groups.items()):
        text = "Xid %d (%s) on GPU PCI:%s, %d time(s); last: %s" % (xid, name_of(xid), pci, g["count"], g["last"])
        (problems if xid in SICK_XIDS else notes).append(text)
    return problems, notes
