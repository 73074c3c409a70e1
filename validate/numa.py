"""Where a GPU sits: its NUMA node, and binding the process to that node's CPUs.

Host copies are measured the way the sources measure them: OCI's gpu_bw_test.py
runs bandwidthTest under ``numactl`` bound to the GPU's node, and a D2H copy
from the far node can fall to half (shared/research/sku-expectations.md 5.:
Voltage Park 46.8 -> 20.5 GB/s; Azure's A100 D2H 6.27 GB/s).  The process is
bound to the node's CPUs (``/sys/bus/pci/devices/<bdf>/numa_node``, then
``/sys/devices/system/node/node<N>/cpulist``) before the host buffer is pinned,
so the kernel's first-touch policy places it in that node's memory.  A
numa_node of -1 is the kernel saying it has no NUMA information for the
device (one node, or firmware without SRAT/_PXM: a VM): nothing to bind, and
the result says so.
"""

import contextlib
import os


def bdf(props):
    """The PCI address of a torch device's properties: '0000:18:00.0'."""
    return "%04x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)


def parse_cpulist(text):
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    cpus = set()  # type: set[int]
    for part in filter(None, (text or "").strip().split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def placement(address, root="/sys"):
    """{"bus", "node", "cpus" (a set, or None), "note"} of the device at ``address``."""
    raw = _read(os.path.join(root, "bus", "pci", "devices", address.lower(), "numa_node"))
    try:
        node = int(raw) if raw is not None else None
    except ValueError:
        node = None
    out = {"bus": address.lower(), "node": node, "cpus": None, "note": None}
    if node is None:
        out["note"] = "NUMA node not readable (%s/bus/pci/devices/%s/numa_node): not bound" % (root, address)
    elif node < 0:
        out["note"] = "no NUMA info (numa_node %d: one node, or firmware without it, as in many VMs): not bound" % node
    else:
        try:
            listed = parse_cpulist(_read(os.path.join(root, "devices", "system", "node", "node%d" % node, "cpulist")))
        except ValueError:
            listed = set()
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else listed
        out["cpus"] = listed & allowed or None
        out["note"] = ("bound to NUMA node %d (%d CPUs)" % (node, len(out["cpus"])) if out["cpus"]
                       else "NUMA node %d has no CPU this process may use: not bound" % node)
    return out


@contextlib.contextmanager
def bound(place):
    """Run the block on ``place``'s CPUs (when it has any), then restore the affinity."""
    if not place.get("cpus") or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, place["cpus"])
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
