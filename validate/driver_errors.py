"""GPU and NVSwitch driver errors in a kernel log (Xid, SXid): parse, name,
judge with the operator's action (validate/actions.py).  Pure functions.

Xid: the GPU driver logs ``NVRM: Xid (PCI:DDDD:BB:DD): N, [pid=P, name=X, ]
<text>`` (open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
XID_PRINT_WITH_ATTR).  A line is judged by its number *and* by the driver's
words, most specific first:

1. Xid 154 carries the driver's recovery action: "GPU recovery action changed
   from 0x0 (None) to 0x1 (GPU Reset Required)" (gpu.c,
   _gpuRefreshRecoveryActionInLock).  The new action decides.
2. The NVLink Xids 144-150 say ``Fatal`` or ``Nonfatal`` after the unit
   ("149, NETIR_LINK_EVT Fatal XC0 i0 Link 01 (...)").  NVIDIA's catalog
   decode ("XID 144-150 Decode" sheet) gives RESET_GPU to the Fatal / Link
   Fatal rows and IGNORE to the Non-fatal ones: Fatal = reset the GPU,
   Nonfatal = none (a Non-fatal row that needs more makes the driver log
   Xid 154, judged by rule 1).
3. Xid 45 (preemptive cleanup) with "caused by previous Xid N" is judged by
   N: the catalog's Xid 45 workflow is "Not Solo: IGNORE (follow other Xid)".
   An NVLink cause (144-150) counts as reset the GPU: in the decode sheet
   only RESET_GPU and XID_154_EVAL rows list "AppCrash (Xid 45)".
4. Application errors, the list NVIDIA's k8s-device-plugin leaves the GPU
   healthy for (13, 31, 43, 45, 68: internal/rm/health.go
   applicationErrorXids), are notes that name the process: restart the job.
5. Xid 63, "Row Remapper: New row marked for remapping, reset gpu to
   activate.": the driver asks for a reset, though the catalog's bucket is
   IGNORE.  Reset the GPU, *deferred*: the finding does not fail the node
   (validate/actions.py ``deferred`` gives NVIDIA's and NVML's words).
6. Otherwise the catalog's immediate action for the number
   (validate/xid_catalog.py; bucket -> action in BUCKET_ACTION).

SXid: the NVSwitch driver logs ``nvidia-nvswitchN: SXid (PCI:...): NNNNN,
Fatal, Link 48 ...`` / ``Non-fatal, ...`` and continuation lines with the
same number (common_nvswitch.h, intr_nvswitch.h).  Judged by the driver's
word, else by NVIDIA's Fabric Manager user guide lists (SXID_CLASS).
"""

from __future__ import annotations

import datetime
import re
import time
from typing import Any, Iterable

from . import actions
from .xid_catalog import BY_XID
from .xid_catalog import CATALOG_VERSION as CATALOG_VERSION  # re-exported: checks/xid.py records it

# k8s-device-plugin (github.com/NVIDIA/k8s-device-plugin internal/rm/health.go):
# "Application errors: the GPU should still be healthy".
APPLICATION_XIDS = frozenset([13, 31, 43, 45, 68])
NVLINK5_XIDS = frozenset(range(144, 151))
# A row remap waits for the next GPU reset (rule 5): reset the GPU, but new work may start.
REMAP_PENDING_XIDS = frozenset([63])

# Catalog "Resolution Bucket (Immediate Action)" -> our action.  RESET_GPU,
# RESTART_BM (bare metal) and RESTART_VM say it themselves; WORKFLOW_XID_48
# (double-bit ECC): an uncorrectable error is remapped at the next GPU reset
# (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, "Row-remapping pending
# flag"); CONTACT_SUPPORT / CHECK_MECHANICALS / WORKFLOW_NVLINK_ERR need a
# person at the hardware (gpud maps them to HARDWARE_INSPECTION:
# components/accelerator/nvidia/xid/xid.go suggestedActionsFromBucket);
# CHECK_UVM: gpud's REBOOT_SYSTEM; UPDATE_SWFW (vGPU start error): gpud's
# CHECK_USER_APP_AND_GPU, i.e. restart the job.
BUCKET_ACTION = {
    "IGNORE": actions.NONE,
    "RESTART_APP": actions.RESTART_JOB,
    "WORKFLOW_XID_45": actions.RESTART_JOB,
    "UPDATE_SWFW": actions.RESTART_JOB,
    "RESET_GPU": actions.RESET_GPU,
    "WORKFLOW_XID_48": actions.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": actions.RESET_GPU,
    "XID_154": actions.RESET_GPU,
    "RESTART_BM": actions.REBOOT_NODE,
    "RESTART_VM": actions.REBOOT_NODE,
    "CHECK_UVM": actions.REBOOT_NODE,
    "CONTACT_SUPPORT": actions.DRAIN_RMA,
    "CHECK_MECHANICALS": actions.DRAIN_RMA,
    "WORKFLOW_NVLINK_ERR": actions.DRAIN_RMA,
}

