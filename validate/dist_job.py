"""The multi-node job of ``gpuprov validate --distributed``: one process of
it per GPU (one per node on the CPU), started on every node by ``torchrun``
(remote/distributed/plan.py builds the command; the single-node ``nccl``
check's worker is validate/dist_worker.py).

``python3 -m validate.dist_job --stack`` prints the node's stack as one JSON
line (``@@stack {...}``): torch (its installed distribution's version, read
from its metadata as pip and ``importlib.metadata`` see it), CUDA and NCCL as
torch was built with them, the driver.  The control side compares them
across the nodes before any collective starts.

Under torchrun (``--run-token`` names the run: the cleanup finds our processes by
it), each rank:

1. joins the process group (gloo on the CPU, NCCL on GPUs; torchrun sets
   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT: docs.pytorch.org/docs/
   stable/elastic/run.html "Environment Variables"), and every node says so
   (``@@joined NODE``, one line per node's local rank 0);
2. all-reduces float32 tensors of growing sizes (x4 from 4 KiB up to
   ``--max-bytes``), timing each (the slowest rank's time), and checks one
   all-reduce with known values;
3. takes one training step of a seeded model on a seeded global batch, each
   rank its slice, gradients averaged by all-reduce as DistributedDataParallel
   does, and compares loss and gradients with one process's step on the
   whole global batch (rank 0 computes it);

and global rank 0 (on whichever node the rendezvous put it) prints one
``@@size {...}`` line per size, ``@@train {...}``, then ``@@result {...}``:
short lines, since ``srun --label`` breaks long ones.  Every line this prints starts
with ``@@`` so the control side reads nothing else of what torch prints.
"""

import argparse
import datetime
import json
import os
import socket
import sys
import time

# The training step's sizes (chosen: small enough for a second on a CPU, big
# enough that a rank with the wrong slice or a wrong reduction moves every
# figure far beyond the tolerance).
IN, HIDDEN, OUT = 16, 32, 4
PER_RANK = 8  # samples per rank; the global batch is PER_RANK * world
SEED = 1234
# float64 throughout the step: the distributed sum and the one-process sum
# add the same terms in another order, and reordering a sum of n terms moves
# it by at most about n * u * sum|x| (Higham, Accuracy and Stability of
# Numerical Algorithms, 2nd ed., 4.2), u = 2**-53 ~ 1.1e-16 for float64.  With
# n = a global batch of up to a few thousand that is below 1e-12 relative;
# RTOL = 1e-9 leaves three orders of margin, and a real fault (a rank's wrong
# slice, a dropped contribution) moves the figures by 1e-3 or more.  float64
# also keeps TF32 (which NCCL ranks on Ampere+ may use for float32 matmuls)
# out of the comparison.
RTOL = 1e-9
ATOL = 1e-12
FIRST_BYTES = 4 << 10
GROWTH = 4


