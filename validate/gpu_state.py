"""One GPU's state, from nvidia-smi: the health facts of its ``-q`` section (``smi_q_health``),
the record that merges them with the ``--query-gpu`` values (``gpu_record``), and the judgement
of that record (``assess_gpu``: problems and warnings, each with the operator's action).

Standard library only.
"""

from __future__ import annotations

from typing import Any

from . import actions
from .smi import BAD_THROTTLE, decode_throttle, to_bool, to_number, to_str


def _section(tree: dict[str, Any], *names: str) -> dict[str, Any] | None:
    for name in names:
        node = tree.get(name)
        if isinstance(node, dict):
            return node
    return None


def _remapped_rows(gpu: dict[str, Any]) -> dict[str, Any] | None:
    rr = _section(gpu, "Remapped Rows")
    if rr is None:
        return None
    return {
        "correctable": to_number(rr.get("Correctable Error")),
        "uncorrectable": to_number(rr.get("Uncorrectable Error")),
        "pending": to_bool(rr.get("Pending")),
        "failure": to_bool(rr.get("Remapping Failure Occurred")),
    }


def _count(value: Any) -> Any:
    """A retired-pages cause: its value, or the "Count" some drivers nest under it."""
    return value.get("Count") if isinstance(value, dict) else value


def _retired_pages(gpu: dict[str, Any]) -> dict[str, Any] | None:
    rp = _section(gpu, "Retired Pages")
    if rp is None:
        return None
    return {
        "single_bit": to_number(_count(rp.get("Single Bit ECC"))),
        "double_bit": to_number(_count(rp.get("Double Bit ECC"))),
        "pending": to_bool(rp.get("Pending Page Blacklist", rp.get("Pending Page Retirement"))),
    }


def _uncorrected(key: str, val: Any) -> int | float | None:
    """One volatile ECC entry's uncorrected count (double bit, or "uncorrectable"), else None."""
    if isinstance(val, dict) and key.lower().startswith("double bit"):
        return to_number(val.get("Total"))
    if isinstance(val, str) and "uncorrectable" in key.lower():
        return to_number(val)
    return None


def _ecc_uncorrected_volatile(gpu: dict[str, Any]) -> int | float | None:
    ecc = _section(gpu, "ECC Errors")
    vol = _section(ecc, "Volatile") if ecc is not None else None
    if vol is None:
        return None
    counts = [v for v in (_uncorrected(key, val) for key, val in vol.items()) if v is not None]
    return sum(counts) if counts else None


def _ecc_mode(gpu: dict[str, Any]) -> bool | None:
    mode = _section(gpu, "ECC Mode")
    return to_bool(mode.get("Current")) if mode else None


# nvidia-smi -q's clock event (throttle) reasons, lower case -> ours
THROTTLE_NAMES = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clock_setting",
}


def _throttle_active(gpu: dict[str, Any]) -> list[str] | None:
    thr = _section(gpu, "Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Throttle Reasons #2")
    if thr is None:
        return None
    return [THROTTLE_NAMES[key.lower()] for key, val in thr.items()
            if THROTTLE_NAMES.get(key.lower()) and isinstance(val, str) and to_bool(val)]


def _pcie(gpu: dict[str, Any]) -> dict[str, Any] | None:
    pci = _section(gpu, "PCI")
    link = _section(pci, "GPU Link Info") if pci else None
    if link is None:
        return None
    gen = _section(link, "PCIe Generation") or {}
    width = _section(link, "Link Width") or {}
    return {
        "gen_current": to_number(gen.get("Current")),
        "gen_max": to_number(gen.get("Max")),
        "width_current": to_number(width.get("Current")),
        "width_max": to_number(width.get("Max")),
    }


def _fabric(gpu: dict[str, Any]) -> dict[str, Any] | None:
    """Hopper and newer on an NVSwitch board: State Not Started / In Progress / Completed,
    Status Success or an error; "N/A" / "Not Supported" elsewhere (gpud
    components/accelerator/nvidia/fabric-manager: single-GPU H200 boxes report "Not Supported")."""
    fabric = _section(gpu, "Fabric")
    if fabric is None:
        return None
    return {"state": to_str(fabric.get("State")), "status": to_str(fabric.get("Status"))}


# smi_q_health's facts, in the record's order: each read from one GPU's -q tree (None: no section)
HEALTH_FACTS = (
    ("remapped_rows", _remapped_rows),
    ("retired_pages", _retired_pages),
    ("ecc_uncorrected_volatile", _ecc_uncorrected_volatile),
    ("ecc_mode", _ecc_mode),
    ("throttle_active", _throttle_active),
    ("pcie", _pcie),
    ("fabric", _fabric),
)


def smi_q_health(gpu: dict[str, Any]) -> dict[str, Any]:
    """Health facts from one GPU of ``parse_smi_q``: remapped rows, retired
    pages, ECC uncorrected counts, clock event (throttle) reasons, PCIe link."""
    out: dict[str, Any] = {"bus_id": gpu.get("_bus_id"), "name": to_str(gpu.get("Product Name"))}
    for key, read in HEALTH_FACTS:
        out[key] = read(gpu)
    return out