# Xids whose catalog row has no bucket (162-172) or no row (173-176): our
# judgement, **unsourced** beyond the names (by analogy to catalogued rows).
# A driver new enough to log them also logs Xid 154 when it wants a reset.
UNBUCKETED_ACTION = {
    162: actions.NONE,          # power smoothing circuitry re-engaged
    163: actions.NONE,          # ... disengaged
    164: actions.NONE,          # ... low lifetime
    165: actions.DRAIN_RMA,     # ... lifetime exhausted: hardware capability gone
    166: actions.RESET_GPU,     # NVLink encrypted-traffic setup error
    167: actions.REBOOT_NODE,   # PCIe fatal timeout (like 79, RESTART_BM)
    168: actions.DRAIN_RMA,     # reduced GPU memory capacity
    169: actions.RESET_GPU,     # SEC2 halt (like 62 PMU halt, RESET_GPU)
    170: actions.RESET_GPU,     # NVLink secure: interrupt in CC mode
    171: actions.RESET_GPU,     # uncorrectable DRAM error (details of Xid 48)
    172: actions.RESET_GPU,     # uncorrectable SRAM error (details of Xid 48)
    173: actions.REBOOT_NODE,   # C2C fatal link failure
    174: actions.RESTART_JOB,   # channel reset, process killed
    175: actions.RESET_GPU,     # memory subsystem error
    176: actions.NONE,          # PCIe correctable error fault
}

_XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (\d+),\s*(.*)$")
_PID = re.compile(r"pid='?([^,' ]+)'?")
_NAME = re.compile(r"name=([^,]+)")
_CAUSE = re.compile(r"caused by previous Xid (\d+)")
_RECOVERY_TO = re.compile(r"recovery action changed from .*? to 0x[0-9A-Fa-f]+ \(([^)]*)\)")
# "149, NETIR_LINK_EVT  Fatal   XC0 ..." / "145, RLW_RXPIPE Nonfatal XC0 ...": the word after the unit
_NVLINK_SEVERITY = re.compile(r"^\s*[A-Z0-9_/]+\s+(Fatal|Nonfatal|Non-fatal)\b")
_SXID_LINE = re.compile(r"(nvidia-nvswitch\d*): SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")


def _process(detail: str) -> tuple[str | None, str | None]:
    pid_match = _PID.search(detail)
    name_match = _NAME.search(detail)
    pid = pid_match.group(1) if pid_match else None
    name = name_match.group(1).strip() if name_match else None
    if pid in ("<unknown>",):
        pid = None
    if name in ("<unknown>",):
        name = None
    return pid, name


def parse(text: str | None) -> list[dict[str, Any]]:
    """[{"xid", "pci", "pid", "process", "detail", "severity", "cause",
    "recovery", "line"}] for every Xid line of a kernel log (dmesg,
    journalctl -k, or a saved copy of either)."""
    events = []
    for line in (text or "").splitlines():
        m = _XID_LINE.search(line)
        if not m:
            continue
        xid = int(m.group(2))
        detail = m.group(3).strip()
        pid, name = _process(detail)
        sev = _NVLINK_SEVERITY.match(detail) if xid in NVLINK5_XIDS else None
        cause = _CAUSE.search(detail)
        rec = _RECOVERY_TO.search(detail) if xid == 154 else None
        events.append({
            "xid": xid,
            "pci": m.group(1).lower(),
            "pid": pid,
            "process": name,
            "detail": detail,
            "severity": ("fatal" if sev.group(1) == "Fatal" else "nonfatal") if sev else None,
            "cause": int(cause.group(1)) if cause else None,
            "recovery": rec.group(1).strip() if rec else None,
            "line": line.strip(),
        })
    return events


