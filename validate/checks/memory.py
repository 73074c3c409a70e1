"""memory: write and verify patterns over most of each GPU's free memory.

As DCGM's memory diagnostic does (write patterns, read back, count
mismatches): all zeros, all ones, 0xAAAAAAAA, 0x55555555 and each word's own
index (catches address faults), over int32 chunks of 256 MiB filling
``MEMORY_FRACTION`` of the free framebuffer (0.9: our choice, unsourced;
the rest is left for the CUDA context and fragmentation).  Errors are
reported with the GPU index, the pattern and the first bad word's offset.
On the CPU (CI, or no GPU) a 16 MiB buffer runs the same code.
"""

from .. import actions

MEMORY_FRACTION = 0.9
CHUNK_BYTES = 256 << 20
CPU_BYTES = 16 << 20
PATTERNS = (("zeros", 0), ("ones", -1), ("0xAAAAAAAA", -0x55555556), ("0x55555555", 0x55555555), ("address", None))


def scan(torch, chunks, after_write=None):
    """[(pattern, chunk index, bad words, first bad offset in bytes)] for the
    chunks (int32 tensors).  ``after_write(chunk_index, chunk)`` runs between
    writing and verifying (tests use it to stand in for a bad cell)."""
    errors = []
    for name, value in PATTERNS:
        for i, c in enumerate(chunks):
            if value is None:
                expect = torch.arange(c.numel(), dtype=torch.int32, device=c.device)
                c.copy_(expect)
            else:
                expect = None
                c.fill_(value)
            if after_write is not None:
                after_write(i, c)
            wrong = (c != expect) if expect is not None else (c != value)
            count = int(wrong.sum())
            if count:
                first = int(wrong.nonzero()[0, 0]) * 4
                errors.append((name, i, count, first))
            del expect, wrong
    return errors


def allocate(torch, dev, nbytes):
    chunks = []
    left = nbytes
    while left >= 4:
        size = min(CHUNK_BYTES, left)
        try:
            chunks.append(torch.empty(size // 4, dtype=torch.int32, device=dev))
        except RuntimeError:  # fragmentation: test what we got
            break
        left -= size
    return chunks


def run(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    per_gpu = []
    devs = ["cuda:%d" % i for i in range(torch.cuda.device_count())] if device == "cuda" else ["cpu"]
    for dev in devs:
        if dev == "cpu":
            want = CPU_BYTES
        else:
            free, _ = torch.cuda.mem_get_info(torch.device(dev))
            want = int(free * MEMORY_FRACTION)
        chunks = allocate(torch, dev, want)
        tested = sum(c.numel() * 4 for c in chunks)
        ctx.progress("%s: %d patterns over %.2f GiB" % (dev, len(PATTERNS), tested / 2.0 ** 30))
        errors = scan(torch, chunks)
        if dev != "cpu":
            torch.cuda.synchronize(torch.device(dev))
        del chunks
        label = "GPU %s" % dev.split(":")[-1] if dev != "cpu" else "cpu"
        for name, i, count, first in errors:
            res.problem("%s: %d bad words with pattern %s in chunk %d, first at byte %d of the chunk"
                        % (label, count, name, i, first), actions.DRAIN_RMA)
        per_gpu.append({"device": dev, "bytes_tested": tested, "requested": want, "errors": len(errors)})
        res.note("%s: %.2f GiB tested, %d pattern errors" % (label, tested / 2.0 ** 30, len(errors)))
    res.figures.update({"device": device, "patterns": [p for p, _ in PATTERNS], "per_gpu": per_gpu,
                        "fraction_of_free": MEMORY_FRACTION if device == "cuda" else None})
    res.summary = ", ".join("%s %.2f GiB" % (g["device"], g["bytes_tested"] / 2.0 ** 30) for g in per_gpu)