def stack():
    """The node's stack, as the skew check compares it."""
    out = {"torch": None, "cuda": None, "nccl": None, "driver": None, "gpus": 0, "gpu_names": [],  # type: dict[str, object]
           "python": "%d.%d.%d" % sys.version_info[:3], "hostname": socket.gethostname()}
    try:
        from importlib import metadata  # Python 3.8+
        out["torch"] = metadata.version("torch")
    except Exception:
        pass
    try:
        import torch
        out["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            count = torch.cuda.device_count()
            out["gpus"] = count
            out["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(count)]
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    try:  # the kernel module's version line (docs.nvidia.com/deploy/driver-persistence)
        with open("/proc/driver/nvidia/version") as f:
            words = f.readline().split()
        out["driver"] = next((w for w in words if w[:1].isdigit() and "." in w), None)
    except OSError:
        pass
    return out


def sizes(max_bytes):
    """4 KiB, 16 KiB, ... up to max_bytes (which is always the last)."""
    out, n = [], FIRST_BYTES
    while n < max_bytes:
        out.append(n)
        n *= GROWTH
    out.append(max_bytes)
    return out


def busbw(nbytes, seconds, ranks):
    """nccl-tests' bus bandwidth (github.com/NVIDIA/nccl-tests doc/PERFORMANCE.md)."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2.0 * (ranks - 1) / ranks


def sweep(dist, torch, dev, max_bytes, iters, sync):
    rows = []
    world = dist.get_world_size()
    for nbytes in sizes(max_bytes):
        t = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)
        dist.all_reduce(t)  # warm-up
        sync()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            sync()
            times.append(time.perf_counter() - t0)
        times.sort()
        slowest = torch.tensor([times[len(times) // 2]], dtype=torch.float64, device=dev)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        seconds = float(slowest.item())
        algbw, bus = busbw(t.numel() * 4, seconds, world)
        rows.append({"bytes": t.numel() * 4, "median_s": seconds, "algbw_gbs": algbw,
                     "busbw_gbs": bus})
    t = torch.full((1024,), float(dist.get_rank() + 1), dtype=torch.float32, device=dev)
    dist.all_reduce(t)
    sync()
    wrong = int((t != world * (world + 1) / 2.0).sum().item())
    return rows, wrong


def model_and_batch(torch, dev, world):
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, OUT)).to(device=dev, dtype=torch.float64)
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(PER_RANK * world, IN, generator=g, dtype=torch.float64).to(dev)
    y = torch.randn(PER_RANK * world, OUT, generator=g, dtype=torch.float64).to(dev)
    return model, x, y


def train_step(dist, torch, dev):
    """The step on this rank's slice, gradients averaged across ranks; rank 0
    also takes the step on the whole batch and compares."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model, x, y = model_and_batch(torch, dev, world)
    lo, hi = rank * PER_RANK, (rank + 1) * PER_RANK
    loss = torch.nn.functional.mse_loss(model(x[lo:hi]), y[lo:hi])
    loss.backward()
    # equal slices: the mean of the ranks' means is the global mean (as DDP averages)
    grads = [p.grad.detach().clone() for p in model.parameters()]
    for gr in grads:
        dist.all_reduce(gr)
        gr /= world
    dist_loss = loss.detach().clone()
    dist.all_reduce(dist_loss)
    dist_loss /= world
    if rank != 0:
        return None
    ref, _, _ = model_and_batch(torch, dev, world)
    ref_loss = torch.nn.functional.mse_loss(ref(x), y)
    ref_loss.backward()
    worst, worst_rel = 0.0, 0.0
    ok = bool(torch.allclose(dist_loss, ref_loss.detach(), rtol=RTOL, atol=ATOL))
    for gr, p in zip(grads, ref.parameters()):
        diff = float((gr - p.grad).abs().max().item())
        worst = max(worst, diff)
        worst_rel = max(worst_rel, diff / max(float(p.grad.abs().max().item()), 1e-300))
        ok = ok and bool(torch.allclose(gr, p.grad, rtol=RTOL, atol=ATOL))
    return {"global_batch": PER_RANK * world, "seed": SEED, "dtype": "float64",
            "loss": float(dist_loss.item()), "reference_loss": float(ref_loss.item()),
            "loss_diff": abs(float(dist_loss.item()) - float(ref_loss.item())),
            "grad_max_abs_diff": worst, "grad_max_rel_diff": worst_rel,
            "rtol": RTOL, "atol": ATOL, "match": ok}


def say(tag, doc):
    sys.stdout.write("@@%s %s\n" % (tag, json.dumps(doc, sort_keys=True)))
    sys.stdout.flush()


def run(a):
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local == 0:  # torchrun starts the workers once the rendezvous completed
        say("started", {"node": a.host_name, "rank": int(os.environ.get("RANK", "-1")),
                        "master": "%s:%s" % (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))})
    gpu = a.backend == "nccl"
    dev = torch.device("cuda", local) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(dev)
    dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=a.collective_timeout))
    if local == 0:
        say("joined", {"node": a.host_name, "rank": dist.get_rank()})

    def sync():
        if gpu:
            torch.cuda.synchronize(dev)

    top = a.max_bytes
    if gpu:  # leave room for NCCL's own buffers, as the nccl check does
        top = min(top, max(FIRST_BYTES, torch.cuda.mem_get_info(dev)[0] // 2))
    rows, wrong = sweep(dist, torch, dev, top, a.iters, sync)
    step = train_step(dist, torch, dev)
    if dist.get_rank() == 0:  # short lines: srun --label breaks long ones
        for row in rows:
            say("size", row)
        say("train", step)
        say("result", {"backend": a.backend, "world": dist.get_world_size(),
                       "nodes": int(os.environ.get("GROUP_WORLD_SIZE", "0")) or None,
                       "sizes": len(rows), "wrong_elements": wrong})
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m validate.dist_job")
    p.add_argument("--stack", action="store_true")
    p.add_argument("--host-name", default="")
    p.add_argument("--run-token", default="")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--max-bytes", type=int, default=4 << 20)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--collective-timeout", type=float, default=60.0)
    a = p.parse_args(argv)
    if a.stack:
        say("stack", stack())
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