_DMESG_TIME = re.compile(r"^\[\s*(\d+\.\d+)\]")


def dmesg_start(text: str | None) -> float | None:
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


# When a kernel log line was written: `dmesg -T` / `--ctime` ("[Fri Aug 30 11:43:09 2024]",
# local time), ISO 8601 at the start (`journalctl -o short-iso`, `dmesg --time-format iso`),
# or seconds since boot ("[ 1234.567890]", plain dmesg: dated only when the boot time is known).
_CTIME = re.compile(r"^\[\s*\w{3} (\w{3}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[.,]\d+)?(Z|[+-]\d{2}:?\d{2})?")


def line_time(line: str, boot: float | None = None) -> datetime.datetime | None:
    """The time a kernel log line carries, as an aware datetime, or None."""
    m = _CTIME.match(line)
    if m:
        try:
            t = time.mktime(time.strptime(" ".join(m.group(1).split()), "%b %d %H:%M:%S %Y"))
        except (ValueError, OverflowError):
            return None
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    m = _ISO.match(line)
    if m:
        zone = m.group(2) or "+00:00"
        zone = "+00:00" if zone == "Z" else zone if ":" in zone else zone[:3] + ":" + zone[3:]
        try:
            return datetime.datetime.fromisoformat(m.group(1) + zone)
        except ValueError:
            return None
    m = _DMESG_TIME.match(line)
    if m and boot is not None:
        return datetime.datetime.fromtimestamp(boot + float(m.group(1)), datetime.timezone.utc)
    return None


