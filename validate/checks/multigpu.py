"""p2p and nccl: the GPUs of one node talking to each other.

p2p: a bandwidth matrix of copies between every pair of GPUs (256 MiB,
CUDA events), each pair's link read from ``nvidia-smi topo -m``; NVLink
pairs are judged where a public floor exists (validate/expectations.py).
nccl: an all-reduce over all GPUs with torch.distributed, one process per
GPU (validate/dist_worker.py), bus bandwidth by nccl-tests' formula, judged
against the model's floor (validate/expectations.py) at its message size.  The same
orchestration runs on the CPU with the gloo backend and two processes, so it
is tested for real without a GPU.  On one GPU (a MIG slice included:
CUDA shows a process one slice) both are waived, with the reason: they do
not apply, and most cloud VMs have one GPU.  Floors are applied only when
every GPU is the SKU the floor is for (a mixed node has no reference).
"""

import json
import os
import socket
import subprocess
import sys

from .. import expectations, host, timing, topology

CPU_RANKS = 2
CPU_BYTES = 4 << 20
GPU_BYTES = 1 << 30
BIG_BYTES = 8 << 30


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _topo():
    smi = host.find_nvidia_smi()
    if not smi:
        return {}
    out = host.run_tool([smi, "topo", "-m"], timeout=60)
    return topology.parse_topo(out["stdout"]) if out["rc"] == 0 else {}


def node_sku(names):
    """The SKU key of a node whose GPUs are all the same model, else None
    (a floor for 8 H100s says nothing about an H100 next to an A100)."""
    keys = set(expectations.identify(n)[0] for n in names)
    return keys.pop() if len(keys) == 1 else None


