"""precision: what lower precision costs in accuracy and buys in speed.

* int8: per-tensor affine uint8 quantize/dequantize written out here
  (scale = (max-min)/255, zero point clamped to [0, 255], round-to-nearest),
  checked against its own error bound (|x - dq(q(x))| <= scale/2) and against
  torch.quantize_per_tensor with the same parameters.
* AMP: a randomly initialised ResNet18 (batch 8 on the GPU, 2 on the CPU) in fp32 vs autocast (fp16 on
  CUDA, bf16 on the CPU): relative error of the logits, top-1 agreement, and
  both timed with the shared timer.
* dynamic int8: an MLP (1024-4096-4096-1000) in fp32 vs
  torch.ao.quantization.quantize_dynamic (int8 weights, CPU kernels): relative
  error and CPU time.
Optional check; a missing GPU in GPU mode fails it (CPU figures are kept).
"""

import warnings

from .. import timing

AMP_TOL = {"float16": 2e-2, "bfloat16": 6e-2}
INT8_MLP_TOL = 5e-2


def qparams(x):
    lo = min(float(x.min()), 0.0)
    hi = max(float(x.max()), 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    zero = int(min(255, max(0, round(-lo / scale))))
    return scale, zero


def quantize(torch, x, scale, zero):
    return torch.clamp(torch.round(x / scale) + zero, 0, 255).to(torch.uint8)


def dequantize(torch, q, scale, zero):
    return (q.to(torch.float32) - zero) * scale


def _rel(torch, got, ref):
    return float(torch.linalg.vector_norm((got.float() - ref.float())) / torch.linalg.vector_norm(ref.float()))


def _int8_qdq(ctx, res, torch, device, gen):
    """int8 quantize / dequantize against its error bound and torch's own codes."""
    opts = ctx.opts
    ctx.progress("int8 quantize/dequantize on %s" % device)
    x = torch.randn(1 << 20, generator=gen).to(device) * 3.0
    scale, zero = qparams(x)
    q = quantize(torch, x, scale, zero)
    dq = dequantize(torch, q, scale, zero)
    err = float((x - dq).abs().max())
    bound = scale / 2.0 * (1 + 1e-4) + 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated in torch >= 2.12
        ref = torch.quantize_per_tensor(x.cpu(), scale, zero, torch.quint8)
    same = float((ref.int_repr().to(device) == q).float().mean())
    t_own = timing.measure(lambda: dequantize(torch, quantize(torch, x, scale, zero), scale, zero),
                           opts.warmup, opts.iters, device)
    res.figures["int8_qdq"] = {"elements": x.numel(), "scale": scale, "zero_point": zero, "max_abs_error": err,
                               "error_bound": bound, "agree_with_torch": same, "qdq_ms": t_own["median"]}
    res.note("int8 q/dq of 2^20 values: scale %.5f, zero point %d, max error %.5f (bound %.5f), "
             "%.4f%% codes equal to torch.quantize_per_tensor, %.3f ms" % (
                 scale, zero, err, bound, 100 * same, t_own["median"]))
    if err > bound:
        res.problem("int8 quantize/dequantize error %.5f exceeds scale/2 = %.5f" % (err, bound))
    if same < 0.999:  # only rounding ties may differ
        res.problem("int8 codes differ from torch.quantize_per_tensor on %.3f%% of values" % (100 * (1 - same)))
    return err, bound


def _amp(ctx, res, torch, tv, device, gen):
    """AMP against fp32 on a ResNet18: its error and its speed-up."""
    opts = ctx.opts
    ctx.progress("AMP vs fp32, resnet18 on %s" % device)
    torch.manual_seed(0)
    model = tv.models.resnet18(weights=None).eval().to(device)
    nb = 8 if device == "cuda" else 2
    batch = torch.randn(nb, 3, 224, 224, generator=gen).to(device)
    amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
    dname = "float16" if device == "cuda" else "bfloat16"
    with torch.inference_mode():
        ref_out = model(batch)
        with torch.autocast(device, dtype=amp_dtype):
            amp_out = model(batch)
        t32 = timing.measure(lambda: model(batch), opts.warmup, opts.iters, device)
        with torch.autocast(device, dtype=amp_dtype):
            tamp = timing.measure(lambda: model(batch), opts.warmup, opts.iters, device)
    rel = _rel(torch, amp_out, ref_out)
    top1 = float((amp_out.float().argmax(1) == ref_out.argmax(1)).float().mean())
    res.figures["amp"] = {"model": "resnet18", "batch": nb, "dtype": dname, "rel_error": rel,
                          "top1_agreement": top1, "fp32_ms": t32["median"], "amp_ms": tamp["median"],
                          "speedup": t32["median"] / tamp["median"], "tolerance": AMP_TOL[dname]}
    res.note("AMP (%s) ResNet18 batch %d: rel. error %.3g, top-1 agreement %.0f%%, fp32 %.2f ms, AMP %.2f ms (%.2fx)"
             % (dname, nb, rel, 100 * top1, t32["median"], tamp["median"], t32["median"] / tamp["median"]))
    if rel > AMP_TOL[dname]:
        res.problem("AMP %s output rel. error %.3g > %g" % (dname, rel, AMP_TOL[dname]))
    return dname, rel


def _int8_dynamic(ctx, res, torch, gen):
    """A dynamically quantized int8 MLP on the CPU (skipped when this build lacks the kernels)."""
    opts = ctx.opts
    f = res.figures
    ctx.progress("dynamic int8 MLP on cpu")
    nn = torch.nn
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                        nn.Linear(4096, 1000)).eval()
    inp = torch.randn(16, 1024, generator=gen)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            qmlp = quantize_dynamic(mlp, {nn.Linear}, dtype=torch.qint8)
        with torch.inference_mode():
            r32 = mlp(inp)
            r8 = qmlp(inp)
            m32 = timing.measure(lambda: mlp(inp), opts.warmup, opts.iters, "cpu")
            m8 = timing.measure(lambda: qmlp(inp), opts.warmup, opts.iters, "cpu")
        rel8 = _rel(torch, r8, r32)
        f["int8_dynamic"] = {"model": "mlp 1024-4096-4096-1000", "batch": 16, "rel_error": rel8,
                             "fp32_ms": m32["median"], "int8_ms": m8["median"],
                             "speedup": m32["median"] / m8["median"], "tolerance": INT8_MLP_TOL}
        res.note("dynamic int8 MLP on cpu: rel. error %.3g, fp32 %.2f ms, int8 %.2f ms (%.2fx)"
                 % (rel8, m32["median"], m8["median"], m32["median"] / m8["median"]))
        if rel8 > INT8_MLP_TOL:
            res.problem("dynamic int8 MLP rel. error %.3g > %g" % (rel8, INT8_MLP_TOL))
    except Exception as exc:  # quantized CPU kernels missing from this build
        f["int8_dynamic"] = {"skipped": "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")}
        res.note("dynamic int8 skipped: %s" % f["int8_dynamic"]["skipped"])


def run(ctx, res):
    torch = ctx.torch()
    tv = ctx.torchvision()
    device = ctx.device(res)
    f = res.figures
    f["device"] = device
    gen = torch.Generator().manual_seed(0)  # one stream of inputs through the three parts, in turn
    err, bound = _int8_qdq(ctx, res, torch, device, gen)
    dname, rel = _amp(ctx, res, torch, tv, device, gen)
    _int8_dynamic(ctx, res, torch, gen)
    res.summary = "int8 q/dq err %.4f <= %.4f; AMP %s rel. err %.3g, %.2fx; %s" % (
        err, bound, dname, rel, f["amp"]["speedup"],
        ("dyn. int8 MLP rel. err %.3g, %.2fx" % (f["int8_dynamic"]["rel_error"], f["int8_dynamic"]["speedup"]))
        if "rel_error" in f["int8_dynamic"] else "dyn. int8 skipped")
