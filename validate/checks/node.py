"""node: the node against its inventory profile (``--profile``): GPU count and
model, and each GPU's PCIe link generation and width (validate/profile.py).

A node that does not match fails naming the gap ("expected 8 x NVIDIA H100
80GB HBM3, found 7").  Actions: fewer GPUs than expected is reboot the node
(a GPU fell off the bus or did not initialise: NVIDIA's Xid catalog, Xid 79
RESTART_BM, as the system check's --expect-gpus); a PCIe link whose maximum
is below the profile's is the slot, riser or card, drain and replace, as a
link trained below its maximum (validate/specs.py link_downtrained); another
model than expected names no action (the wrong machine, not a sick one).
Without a profile the check does not apply and is waived.
"""

from .. import host, profile
from .. import smi as smi_mod

FIELDS = ["index", "name", "pci.bus_id", "pci.device_id", "pci.sub_device_id",
          "pcie.link.gen.max", "pcie.link.width.max"]


def gpu_rows():
    """nvidia-smi's typed rows for the fields the profile is judged on (fields a
    driver does not know are dropped); None without an answering nvidia-smi."""
    smi = host.find_nvidia_smi()
    if not smi:
        return None
    rows, _, err = host.query_gpus(smi, FIELDS, timeout=60)
    return None if err or rows is None else smi_mod.typed_gpu_rows(rows)


def run(ctx, res):
    prof = ctx.profile
    if not profile.judges_node(prof):
        res.waive("not applicable: no node profile with gpus or pcie (--profile)", warning=False)
        return
    rows = gpu_rows()
    if rows is None:
        res.problem("nvidia-smi not found or not answering: the node cannot be held against its profile")
        return
    res.figures.update({"expected": {"gpus": prof["gpus"], "pcie": prof["pcie"]},
                        "found": {"count": len(rows), "names": sorted(set(r.get("name") or "?" for r in rows))}})
    for gap, action in profile.node_gaps(prof, rows):
        res.problem(gap, action)
    res.summary = "%d x %s%s" % (len(rows), "/".join(res.figures["found"]["names"]) or "no GPU",
                                 "; as the profile says" if not res.problems else "")
