"""fabric: on a board with NVSwitches, Fabric Manager must run and every GPU
must have joined the NVLink fabric.

NVIDIA Fabric Manager user guide ("What is Fabric Manager?"): on NVSwitch
systems the fabricmanager service configures the switches and GPUs; without
it the GPUs have no NVLink peer-to-peer, and CUDA initialisation fails with
cudaErrorSystemNotReady.  So on such a board a Fabric Manager that is not
running is a finding, and so is a GPU whose fabric state (``nvidia-smi -q``,
section Fabric: Not Started / In Progress / Completed, Status) is not
"Completed" with "Success".  Action: reboot the node (the service starts at
boot; ``systemctl start nvidia-fabricmanager`` may be enough: our wording).

NVSwitches are found the way gpud does it (components/accelerator/nvidia/
fabric-manager/detect_nvswitch.go: PCI devices of vendor 10de, class
"Bridge [0680]"), here from sysfs so no lspci is needed; the service by its
process name (comm ``nv-fabricmanage``, the kernel's 15-character cut of
``nv-fabricmanager``).  A board without NVSwitches waives the check.
"""

import os

from .. import actions, host
from ..gpu_state import smi_q_health
from ..smi import parse_smi_q

NVIDIA_VENDOR = "0x10de"
BRIDGE_OTHER_CLASS = "0x0680"  # PCI class 06 (bridge), subclass 80 (other): NVSwitch
FM_COMM = "nv-fabricmanage"


def nvswitches(sysfs="/sys"):
    """PCI addresses of NVIDIA bridge-class devices (NVSwitches), sorted."""
    base = os.path.join(sysfs, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        try:
            with open(os.path.join(base, name, "vendor")) as f:
                vendor = f.read().strip().lower()
            with open(os.path.join(base, name, "class")) as f:
                cls = f.read().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and cls.startswith(BRIDGE_OTHER_CLASS):
            out.append(name)
    return out


def fabric_manager_pids(proc="/proc"):
    """PIDs whose comm is Fabric Manager's."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    pids = []
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(os.path.join(proc, e, "comm")) as f:
                if f.read().strip() == FM_COMM:
                    pids.append(int(e))
        except OSError:
            continue
    return sorted(pids)


def judge(switches, fm_pids, gpus):
    """[(finding, action)] for a board with ``switches`` (PCI addresses),
    Fabric Manager ``fm_pids`` and the system check's GPU records."""
    out = []
    if switches and not fm_pids:
        out.append(("%d NVSwitch(es) (%s) but Fabric Manager (nv-fabricmanager) is not running: no NVLink "
                    "peer-to-peer, CUDA fails with cudaErrorSystemNotReady; start nvidia-fabricmanager"
                    % (len(switches), ", ".join(switches[:4]) + (", ..." if len(switches) > 4 else "")),
                    actions.REBOOT_NODE))
    if not switches and len(gpus or []) < 2:
        # one GPU and no switch: nothing for the fabric to join (gpud skips the
        # fabric state there too: single-GPU H200 boxes report Not Supported)
        return out
    for g in gpus or []:
        fab = g.get("fabric") or {}
        state, status = fab.get("state"), fab.get("status")
        if state is None:
            continue  # no fabric on this GPU (N/A, Not Supported)
        if state.lower() != "completed" or (status and status.lower() != "success"):
            out.append(("GPU %s (%s): NVLink fabric state %s, status %s (Fabric Manager has not registered it)"
                        % (g.get("index"), g.get("bus_id"), state, status or "-"), actions.REBOOT_NODE))
    return out


def gpus_fabric(ctx):
    """Each GPU's index, bus id and NVLink fabric state: the system check's reading, or, when
    fabric runs without it (``--checks fabric``), ``nvidia-smi -q``'s own.  Without this a
    board whose switches are not visible read as "no NVSwitch" and the named check as n/a,
    though its GPUs' fabric was not Completed."""
    shared = ctx.shared.get("nvidia_smi")
    if shared is not None:
        return shared.get("gpus") or []
    smi_path = host.find_nvidia_smi()
    if smi_path is None:
        return []
    q = host.run_tool([smi_path, "-q"], timeout=120)
    if q["rc"] != 0:
        return []
    return [dict(smi_q_health(g), index=i) for i, g in enumerate(parse_smi_q(q["stdout"])["gpus"])]


def run(ctx, res, sysfs="/sys", proc="/proc"):
    switches = nvswitches(sysfs)
    pids = fabric_manager_pids(proc)
    gpus = gpus_fabric(ctx)
    fabric_gpus = [g for g in gpus if (g.get("fabric") or {}).get("state")]
    res.figures.update({"nvswitches": switches, "fabric_manager_pids": pids,
                        "gpu_fabric": [{"index": g.get("index"), "state": (g.get("fabric") or {}).get("state"),
                                        "status": (g.get("fabric") or {}).get("status")} for g in gpus]})
    if not switches and not fabric_gpus:
        res.summary = "no NVSwitch"
        res.waive("no NVSwitch on this board: Fabric Manager not needed", warning=False)
        return
    for what, action in judge(switches, pids, gpus):
        res.problem(what, action)
    joined = sum(1 for g in fabric_gpus if (g["fabric"]["state"] or "").lower() == "completed")
    if switches:
        res.summary = "%d NVSwitch(es), Fabric Manager %s, %d of %d GPU(s) in the NVLink fabric" % (
            len(switches), "pid %s" % ",".join(str(p) for p in pids) if pids else "not running", joined, len(gpus))
    else:  # a VM given the GPUs, not the switches: Fabric Manager runs on its host
        res.summary = "no NVSwitch seen here, %d of %d GPU(s) in the NVLink fabric" % (joined, len(gpus))