def gpu_record(t: dict[str, Any], q: dict[str, Any] | None) -> dict[str, Any]:
    """One GPU's figures from typed query values ``t`` and -q health ``q``."""
    mask = t.get("clocks_throttle_reasons.active")
    if mask is None:
        mask = t.get("clocks_event_reasons.active")
    active = decode_throttle(mask)
    if active is None and q is not None:
        active = q.get("throttle_active")
    rec: dict[str, Any] = {
        "index": t.get("index"),
        "name": t.get("name"),
        "uuid": t.get("uuid"),
        "bus_id": t.get("pci.bus_id"),
        "driver_version": t.get("driver_version"),
        "vbios": t.get("vbios_version"),
        "compute_cap": t.get("compute_cap"),
        "memory_total_mib": t.get("memory.total"),
        "memory_used_mib": t.get("memory.used"),
        "persistence_mode": t.get("persistence_mode"),
        "compute_mode": t.get("compute_mode"),
        "mig_mode": t.get("mig.mode.current"),
        "pstate": t.get("pstate"),
        "temperature_c": t.get("temperature.gpu"),
        "power_draw_w": t.get("power.draw"),
        "power_limit_w": t.get("power.limit"),
        "clocks_mhz": {
            "sm": t.get("clocks.sm"),
            "sm_max": t.get("clocks.max.sm"),
            "mem": t.get("clocks.mem"),
            "mem_max": t.get("clocks.max.mem"),
        },
        "pcie": {
            "gen_current": t.get("pcie.link.gen.current"),
            "gen_max": t.get("pcie.link.gen.max"),
            "width_current": t.get("pcie.link.width.current"),
            "width_max": t.get("pcie.link.width.max"),
        },
        "ecc": {
            "mode": t.get("ecc.mode.current"),
            "uncorrected_volatile": t.get("ecc.errors.uncorrected.volatile.total"),
            "uncorrected_aggregate": t.get("ecc.errors.uncorrected.aggregate.total"),
        },
        "retired_pages": {
            "single_bit": t.get("retired_pages.single_bit_ecc.count"),
            "double_bit": t.get("retired_pages.double_bit.count"),
            "pending": t.get("retired_pages.pending"),
        },
        "remapped_rows": {
            "correctable": t.get("remapped_rows.correctable"),
            "uncorrectable": t.get("remapped_rows.uncorrectable"),
            "pending": t.get("remapped_rows.pending"),
            "failure": t.get("remapped_rows.failure"),
        },
        "throttle": {"mask": mask, "active": active},
        "fabric": q.get("fabric") if q is not None else None,
    }
    if q is not None:  # fill what the CSV query could not give from -q; a count or a
        # pending flag either reading reports counts (the two are read moments apart)
        for key in ("remapped_rows", "retired_pages"):
            for k, v in (q.get(key) or {}).items():
                if v and not rec[key].get(k):
                    rec[key][k] = v
                elif rec[key].get(k) is None:
                    rec[key][k] = v
        if rec["ecc"]["uncorrected_volatile"] is None:
            rec["ecc"]["uncorrected_volatile"] = q.get("ecc_uncorrected_volatile")
        if rec["ecc"]["mode"] is None:
            rec["ecc"]["mode"] = q.get("ecc_mode")
        if q.get("pcie") and rec["pcie"]["width_max"] is None:
            rec["pcie"] = q["pcie"]
    return rec


def assess_gpu(rec: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(problems, warnings) for one GPU record: lists of (message, action).

    Actions (validate/actions.py), from docs.nvidia.com/deploy/
    a100-gpu-mem-error-mgmt "Error Recovery and Response Flags":
    uncorrected (double-bit) ECC errors since boot are fixed by the next GPU
    reset, a pending page retirement (pre-Ampere) likewise; a pending row
    remap too ("row-remapping will happen at the next GPU reset"), but "new
    workloads can be launched" meanwhile: a warning whose action is reset the
    GPU, deferred (validate/actions.py ``deferred``), not a problem; a row
    remapping failure is an RMA case ("RMA Policy Thresholds for
    Row-Remapping").  Lifetime (aggregate) uncorrected errors and retired
    pages are history the remapping already handled: warnings, action none.
    At idle, a link below its maximum width and HW slowdown are hints
    (warnings, action none): they are judged under load, where they fail
    as drain and replace (RMA), by ``bandwidth`` and ``stress``."""
    problems: list[tuple[str, str]] = []
    warnings: list[tuple[str, str]] = []
    label = "GPU %s" % rec.get("index")
    ecc = rec["ecc"]
    if ecc.get("uncorrected_volatile"):
        problems.append(("%s: %d uncorrected ECC errors since boot" % (label, ecc["uncorrected_volatile"]),
                         actions.RESET_GPU))
    rr = rec["remapped_rows"]
    if rr.get("pending"):
        warnings.append(("%s: row remapping pending, a GPU reset activates it" % label, actions.RESET_GPU))
    if rr.get("failure"):
        problems.append(("%s: row remapping failure occurred" % label, actions.DRAIN_RMA))
    rp = rec["retired_pages"]
    if rp.get("pending"):
        problems.append(("%s: page retirement pending" % label, actions.RESET_GPU))
    if rp.get("double_bit"):
        warnings.append(("%s: %d pages retired for double-bit ECC errors" % (label, rp["double_bit"]), actions.NONE))
    if ecc.get("uncorrected_aggregate"):
        warnings.append(("%s: %d uncorrected ECC errors over its lifetime" % (label, ecc["uncorrected_aggregate"]),
                         actions.NONE))
    if ecc.get("mode") is False:
        warnings.append(("%s: ECC disabled" % label, actions.NONE))
    pcie = rec["pcie"]
    if pcie.get("width_current") and pcie.get("width_max") and pcie["width_current"] < pcie["width_max"]:
        warnings.append(("%s: PCIe link x%d of x%d" % (label, pcie["width_current"], pcie["width_max"]),
                         actions.NONE))
    bad = [r for r in (rec["throttle"].get("active") or []) if r in BAD_THROTTLE]
    if bad:
        warnings.append(("%s: clocks held back by %s" % (label, ", ".join(bad)), actions.NONE))
    if rec.get("persistence_mode") is False:
        warnings.append(("%s: persistence mode off" % label, actions.NONE))
    return problems, warnings
