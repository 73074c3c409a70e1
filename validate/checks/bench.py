"""bench: the benchmark suite over torchvision classifiers.

Models: ``--models`` (a list, ``classic`` = the 31 classic torchvision classifiers, ``all`` = every
classifier in torchvision.models), randomly initialised (timing does not need
trained weights), input size from each model's weights metadata.  For each
model, in isolation (one model's failure or OOM is recorded and the suite goes
on): eval() + inference_mode, warm-up, then ``--iters`` timed batch-1 runs
(CUDA events on the GPU) -> median/p10/p90/IQR; batch-N throughput (N = the
largest ``--batch``) in fp32 and under AMP (fp16 autocast on CUDA; bf16 on the
CPU only with ``--amp``).  cuDNN benchmark mode is on for CUDA runs and, with
the TF32 flags, recorded.  One model (resnet50 when listed) is also timed with
torch.utils.benchmark as a cross-check.  Writes bench_torch.log in the seed's
``#head;...`` / ``#model;ms`` format (batch-1 median ms).
"""

from __future__ import annotations

import contextlib
import os

from .. import expectations, output, timing
from .torch_checks import tf32_flags

CROSSCHECK_MODEL = "resnet50"


def _autocast(torch, device, enabled):
    if not enabled:
        return contextlib.nullcontext()
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.float16)
    return torch.autocast("cpu", dtype=torch.bfloat16)


# A measurement whose IQR/median exceeds this is not a result: pyperf flags a
# benchmark "may be unstable" when its standard deviation exceeds 10 % of the
# mean (pyperf.readthedocs.io analyze.html shows the warning; the 10 % is in
# its source, not retrieved here); we apply it to the robust spread.
UNSTABLE_IQR_REL = 0.10

# Per-SKU floors for this suite are cells "<model>_fp32_ips" of
# validate/expectations.py (public PyTorch measurements of the same network,
# NVIDIA DeepLearningExamples, at half: loose, the conditions differ).  Only
# batch-N fp32 throughput is judged: it is GPU-bound.  Batch-1 latency of an
# eager model is bound by the host CPU's kernel launches (~160 per ResNet-50
# forward), so a slow host, not a sick GPU, moves it; AMP runs of other
# harnesses differ in memory format and are not comparable to our NCHW
# autocast.  H100, A100, L4, A10G: no public PyTorch figure at our protocol
# was found (NVIDIA's data-centre pages and MLPerf give TensorRT INT8/FP16
# figures, ceilings for an eager fp32 run, not floors): "no reference".


def judge_model(rec, sku=None, model=None):
    """{"trust", "verdict", ...} for one model's record.

    trust: "untrusted" when batch-1 latency or a throughput has IQR/median
    above UNSTABLE_IQR_REL.  verdict: each throughput the table has a cell
    for (expectations.TABLE[sku]["<model>_<fp32|amp>_ips"]) that was measured
    at the cell's batch is judged against it; "no reference" when none could be."""
    spreads = {"latency": (rec.get("latency_ms") or {}).get("iqr_rel")}
    thr = rec.get("throughput_ips") or {}
    for k in ("fp32", "amp"):
        if thr.get(k + "_iqr_rel") is not None:
            spreads[k] = thr[k + "_iqr_rel"]
    wide = sorted(k for k, v in spreads.items() if v is not None and v > UNSTABLE_IQR_REL)
    out = {"trust": "untrusted" if wide else "ok", "unstable": wide}
    slow, judged = [], []
    for k in ("fp32", "amp"):
        e = expectations.cell(sku, "%s_%s_ips" % (model, k)) if sku and model else None
        if not e or thr.get(k) is None or thr.get("batch") != e["batch"]:
            continue
        judged.append("%s b%d >= %.0f img/s (%s)" % (k, e["batch"], e["floor"], e["source"]))
        if expectations.verdict(e, thr[k])["verdict"] == "fail":
            slow.append("%s b%d %.0f img/s < %.0f (%s, %s)" % (
                k, e["batch"], thr[k], e["floor"], e["rule"], e["source"]))
    if not judged:
        out["verdict"] = "no reference"
        return out
    out["verdict"] = "fail" if slow else "pass"
    out["judged"] = judged
    out["slow"] = slow
    return out


def is_out_of_memory(exc):
    """torch.cuda.OutOfMemoryError (a RuntimeError subclass since torch 1.13)
    or the allocator's message on older builds and on the CPU."""
    name = type(exc).__name__
    text = str(exc)
    return (name == "OutOfMemoryError" or "out of memory" in text.lower()
            or "DefaultCPUAllocator: can't allocate" in text)


def _short_error(exc):
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")


