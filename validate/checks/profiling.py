"""profile: where the time goes, CPU vs GPU.

For a ResNet20 on 3x32x32 CIFAR-10 input (defined in validate/models.py) and a
ResNet50 on 3x224x224, batch 1, random weights: the forward pass is timed with
the shared timer, then every leaf module call is timed (forward pre/post hooks
marking the shared interval clock: CUDA events on the GPU) over ``--iters``
runs; per-call medians go to profile_layers_<model>.txt with CPU and GPU side
by side.  One further run under torch.profiler gives the top-ops table
(profile_ops_<model>_<device>.txt) and a chrome trace
(trace_<model>_<device>.json, open in chrome://tracing or Perfetto).
Optional check; a missing GPU in GPU mode fails it (CPU figures are kept).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from .. import timing

TOP = 15


@contextlib.contextmanager
def _native_stderr_to(path):
    """Send file descriptor 2 to ``path`` for a while: Kineto prints its own
    start/stop lines there from C++, past Python's sys.stderr."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with open(path, "a") as fh:
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _layer_times(torch, model, x, device, warmup, iters):
    """[(call_name, type, [ms per iteration])] in call order."""
    clock = timing.IntervalClock(device)
    calls = []  # per iteration: list of (name, type, start_mark, end_mark)
    current = []
    counts: dict[Any, Any] = {}
    hooks = []

    def pre(name):
        def hook(module, inputs):
            current.append([name, type(module).__name__, clock.mark(), None])
        return hook

    def post(name):
        def hook(module, inputs, outputs):
            for rec in reversed(current):
                if rec[0] == name and rec[3] is None:
                    rec[3] = clock.mark()
                    break
        return hook

    for name, module in model.named_modules():
        if name and not list(module.children()):
            hooks.append(module.register_forward_pre_hook(pre(name)))
            hooks.append(module.register_forward_hook(post(name)))
    try:
        with torch.inference_mode():
            for _ in range(warmup):
                model(x)
            del current[:]
            for _ in range(iters):
                model(x)
                calls.append(list(current))
                del current[:]
        clock.finish()
    finally:
        for h in hooks:
            h.remove()
    if not calls:
        return []
    out = []
    for pos, first in enumerate(calls[0]):
        name, kind = first[0], first[1]
        counts[name] = counts.get(name, 0) + 1
        label = name if counts[name] == 1 else "%s#%d" % (name, counts[name])
        samples = [clock.elapsed_ms(it[pos][2], it[pos][3]) for it in calls if pos < len(it)]
        out.append((label, kind, samples))
    return out


def _sort_key(prof, device):
    """The key_averages() column to sort by: self device time on the GPU
    (named self_device_time_total since torch 2.4, self_cuda_time_total before),
    self CPU time on the CPU."""
    if device != "cuda":
        return "self_cpu_time_total"
    try:
        sample = prof.key_averages()[0]
    except Exception:
        return "self_cuda_time_total"
    return "self_device_time_total" if hasattr(sample, "self_device_time_total") else "self_cuda_time_total"


def _top_ops(prof, key):
    rows: list[Any] = []
    try:
        events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0) or 0, reverse=True)
    except Exception:
        return rows
    for e in events[:5]:
        rows.append({"op": e.key, "self_ms": (getattr(e, key, 0) or 0) / 1000.0, "calls": e.count})
    return rows


def profile_model(ctx, res, torch, tag, model, x, device):
    from torch.profiler import ProfilerActivity, profile

    opts = ctx.opts
    model = model.to(device).eval()
    x = x.to(device)
    with torch.inference_mode():
        fwd = timing.measure(lambda: model(x), opts.warmup, opts.iters, device)
    layers = _layer_times(torch, model, x, device, max(1, min(opts.warmup, 3)), opts.iters)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.inference_mode():
        model(x)  # warm once more outside the profiler
        with _native_stderr_to(ctx.artefact(res, "profiler_stderr.txt")):
            with profile(activities=acts, record_shapes=False) as prof:
                model(x)
                if device == "cuda":
                    torch.cuda.synchronize()
    trace = "trace_%s_%s.json" % (tag, device)
    prof.export_chrome_trace(ctx.artefact(res, trace))
    sort = _sort_key(prof, device)
    table_name = "profile_ops_%s_%s.txt" % (tag, device)
    try:
        table = prof.key_averages().table(sort_by=sort, row_limit=TOP)
    except Exception:
        sort = "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=sort, row_limit=TOP)
    with open(ctx.artefact(res, table_name), "w") as fh:
        fh.write(table)
    top_ops = _top_ops(prof, sort)
    medians = [(label, kind, timing.summarize(s)["median"]) for label, kind, s in layers if s]
    total = sum(m for _, _, m in medians)
    top_layers = sorted(medians, key=lambda r: -r[2])[:5]
    return {
        "forward_ms": timing.latency_figures(fwd),
        "layers": len(medians),
        "layers_sum_ms": total,
        "top_layers": [{"layer": layer, "type": k, "ms": m, "share": (m / total) if total else None}
                       for layer, k, m in top_layers],
        "top_ops": top_ops,
        "top_ops_by": sort,
        "trace": trace,
        "ops_table": table_name,
    }, dict((layer, (k, m)) for layer, k, m in medians), [layer for layer, _, _ in medians]


