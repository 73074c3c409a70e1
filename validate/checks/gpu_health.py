"""matmul and bandwidth: GPU health against the datasheet (validate/specs.py).

matmul: square GEMM TFLOPS (2*n^3 / median time) in fp32 with TF32 off, with
TF32 on, and in bf16, on every GPU; results checked for finiteness against a
small CPU product.  bandwidth: device-to-device copy (read + write bytes),
pinned host-to-device and device-to-host copy GB/s, on every GPU.  Each figure
is compared with the GPU model's spec where known; below ``--floor`` x spec is
a failure.  GPU 0's figures are the top-level ones (other GPUs: ``per_gpu``).
On the CPU (``--device cpu``, or auto without a GPU, which cannot pass) the
same measurements run on the CPU for reference, with no spec.
"""

import warnings

from .. import specs, timing

MATMUL_KEYS = ("fp32_tflops", "tf32_tflops", "bf16_tflops")
BANDWIDTH_KEYS = ("d2d_gbs", "h2d_gbs", "d2h_gbs")


def _set_tf32(torch, on):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = on


def _get_tf32(torch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.backends.cuda.matmul.allow_tf32


def _iters(ctx):
    return max(3, min(ctx.opts.iters, 50))


def _targets(torch, device):
    if device == "cuda":
        return [("cuda:%d" % i, torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]
    return [("cpu", "cpu")]


def _judge(res, label, measured, spec, keys, floor, unit):
    ratio = specs.ratios(measured, spec, keys)
    for k in keys:
        if k in ratio and ratio[k] < floor:
            res.problem("%s %s %.1f %s = %.2f of spec %.1f (floor %.2f)" % (
                label, k.split("_")[0], measured[k], unit, ratio[k], spec[k], floor))
    return ratio


def run_matmul(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    n = 8192 if device == "cuda" else 1024
    iters = _iters(ctx)
    warm = max(1, min(ctx.opts.warmup, 5))
    prev = _get_tf32(torch)
    per_gpu = []
    gen = torch.Generator().manual_seed(0)
    a_cpu = torch.randn(n, n, generator=gen)
    b_cpu = torch.randn(n, n, generator=gen)
    ref_block = a_cpu[:64].double() @ b_cpu[:, :64].double()
    try:
        for dev, name in _targets(torch, device):
            a = a_cpu.to(dev)
            b = b_cpu.to(dev)
            out = {"device": dev, "name": name, "n": n, "iters": iters}
            for key, dtype, tf32 in (("fp32_tflops", torch.float32, False),
                                     ("tf32_tflops", torch.float32, True),
                                     ("bf16_tflops", torch.bfloat16, False)):
                if key == "tf32_tflops" and device != "cuda":
                    out[key] = None  # TF32 is a tensor-core mode
                    continue
                _set_tf32(torch, tf32)
                x = a.to(dtype)
                y = b.to(dtype)
                ctx.progress("%s %s n=%d" % (name, key.split("_")[0], n))
                try:
                    st = timing.measure(lambda: torch.mm(x, y), warm, iters, dev)
                except RuntimeError as exc:  # e.g. bf16 unsupported on this GPU
                    out[key] = None
                    out[key.replace("tflops", "error")] = str(exc).splitlines()[0]
                    continue
                out[key] = 2.0 * n ** 3 / (st["median"] / 1e3) / 1e12
                out[key.replace("tflops", "iqr_rel")] = st["iqr_rel"]
                got = torch.mm(x[:64], y[:, :64]).double().cpu()
                err = float((got - ref_block).abs().max() / ref_block.abs().max())
                out[key.replace("tflops", "rel_error")] = err
                limit = 5e-2 if dtype == torch.bfloat16 or tf32 else 1e-4
                if not (err < limit):
                    res.problem("%s %s matmul wrong: rel. error %.2g" % (name, key.split("_")[0], err))
                del x, y
            per_gpu.append(out)
            del a, b
    finally:
        _set_tf32(torch, prev)
    first = per_gpu[0]
    spec_key, spec_all = specs.lookup(first["name"] if device == "cuda" else None)
    spec = dict((k, spec_all.get(k)) for k in MATMUL_KEYS) if spec_all else {}
    f = res.figures
    for k in MATMUL_KEYS:
        f[k] = first.get(k)
    f.update({"device": device, "gpu_name": first["name"] if device == "cuda" else None, "n": n,
              "spec_gpu": spec_key, "spec": spec, "floor": ctx.opts.floor, "per_gpu": per_gpu})
    ratio = {}
    for g in per_gpu:
        key, sp = specs.lookup(g["name"] if device == "cuda" else None)
        g["ratio"] = _judge(res, g["name"] if device == "cuda" else "cpu", g, sp, MATMUL_KEYS,
                            ctx.opts.floor, "TFLOPS") if sp else {}
        if g is first:
            ratio = g["ratio"]
    f["ratio"] = ratio
    for g in per_gpu:
        res.note("%s (%s): fp32 %s, tf32 %s, bf16 %s TFLOPS; of spec %s" % (
            g["name"], g["device"], _fmt(g.get("fp32_tflops")), _fmt(g.get("tf32_tflops")),
            _fmt(g.get("bf16_tflops")),
            ", ".join("%s %.2f" % (k.split("_")[0], v) for k, v in sorted(g["ratio"].items())) or "n/a"))
    if device == "cuda" and not spec:
        res.note("no datasheet figures for %s: measured, not judged" % first["name"])
    res.summary = "%s: fp32 %s, tf32 %s, bf16 %s TFLOPS%s" % (
        f["gpu_name"] or "cpu", _fmt(f["fp32_tflops"]), _fmt(f["tf32_tflops"]), _fmt(f["bf16_tflops"]),
        (" (%s of %s spec)" % ("/".join("%.2f" % ratio[k] for k in MATMUL_KEYS if k in ratio), spec_key))
        if ratio else "")


def _fmt(v):
    if v is None:
        return "-"
    return "%.1f" % v if abs(v) >= 10 else "%.3g" % v


def run_bandwidth(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    iters = _iters(ctx)
    warm = max(1, min(ctx.opts.warmup, 5))
    nbytes = (256 << 20) if device == "cuda" else (64 << 20)
    numel = nbytes // 4
    per_gpu = []
    for dev, name in _targets(torch, device):
        out = {"device": dev, "name": name, "bytes": nbytes, "iters": iters}
        src = torch.ones(numel, device=dev)
        dst = torch.empty(numel, device=dev)
        ctx.progress("%s copy %d MiB" % (name, nbytes >> 20))
        st = timing.measure(lambda: dst.copy_(src), warm, iters, dev)
        out["d2d_gbs"] = 2.0 * nbytes / (st["median"] / 1e3) / 1e9  # read + write
        out["d2d_iqr_rel"] = st["iqr_rel"]
        if device == "cuda":
            host = torch.ones(numel, pin_memory=True)
            back = torch.empty(numel, pin_memory=True)
            st = timing.measure(lambda: src.copy_(host, non_blocking=True), warm, iters, dev)
            out["h2d_gbs"] = nbytes / (st["median"] / 1e3) / 1e9
            out["h2d_iqr_rel"] = st["iqr_rel"]
            st = timing.measure(lambda: back.copy_(src, non_blocking=True), warm, iters, dev)
            torch.cuda.synchronize(dev)
            out["d2h_gbs"] = nbytes / (st["median"] / 1e3) / 1e9
            out["d2h_iqr_rel"] = st["iqr_rel"]
            if not bool(back[:1024].eq(1).all()):
                res.problem("%s: host copy came back wrong" % name)
            del host, back
        else:
            out["h2d_gbs"] = None
            out["d2h_gbs"] = None
        if not bool(dst[:1024].eq(1).all()):
            res.problem("%s: device copy came back wrong" % name)
        per_gpu.append(out)
        del src, dst
    first = per_gpu[0]
    spec_key, sp = specs.lookup(first["name"] if device == "cuda" else None)
    spec = {"d2d_gbs": sp["mem_gbs"], "h2d_gbs": sp["pcie_gbs"], "d2h_gbs": sp["pcie_gbs"]} if sp else {}
    f = res.figures
    for k in BANDWIDTH_KEYS:
        f[k] = first.get(k)
    f.update({"device": device, "gpu_name": first["name"] if device == "cuda" else None,
              "bytes": nbytes, "spec_gpu": spec_key, "spec": spec, "floor": ctx.opts.floor,
              "per_gpu": per_gpu})
    ratio = {}
    for g in per_gpu:
        key, s2 = specs.lookup(g["name"] if device == "cuda" else None)
        gspec = {"d2d_gbs": s2["mem_gbs"], "h2d_gbs": s2["pcie_gbs"], "d2h_gbs": s2["pcie_gbs"]} if s2 else {}
        g["ratio"] = _judge(res, g["name"], g, gspec, BANDWIDTH_KEYS, ctx.opts.floor, "GB/s") if gspec else {}
        if g is first:
            ratio = g["ratio"]
        res.note("%s (%s): d2d %s, h2d %s, d2h %s GB/s; of spec %s" % (
            g["name"], g["device"], _fmt(g.get("d2d_gbs")), _fmt(g.get("h2d_gbs")), _fmt(g.get("d2h_gbs")),
            ", ".join("%s %.2f" % (k.split("_")[0], v) for k, v in sorted(g["ratio"].items())) or "n/a"))
    f["ratio"] = ratio
    res.summary = "%s: d2d %s, h2d %s, d2h %s GB/s%s" % (
        f["gpu_name"] or "cpu", _fmt(f["d2d_gbs"]), _fmt(f["h2d_gbs"]), _fmt(f["d2h_gbs"]),
        (" (%s of %s spec)" % ("/".join("%.2f" % ratio[k] for k in BANDWIDTH_KEYS if k in ratio), spec_key))
        if ratio else "")