def bench_one(ctx, torch, tv, name, device, crosscheck):
    from .. import models

    opts = ctx.opts
    rec = {}
    size = models.input_size(tv, name)
    rec["input_size"] = size
    torch.manual_seed(0)
    model = models.build_classifier(tv, name, size).eval().to(device)
    rec["params_m"] = round(models.param_count(model) / 1e6, 3)
    x1 = torch.randn(1, 3, size, size, device=device)

    def run1():
        return model(x1)

    with torch.inference_mode():
        lat = timing.measure(run1, opts.warmup, opts.iters, device)
        rec["latency_ms"] = timing.latency_figures(lat)
        rec["clock"] = lat["clock"]
        amp_on = device == "cuda" or opts.amp
        if opts.amp:
            with _autocast(torch, device, True):
                lat_amp = timing.measure(run1, opts.warmup, opts.iters, device)
            rec["latency_amp_ms"] = timing.latency_figures(lat_amp)
        n = max(opts.batch)
        thr = {"batch": n, "fp32": None, "amp": None}
        try:
            if n == 1:
                thr["fp32"] = 1000.0 / lat["median"]
            else:
                xb = torch.randn(n, 3, size, size, device=device)
                tb = timing.measure(lambda: model(xb), opts.warmup, opts.iters, device)
                thr["fp32"] = n * 1000.0 / tb["median"]
                thr["fp32_iqr_rel"] = tb["iqr_rel"]
            if amp_on:
                xb = x1 if n == 1 else torch.randn(n, 3, size, size, device=device)
                with _autocast(torch, device, True):
                    ta = timing.measure(lambda: model(xb), opts.warmup, opts.iters, device)
                thr["amp"] = n * 1000.0 / ta["median"]
                thr["amp_dtype"] = "float16" if device == "cuda" else "bfloat16"
                thr["amp_iqr_rel"] = ta["iqr_rel"]
        except Exception as exc:  # OOM at batch N must not lose the latency
            if is_out_of_memory(exc):
                # the batch the user chose does not fit this GPU: a result of
                # that configuration, not a hardware fault
                thr["oom"] = True
                thr["oom_batch"] = n
            thr["error"] = _short_error(exc)
        rec["throughput_ips"] = thr
    if crosscheck:
        def run_inference():
            with torch.inference_mode():
                return model(x1)

        min_time = max(0.2, min(2.0, lat["median"] * opts.iters / 1000.0))
        tb = timing.torch_benchmark(run_inference, min_time, label=name, description=device)
        rec["crosscheck"] = {
            "torch_benchmark_median_ms": tb["median"],
            "torch_benchmark_iqr_ms": tb["iqr"],
            "torch_benchmark_iters": tb["iters"],
            "ours_median_ms": lat["median"],
            "ratio": lat["median"] / tb["median"] if tb["median"] else None,
        }
    del model
    return rec


def n_oom(thr):
    return thr.get("oom_batch") or thr.get("batch")


