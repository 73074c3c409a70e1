"""Pinned host<->device copy GB/s from each NUMA node's CPUs and memory, the way
AzNHC's check_gpu_bw and NVIDIA's nvbandwidth measure it (issue 32: "measure as
the sources do").  The host buffer is pinned after the process is bound to one
node's CPUs, so first touch places it in that node's memory.

    python3 bench/gpu/numa_copy.py [MIB] [ITERS]   -> one JSON document on stdout
"""

import json
import os
import sys

import torch


def node_cpus(node):
    with open("/sys/devices/system/node/node%d/cpulist" % node) as f:
        spec = f.read().strip()
    cpus = set()
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def gpu_numa_node(dev):
    p = torch.cuda.get_device_properties(dev)
    bus = "%04x:%02x:%02x.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
    try:
        with open("/sys/bus/pci/devices/%s/numa_node" % bus.lower()) as f:
            return bus, int(f.read())
    except OSError:
        return bus, None


def time_copy(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    nbytes = mib << 20
    nodes = sorted(int(n[4:]) for n in os.listdir("/sys/devices/system/node") if n[4:].isdigit())
    out = {"mib": mib, "iters": iters, "nodes": nodes, "gpus": []}
    for dev in range(torch.cuda.device_count()):
        torch.cuda.set_device(dev)
        bus, local = gpu_numa_node(dev)
        gpu = {"device": dev, "name": torch.cuda.get_device_name(dev), "bus": bus, "numa_node": local, "from": []}
        dbuf = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        for node in nodes:
            os.sched_setaffinity(0, node_cpus(node))
            host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
            host.fill_(1)
            h2d = time_copy(lambda d=dbuf, h=host: d.copy_(h, non_blocking=True), iters)
            d2h = time_copy(lambda d=dbuf, h=host: h.copy_(d, non_blocking=True), iters)
            gpu["from"].append({"node": node, "local": node == local,
                                "h2d_gbs": round(nbytes / (h2d / 1e3) / 1e9, 2),
                                "d2h_gbs": round(nbytes / (d2h / 1e3) / 1e9, 2)})
            del host
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        out["gpus"].append(gpu)
        del dbuf
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