def _write_layer_table(path, tag, order, per_dev):
    devs = [d for d in ("cpu", "cuda") if d in per_dev]
    lines = ["# %s: median ms per layer call, batch 1" % tag,
             "%-32s %-18s " % ("layer", "type") + " ".join("%10s" % d for d in devs)
             + ("  %8s" % "cpu/gpu" if len(devs) == 2 else "")]
    for label in order:
        kind = per_dev[devs[0]].get(label, ("?", None))[0]
        vals = [per_dev[d].get(label, (kind, None))[1] for d in devs]
        row = "%-32s %-18s " % (label, kind) + " ".join("%10.4f" % v if v is not None else "%10s" % "-" for v in vals)
        if len(devs) == 2 and vals[0] and vals[1]:
            row += "  %8.1f" % (vals[0] / vals[1])
        lines.append(row)
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def run(ctx, res):
    torch = ctx.torch()
    tv = ctx.torchvision()
    from .. import models

    device = ctx.device(res)
    devices = ["cpu"] + (["cuda"] if device == "cuda" else [])
    f = res.figures
    f["devices"] = devices
    gen = torch.Generator().manual_seed(0)
    subjects = [
        ("resnet20_cifar10", lambda: models.ResNet20(), torch.randn(1, 3, 32, 32, generator=gen)),
        ("resnet50", lambda: tv.models.resnet50(weights=None), torch.randn(1, 3, 224, 224, generator=gen)),
    ]
    summary = []
    for tag, build, x in subjects:
        torch.manual_seed(0)
        model = build()
        entry = {"params_m": round(models.param_count(model) / 1e6, 3), "input": list(x.shape)}
        per_dev = {}
        order: list[Any] = []
        for d in devices:
            ctx.progress("%s on %s" % (tag, d))
            fig, layer_map, order_d = profile_model(ctx, res, torch, tag, model, x, d)
            entry[d] = fig
            per_dev[d] = layer_map
            order = order or order_d
            res.note("%s on %s: forward %.3f ms median (IQR/med %.1f%%), %d layer calls summing to %.3f ms; "
                     "slowest %s" % (tag, d, fig["forward_ms"]["median"], 100 * (fig["forward_ms"]["iqr_rel"] or 0),
                                     fig["layers"], fig["layers_sum_ms"],
                                     ", ".join("%s %.3f ms" % (t["layer"], t["ms"]) for t in fig["top_layers"][:3])))
            res.note("  top ops on %s: %s" % (d, ", ".join("%s %.3f ms" % (o["op"], o["self_ms"])
                                                          for o in fig["top_ops"][:3])))
        model.to("cpu")
        table = "profile_layers_%s.txt" % tag
        _write_layer_table(ctx.artefact(res, table), tag, order, per_dev)
        entry["layer_table"] = table
        if "cuda" in entry:
            entry["speedup"] = entry["cpu"]["forward_ms"]["median"] / entry["cuda"]["forward_ms"]["median"]
            summary.append("%s %.2f ms cpu / %.2f ms gpu" % (
                tag, entry["cpu"]["forward_ms"]["median"], entry["cuda"]["forward_ms"]["median"]))
        else:
            summary.append("%s %.2f ms cpu" % (tag, entry["cpu"]["forward_ms"]["median"]))
        f[tag] = entry
        del model
        models.release(device)
    res.summary = "; ".join(summary) + "; traces written"
    if not os.path.isdir(ctx.out_dir):
        res.problem("output folder vanished")