def boot_time(stat: str = "/proc/stat") -> float | None:
    """This machine's boot time (``btime`` of /proc/stat), for plain dmesg lines."""
    try:
        with open(stat) as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def waive(events: list[dict[str, Any]], key: str, ignore: Iterable[int] = (),
          before: datetime.datetime | None = None,
          boot: float | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """(events still counted, [waiver], lines left counted for want of a date) after the
    inventory's waivers: ``ignore`` (Xid or SXid numbers) and ``before`` (lines logged
    earlier: they stay in the kernel log until a reboot, dcgm-exporter#190)."""
    ignore = set(ignore)
    kept, old, undated = [], [], 0
    ignored: dict[int, int] = {}
    for e in events:
        if e[key] in ignore:
            ignored[e[key]] = ignored.get(e[key], 0) + 1
            continue
        if before is not None:
            t = line_time(e["line"], boot)
            if t is None:
                undated += 1
            elif t < before:
                old.append(e)
                continue
        kept.append(e)
    word = "Xid" if key == "xid" else "SXid"
    waivers = [{"waiver": "ignore_xids", "what": "ignore_xids (inventory): %s %d, %d line(s) not counted"
                % (word, n, count)} for n, count in sorted(ignored.items())]
    if old:
        waivers.append({"waiver": "acknowledged_before", "what": "acknowledged_before %s (inventory): %d %s "
                        "line(s) logged earlier not counted (%s)" % (
                            before.isoformat() if before else "", len(old), word,
                            ", ".join("%s %d" % (word, n) for n in sorted(set(e[key] for e in old))))})
    return kept, waivers, undated


def name_of(xid: int) -> str:
    row = BY_XID.get(xid)
    if row is None:
        return "Xid %d (not in %s)" % (xid, CATALOG_VERSION)
    text = row[2] if row[2] and row[2] != "Unused" else row[1]
    return text.split(" -- ")[0]  # Xid 45's catalog text goes on with advice


def catalog_action(xid: int) -> tuple[str, str]:
    """(action, why) for an Xid by its number alone."""
    row = BY_XID.get(xid)
    if row is None:
        return actions.RESET_GPU, "not in our catalog copy: reset the GPU to be safe (ours)"
    if row[3]:
        return BUCKET_ACTION.get(row[3], actions.RESET_GPU), "catalog: %s" % row[3]
    return UNBUCKETED_ACTION.get(xid, actions.RESET_GPU), "no catalog action; ours by analogy"


def action_of(event: dict[str, Any]) -> tuple[str, str]:
    """(action, why) for one parsed Xid event (rules in the module docstring)."""
    xid = event["xid"]
    if xid == 154 and event.get("recovery") is not None:
        return actions.of_recovery_text(event["recovery"]), "driver: recovery action now %s" % event["recovery"]
    if event.get("severity") == "fatal":
        return actions.RESET_GPU, "driver marks it Fatal (catalog decode: RESET_GPU)"
    if event.get("severity") == "nonfatal":
        return actions.NONE, "driver marks it Nonfatal (catalog decode: IGNORE)"
    cause = event.get("cause")
    if xid == 45 and cause is not None and cause not in APPLICATION_XIDS:
        if cause in NVLINK5_XIDS:
            return actions.RESET_GPU, "caused by NVLink Xid %d (catalog decode: Xid 45 follows RESET_GPU rows)" % cause
        act, why = catalog_action(cause)
        return act, "caused by previous Xid %d (%s; %s)" % (cause, name_of(cause), why)
    if xid in APPLICATION_XIDS:
        return actions.RESTART_JOB, "application error (k8s-device-plugin list)"
    if xid in REMAP_PENDING_XIDS:
        return actions.RESET_GPU, "driver: reset gpu to activate the remap; new work may start meanwhile"
    return catalog_action(xid)


def fails(xid: int, action: str) -> bool:
    """Whether an Xid finding with ``action`` makes the node sick: reset the GPU or worse,
    except a pending row remap, whose reset may wait (rule 5)."""
    return actions.is_sick(action) and xid not in REMAP_PENDING_XIDS


def _who(pids: Iterable[str | None], procs: Iterable[str | None]) -> str:
    names = sorted(p for p in procs if p)
    ids = sorted(p for p in pids if p)
    if not names and not ids:
        return ""
    return "; process %s (pid %s)" % (", ".join(names) or "?", ", ".join(ids) or "?")


def judge(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[finding]: one per (GPU, Xid, cause, driver word, action), with
    {"what", "action", "why", "xid", "pci", "count", "last", "sick"}; in the
    order the first of each group appeared."""
    groups: dict[Any, Any] = {}
    order = []
    for e in events:
        act, why = action_of(e)
        key = (e["pci"], e["xid"], e.get("cause"), e.get("severity"), act)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"xid": e["xid"], "pci": e["pci"], "cause": e.get("cause"),
                               "severity": e.get("severity"), "action": act, "why": why,
                               "count": 0, "pids": set(), "procs": set(), "last": None}
            order.append(key)
        g["count"] += 1
        g["pids"].add(e.get("pid"))
        g["procs"].add(e.get("process"))
        g["last"] = e["line"]
    out = []
    for key in order:
        g = groups[key]
        extra = ""
        if g["cause"] is not None:
            extra = " caused by previous Xid %d" % g["cause"]
        if g["severity"]:
            extra += " (%s)" % ("Fatal" if g["severity"] == "fatal" else "Nonfatal")
        what = "GPU PCI:%s: Xid %d (%s)%s, %d time(s)%s [%s]; last: %s" % (
            g["pci"], g["xid"], name_of(g["xid"]), extra, g["count"], _who(g["pids"], g["procs"]),
            g["why"], g["last"])
        out.append({"what": what, "action": g["action"], "why": g["why"], "xid": g["xid"], "pci": g["pci"],
                    "count": g["count"], "last": g["last"], "sick": fails(g["xid"], g["action"])})
    return out


# --------------------------------------------------------------------------
# SXid (NVSwitch)

# NVIDIA Fabric Manager user guide, DU-09883-001 v1.3 (October 2023), "NVSwitch
# SXid errors": Non-Fatal, Fatal and Always Fatal lists, as transcribed in
# github.com/leptonai/gpud components/accelerator/nvidia/sxid/sxid.go (commit
# 4a8de33).  Fatal: "Restart the guest VM" on the virtualised models, "Restart
# the system to reset the GPUs and NVSwitches" (gpud's reading for bare metal,
# gpud PR 338); Always Fatal: "Restart the host to reset the entire
# fabric/system".  Both are reboot the node here; Non-fatal: none.
SXID_NONFATAL = frozenset([11004, 11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057,
                           19059, 19062, 19065, 19068, 19071, 24001, 24002, 24003, 20001, 12028, 19084, 22013,
                           20012])
SXID_FATAL = frozenset([11001, 11009, 11013, 11018, 11019, 11020, 12001, 12002, 12022, 12024, 12025, 12026, 12027,
                        12030, 12031, 12032, 14017, 15001, 15006, 15009, 15010, 15012, 15013, 19047, 19048, 19054,
                        19056, 19058, 19060, 19061, 19063, 19064, 19066, 19067, 19069, 19070, 20034, 22012, 24004,
                        24005, 24006, 24007])
SXID_ALWAYS_FATAL = frozenset([12020, 22003, 22011, 23001, 23002, 23003, 23004, 23005, 23006, 23007, 23008, 23009,
                               23010, 23011, 23012, 23013, 23014, 23015, 23016, 23017, 10001, 10002, 10003, 10004,
                               10005, 20009])
SXID_SOURCE = "NVIDIA Fabric Manager user guide DU-09883-001 v1.3 (Oct 2023), NVSwitch SXid errors"


def parse_sxid(text: str | None) -> list[dict[str, Any]]:
    """[{"sxid", "switch", "pci", "severity", "detail", "line"}] for every SXid line."""
    out = []
    for line in (text or "").splitlines():
        m = _SXID_LINE.search(line)
        if not m:
            continue
        detail = m.group(4).strip()
        sev = None
        if detail.startswith("Fatal"):
            sev = "fatal"
        elif detail.lower().startswith(("non-fatal", "nonfatal")):
            sev = "nonfatal"
        out.append({"sxid": int(m.group(3)), "switch": m.group(1), "pci": m.group(2).lower(),
                    "severity": sev, "detail": detail, "line": line.strip()})
    return out


def sxid_class(sxid: int) -> str | None:
    if sxid in SXID_ALWAYS_FATAL:
        return "always fatal"
    if sxid in SXID_FATAL:
        return "fatal"
    if sxid in SXID_NONFATAL:
        return "non-fatal"
    return None


def judge_sxid(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[finding] per (switch, SXid): the driver's Fatal / Non-fatal word on
    any of its lines decides, else the Fabric Manager guide's list."""
    groups: dict[Any, Any] = {}
    order = []
    for e in events:
        key = (e["pci"], e["sxid"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"sxid": e["sxid"], "pci": e["pci"], "switch": e["switch"], "words": set(),
                               "count": 0, "last": None, "first": None}
            order.append(key)
        g["count"] += 1
        if e["severity"]:
            g["words"].add(e["severity"])
            g["first"] = g["first"] or e["line"]
        g["last"] = e["line"]
    out = []
    for key in order:
        g = groups[key]
        cls = sxid_class(g["sxid"])
        if cls == "always fatal":
            act, why = actions.REBOOT_NODE, "always fatal (%s)" % SXID_SOURCE
        elif "fatal" in g["words"]:
            act, why = actions.REBOOT_NODE, "driver marks it Fatal (%s: reset GPUs and NVSwitches)" % SXID_SOURCE
        elif "nonfatal" in g["words"]:
            act, why = actions.NONE, "driver marks it Non-fatal"
        elif cls == "fatal":
            act, why = actions.REBOOT_NODE, "fatal (%s)" % SXID_SOURCE
        elif cls == "non-fatal":
            act, why = actions.NONE, "non-fatal (%s)" % SXID_SOURCE
        else:
            act, why = actions.NONE, "no Fatal/Non-fatal word and not in %s" % SXID_SOURCE
        what = "NVSwitch %s PCI:%s: SXid %d, %d line(s) [%s]; %s" % (
            g["switch"], g["pci"], g["sxid"], g["count"], why, g["first"] or g["last"])
        out.append({"what": what, "action": act, "why": why, "sxid": g["sxid"], "pci": g["pci"],
                    "count": g["count"], "last": g["last"], "sick": actions.is_sick(act)})
    return out