def run_p2p(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    if ctx.device_mode == "cpu":
        res.waive("not applicable: --device cpu, no GPUs to copy between", warning=False)
        return
    if device != "cuda":  # --device auto without a GPU: ctx.device recorded the failure
        res.skip("no GPUs: nothing to copy between")
        return
    count = torch.cuda.device_count()
    if count < 2:
        res.waive("not applicable: one GPU, no peer to copy to", warning=False)
        return
    links = _topo()
    sku = node_sku([torch.cuda.get_device_name(i) for i in range(count)])
    floor = expectations.cell(sku, "p2p_gbs")
    nbytes = 256 << 20
    matrix = {}
    for i in range(count):
        src = torch.ones(nbytes // 4, device="cuda:%d" % i)
        for j in range(count):
            if i == j:
                continue
            dst = torch.empty(nbytes // 4, device="cuda:%d" % j)
            link = links.get((i, j))
            judged = floor if topology.link_class(link) == "nvlink" else None

            def once():
                st = timing.measure(lambda: dst.copy_(src, non_blocking=True), 2, 10, "cuda:%d" % i)
                torch.cuda.synchronize("cuda:%d" % j)
                return nbytes / (st["median"] / 1e3) / 1e9

            gbs, tries = timing.best_of(once, lambda v: judged is None or v >= judged["floor"])
            cell = {"gbs": gbs, "link": link, "can_access_peer": torch.cuda.can_device_access_peer(i, j),
                    "tries": tries}
            if not bool(dst.eq(1).all()):
                res.problem("GPU %d -> GPU %d: copy came back wrong" % (i, j))
            if topology.link_class(link) == "nvlink" and floor:
                cell["floor"] = floor["floor"]
                if expectations.verdict(floor, gbs)["verdict"] == "fail":
                    res.problem("GPU %d -> GPU %d over %s: %.1f GB/s below %.0f (best of %d tries; %s)"
                                % (i, j, link, gbs, floor["floor"], len(tries), floor["source"]))
            matrix["%d-%d" % (i, j)] = cell
            del dst
        del src
    res.figures.update({"gpus": count, "bytes": nbytes, "matrix": matrix, "sku": sku,
                        "nvlink_floor": floor["floor"] if floor else None})
    if not floor:
        res.warn("no public P2P floor for %s: matrix measured, not judged" % (sku or "a mixed or unknown node"))
    for key, cell in sorted(matrix.items()):
        res.note("GPU %s: %.1f GB/s over %s" % (key.replace("-", " -> GPU "), cell["gbs"], cell["link"] or "?"))
    speeds = [c["gbs"] for c in matrix.values()]
    res.summary = "%d GPUs, %d pairs: %.1f-%.1f GB/s%s" % (count, len(matrix), min(speeds), max(speeds),
                                                          "" if floor else " (no reference)")


def run_collective(ctx, backend, ranks, nbytes, iters=5, warmup=2, timeout=600):
    """Start ``ranks`` worker processes; rank 0's JSON figures, or raise."""
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    init = "tcp://127.0.0.1:%d" % _free_port()
    procs = []
    for r in range(ranks):
        argv = [sys.executable, "-m", "validate.dist_worker", "--rank", str(r), "--world", str(ranks),
                "--backend", backend, "--init", init, "--bytes", str(nbytes), "--iters", str(iters),
                "--warmup", str(warmup)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      universal_newlines=True, env=env,
                                      # from a zip (validate/resources.py) there is no folder
                                      cwd=pkg_root if os.path.isdir(pkg_root) else None))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [(r, p.returncode, outs[r][1].strip().splitlines()[-1:] if r < len(outs) else [])
              for r, p in enumerate(procs) if p.returncode != 0]
    if failed:
        raise RuntimeError("; ".join("rank %d exit %s: %s" % (r, rc, " ".join(err)) for r, rc, err in failed))
    return json.loads(outs[0][0].strip().splitlines()[-1])


def run_nccl(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    if device == "cuda":
        ranks = torch.cuda.device_count()
        if ranks < 2:
            res.waive("not applicable: one GPU, no all-reduce to measure", warning=False)
            return
        sku = node_sku([torch.cuda.get_device_name(i) for i in range(ranks)])
        floor = expectations.cell(sku, "nccl_busbw_gbs")
        floor = floor if floor and floor.get("gpus") in (None, ranks) else None
        # NCCL reaches its peak only at several GiB (nccl-tests#212); the sources measure
        # 8 GPUs at 8-16 GiB (AzNHC 16G, AzBench 8G): so does a node without a floor
        nbytes = floor["bytes"] if floor else BIG_BYTES if ranks >= 8 else GPU_BYTES
        free = min(torch.cuda.mem_get_info(i)[0] for i in range(ranks))
        if nbytes > free // 2:  # keep room for NCCL's own buffers
            nbytes, floor = GPU_BYTES, None
        backend = "nccl"
    else:
        ranks, nbytes, backend, sku, floor = CPU_RANKS, CPU_BYTES, "gloo", None, None
    ctx.progress("all-reduce %d MiB, %s, %d processes" % (nbytes >> 20, backend, ranks))
    runs = []

    def once():
        runs.append(run_collective(ctx, backend, ranks, nbytes))
        return topology.busbw_allreduce(runs[-1]["bytes"], runs[-1]["median_s"], ranks)[1]

    best, tries = timing.best_of(once, lambda v: floor is None or v >= floor["floor"])
    got = runs[tries.index(best)]
    got["tries"] = tries
    algbw, busbw = topology.busbw_allreduce(got["bytes"], got["median_s"], ranks)
    judged = expectations.judge_allreduce(sku, busbw, got["bytes"], ranks) if floor else None
    got.update({"algbw_gbs": algbw, "busbw_gbs": busbw, "sku": sku,
                "floor_gbs": floor["floor"] if floor else None, "floor_source": floor["source"] if floor else None})
    res.figures.update(got)
    if got["wrong_elements"]:
        res.problem("all-reduce result wrong in %d elements" % got["wrong_elements"])
    if judged and judged["verdict"] == "fail":
        res.problem("all-reduce busbw %.1f GB/s below %.0f (best of %d tries; %s, %d GiB)"
                    % (busbw, floor["floor"], len(tries), floor["source"], nbytes >> 30))
    if backend == "nccl" and not floor:
        res.warn("no public all-reduce floor for %s x%d at %d MiB: busbw measured, not judged"
                 % (sku or "a mixed or unknown node", ranks, nbytes >> 20))
    res.summary = "%s, %d ranks, %d MiB: busbw %.2f GB/s (algbw %.2f)%s" % (
        backend, ranks, nbytes >> 20, busbw, algbw,
        "" if floor or backend == "gloo" else "; no reference for %s x%d" % (sku, ranks))
