"""One rank of the nccl check: ``python3 -m validate.dist_worker`` (started
by validate/checks/multigpu.py, one process per GPU, or two on the CPU with
gloo).  Times an in-place all-reduce, then checks one with known values, and
rank 0 writes a JSON line with the figures to stdout."""

import argparse
import json
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--init", required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args(argv)
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", a.rank) if a.backend == "nccl" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(a.backend, init_method=a.init, rank=a.rank, world_size=a.world)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    t = torch.ones(a.bytes // 4, dtype=torch.float32, device=dev)
    for _ in range(a.warmup):
        dist.all_reduce(t)
    sync()
    dist.barrier()
    times = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        sync()
        times.append(time.perf_counter() - t0)
    # correctness: rank r contributes r+1 everywhere; the sum is n(n+1)/2
    t.fill_(a.rank + 1)
    dist.all_reduce(t)
    sync()
    expect = a.world * (a.world + 1) / 2.0
    wrong = int((t != expect).sum())
    worst = max(times)
    worst_t = torch.tensor([worst], dtype=torch.float64, device=dev)
    dist.all_reduce(worst_t, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    wrong_t = torch.tensor([wrong], dtype=torch.int64, device=dev)
    dist.all_reduce(wrong_t)
    times.sort()
    if a.rank == 0:
        sys.stdout.write(json.dumps({"backend": a.backend, "world": a.world, "bytes": a.bytes,
                                     "median_s": times[len(times) // 2], "max_s": float(worst_t.item()),
                                     "wrong_elements": int(wrong_t.item()), "iters": a.iters}) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