def _suite_figures(ctx, torch, device, f):
    """Record the suite's conditions in ``f``; turns cuDNN benchmark mode on for CUDA.

    Returns (GPU name or None, the benchmark mode to restore or None)."""
    f["device"] = device
    f["models"] = {}
    f["warmup"] = ctx.opts.warmup
    f["iters"] = ctx.opts.iters
    f["batch"] = ctx.opts.batch
    f["threads"] = torch.get_num_threads()
    gpu_name = None
    prev_bench = None
    if device == "cuda":
        gpu_name = torch.cuda.get_device_name(0)
        prev_bench = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
    f["gpu_name"] = gpu_name
    f["sku"] = expectations.identify(gpu_name)[0] if gpu_name else None
    f["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark) if device == "cuda" else None
    f["tf32"] = tf32_flags(torch)
    f["label"] = "PyTorch %s %s%s" % (torch.__version__, device, (" " + gpu_name) if gpu_name else "")
    return gpu_name, prev_bench


def _model_line(res, f, name, rec):
    """Judge one measured model and record its verdicts; returns its line."""
    lat = rec["latency_ms"]
    thr = rec["throughput_ips"]
    msg = "b1 %.2f ms (p10 %.2f, p90 %.2f, IQR/med %.1f%%), b%d %s img/s fp32, %s AMP" % (
        lat["median"], lat["p10"], lat["p90"], 100.0 * (lat["iqr_rel"] or 0), thr["batch"],
        "%.1f" % thr["fp32"] if thr["fp32"] else "-", "%.1f" % thr["amp"] if thr["amp"] else "-")
    if thr.get("oom"):
        msg += (" (batch %d does not fit in GPU memory: a result of this batch size, not a fault)"
                % n_oom(thr))
        f.setdefault("oom", []).append(name)
    elif thr.get("error"):
        msg += " (throughput: %s)" % thr["error"]
        res.problem("%s: batch-%d throughput failed: %s" % (name, thr["batch"], thr["error"]))
    judged = judge_model(rec, f.get("sku"), name)
    rec["judgement"] = judged
    if judged["trust"] == "untrusted":
        msg = "UNTRUSTED (IQR/median above %d%% for %s, not a result): %s" % (
            100 * UNSTABLE_IQR_REL, ", ".join(judged["unstable"]), msg)
        f.setdefault("untrusted", []).append(name)
    if judged["verdict"] == "fail":  # even if spread: half of a healthy GPU is not noise
        res.problem("%s slower than healthy %s: %s" % (name, f.get("sku"), "; ".join(judged["slow"])))
    return msg


def _bench_models(ctx, res, torch, tv, device, names, known, log_path):
    """Measure each model in turn, judge and record it; rewrites the bench log after each."""
    from .. import models

    f = res.figures
    cross = CROSSCHECK_MODEL if CROSSCHECK_MODEL in names else names[0]
    rows = []
    failed = []
    for i, name in enumerate(names):
        if name not in known:
            f["models"][name] = {"error": "unknown model (not in torchvision.models)"}
            failed.append(name)
            continue
        ctx.progress("%d/%d %s ..." % (i + 1, len(names), name))
        try:
            rec = bench_one(ctx, torch, tv, name, device, name == cross)
        except Exception as exc:
            rec = {"error": _short_error(exc)}
        finally:
            models.release(device)
        f["models"][name] = rec
        if "error" in rec:
            failed.append(name)
            rows.append((name, None))
            ctx.progress("%d/%d %s: FAILED %s" % (i + 1, len(names), name, rec["error"]))
            res.note("%-22s error: %s" % (name, rec["error"]))
        else:
            rows.append((name, rec["latency_ms"]["median"]))
            msg = _model_line(res, f, name, rec)
            ctx.progress("%d/%d %s: %s" % (i + 1, len(names), name, msg))
            res.note("%-22s %s, input %d, %.1f M params" % (name, msg, rec["input_size"], rec["params_m"]))
            if "crosscheck" in rec:
                f["crosscheck"] = dict(rec["crosscheck"], model=name)
        with open(log_path, "w") as fh:
            fh.write(output.bench_log_text(f["label"], rows))
    return rows, failed


def _suite_verdict(ctx, res, names, failed, gpu_name, device):
    """Record the suite's verdicts, notes and summary line from the models' records."""
    f = res.figures
    if failed:
        res.problem("%d of %d models failed: %s" % (len(failed), len(names), ", ".join(failed)))
    if f.get("untrusted"):
        res.warn("untrusted measurements (IQR/median > %d%%; rerun on a quiet machine): %s"
                 % (100 * UNSTABLE_IQR_REL, ", ".join(f["untrusted"])))
    if device == "cuda":
        judged_models = [n for n in names if (f["models"].get(n, {}).get("judgement") or {}).get("verdict")
                         in ("pass", "fail")]
        f["judged"] = judged_models
        if not judged_models:
            res.warn("no reference for %s in this suite (batch %d): latency and throughput measured, not judged"
                     % (f["sku"] or gpu_name, max(ctx.opts.batch)))
        else:
            res.note("judged against public floors: %s; the other models are measured, not judged"
                     % ", ".join(judged_models))
    ok = [n for n in names if "latency_ms" in f["models"].get(n, {})]
    cc = f.get("crosscheck")
    if cc:
        res.note("cross-check %s: ours %.3f ms (median of %d), torch.utils.benchmark %.3f ms (%d runs), ratio %.3f"
                 % (cc["model"], cc["ours_median_ms"], ctx.opts.iters, cc["torch_benchmark_median_ms"],
                    cc["torch_benchmark_iters"], cc["ratio"] or 0))
    cross = CROSSCHECK_MODEL if CROSSCHECK_MODEL in names else names[0]
    head = cross if cross in ok else (ok[0] if ok else None)
    if not head:
        res.summary = "no model ran"
        return
    m = f["models"][head]
    thr = m["throughput_ips"]
    res.summary = "%d/%d models on %s; %s b1 %.2f ms (IQR/med %.1f%%), b%d %s img/s fp32%s" % (
        len(ok), len(names), gpu_name or device, head, m["latency_ms"]["median"],
        100.0 * (m["latency_ms"]["iqr_rel"] or 0), thr["batch"],
        "%.0f" % thr["fp32"] if thr["fp32"] else "-",
        (", %.0f AMP" % thr["amp"]) if thr.get("amp") else "")
    if f.get("untrusted"):
        res.summary += " [untrusted spread: %s]" % ", ".join(f["untrusted"])


def run(ctx, res):
    torch = ctx.torch()
    tv = ctx.torchvision()
    from .. import models

    device = ctx.device(res)
    names = ctx.opts.model_list
    if names is None:
        names = models.classifier_names(tv)
    known = set(models.classifier_names(tv))
    gpu_name, prev_bench = _suite_figures(ctx, torch, device, res.figures)
    log_path = ctx.artefact(res, output.BENCH_LOG)
    try:
        rows, failed = _bench_models(ctx, res, torch, tv, device, names, known, log_path)
    finally:
        if prev_bench is not None:
            torch.backends.cudnn.benchmark = prev_bench
    _suite_verdict(ctx, res, names, failed, gpu_name, device)
    if not os.path.exists(log_path):
        with open(log_path, "w") as fh:
            fh.write(output.bench_log_text(res.figures["label"], rows))
