"""matmul and bandwidth: GPU health against what healthy GPUs of the SKU reach.

matmul: square GEMM TFLOPS (2*n^3 / median time) in fp32 with TF32 off, with
TF32 on, and in bf16, on every GPU.  The result of the timed runs is verified
(validate/verify.py: Freivalds' check of the whole n x n product), not a side
product.  Each figure is judged against the model's cell in
validate/expectations.py (scaled by a MIG slice's share); without one it is
"no reference": measured, reported and raised as a warning on top of
validate.log, never a silent pass.  The check then passes on what it could
check (the products are right), as issue 12 item 2 asks: a T4 or an RTX
A6000 nobody published torch.mm figures for is not "not validated" for that.

bandwidth: device-to-device copy (read + write bytes), pinned host-to-device
and device-to-host GB/s on every GPU, each judged against the model's cell in
validate/expectations.py.  A host copy of a model without one is judged
against the PCIe link actually negotiated (read from nvidia-smi while the
copies run), with the floors Azure's node health checks use; a link below
its maximum generation or width is its own finding.  A device copy without
a cell is "no reference".
GPU 0's figures are the top-level ones (other GPUs: ``per_gpu``).  On the CPU
the same measurements run for reference, with no judgement.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from .. import actions, expectations, gpusample, host, numa, specs, timing, verify

MATMUL_KEYS = ("fp32_tflops", "tf32_tflops", "bf16_tflops")
BANDWIDTH_KEYS = ("d2d_gbs", "h2d_gbs", "d2h_gbs")
MODES = (("fp32_tflops", "fp32", False), ("tf32_tflops", "tf32", True), ("bf16_tflops", "bf16", False))


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


def gpu_targets(torch, device):
    """[(torch device, name, properties or None)] for every GPU (or the CPU)."""
    if device == "cuda":
        return [("cuda:%d" % i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i))
                for i in range(torch.cuda.device_count())]
    return [("cpu", "cpu", None)]


def sku_of(name, props, ids=None):
    """(model key, datasheet figures, MIG share or None) of one GPU; ``ids``:
    its (pci.device_id, pci.sub_device_id) as nvidia-smi prints them."""
    try:
        key = expectations.identify(name, *(ids or (None, None)))[0]
    except ValueError:  # nvidia-smi printed something else: the name decides
        key = expectations.identify(name)[0]
    figures = specs.datasheet(key)
    share = specs.mig_share(name, getattr(props, "multi_processor_count", None), figures) if props else None
    return key, figures, share


def judge_matmul(measured, sku, share):
    """{figure: expectations.judge(...)} for one GPU's TFLOPS; "not measured"
    for a figure it could not measure."""
    out = {}
    for k in MATMUL_KEYS:
        if measured.get(k) is None:
            out[k] = {"verdict": "not measured", "floor": None, "source": None}
        else:
            out[k] = expectations.judge(sku, k, measured[k], share)
    return out


def _fmt(v):
    if v is None:
        return "-"
    return "%.1f" % v if abs(v) >= 10 else "%.3g" % v


def run_matmul(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    n = 8192 if device == "cuda" else 512  # CPU: a reference figure only; bf16 is slow there
    iters = _iters(ctx)
    warm = max(1, min(ctx.opts.warmup, 5))
    prev = _get_tf32(torch)
    per_gpu = []
    gen = torch.Generator().manual_seed(0)
    a_cpu = torch.randn(n, n, generator=gen)
    b_cpu = torch.randn(n, n, generator=gen)
    ids = gpusample.pci_ids(host.find_nvidia_smi()) if device == "cuda" else {}
    try:
        for dev, name, props in gpu_targets(torch, device):
            a = a_cpu.to(dev)
            b = b_cpu.to(dev)
            out = {"device": dev, "name": name, "n": n, "iters": iters}
            key, figures, share = sku_of(name, props, ids.get(gpusample.torch_bus_key(props))) \
                if device == "cuda" else (None, {}, None)
            for figure, mode, tf32 in MODES:
                if tf32 and device != "cuda":
                    out[figure] = None  # TF32 is a tensor-core mode
                    continue
                _set_tf32(torch, tf32)
                dtype = torch.bfloat16 if mode == "bf16" else torch.float32
                x = a.to(dtype)
                y = b.to(dtype)
                c = torch.empty(n, n, dtype=dtype, device=dev)
                ctx.progress("%s %s n=%d" % (name, mode, n))
                expected = expectations.cell(key, figure, share) if device == "cuda" else None
                stats = []

                def once():
                    stats.append(timing.measure(lambda: torch.mm(x, y, out=c), warm, iters, dev))
                    return 2.0 * n ** 3 / (stats[-1]["median"] / 1e3) / 1e12

                try:  # below its floor: measured again, the best counts (timing.best_of)
                    out[figure], tries = timing.best_of(once, lambda v: expected is None or v >= expected["floor"])
                except RuntimeError as exc:  # e.g. bf16 unsupported on this GPU
                    out[figure] = None
                    out[mode + "_error"] = str(exc).splitlines()[0]
                    continue
                out[mode + "_tries"] = tries
                out[mode + "_iqr_rel"] = stats[-1]["iqr_rel"]
                # c holds the product of the last timed run: verify that one
                ok, err = verify.product_ok(torch, x, y, c, mode)
                out[mode + "_check_error"] = err
                if not ok:
                    res.problem("%s %s: the timed product is wrong (error %.3g x its rounding tolerance)"
                                % (name, mode, err))
                del x, y, c
            out["sku"] = key
            out["mig_share"] = share
            out["spec"] = dict((k, figures.get(k)) for k in MATMUL_KEYS) if figures else {}
            out["ratio"] = specs.ratios(out, out["spec"], MATMUL_KEYS)
            out["verdict"] = judge_matmul(out, key, share) if device == "cuda" else {}
            per_gpu.append(out)
            del a, b
    finally:
        _set_tf32(torch, prev)
    _report_matmul(ctx, res, device, n, per_gpu)


def _report_matmul(ctx, res, device, n, per_gpu):
    first = per_gpu[0]
    f = res.figures
    for k in MATMUL_KEYS:
        f[k] = first.get(k)
    f.update({"device": device, "gpu_name": first["name"] if device == "cuda" else None, "n": n,
              "spec_gpu": first["sku"], "spec": first["spec"], "ratio": first["ratio"],
              "floor": dict((k, v["floor"]) for k, v in first["verdict"].items()),
              "verdict": dict((k, v["verdict"]) for k, v in first["verdict"].items()),
              "per_gpu": per_gpu})
    for g in per_gpu:
        label = "%s (%s)" % (g["name"], g["device"])
        for k, v in sorted(g["verdict"].items()):
            if v["verdict"] == "fail":
                mode = k.split("_")[0]
                res.problem("%s %s %.1f TFLOPS < %.1f (best of %d tries; %s, healthy %s: %s)" % (
                    label, mode, g[k], v["floor"], len(g.get(mode + "_tries") or [1]), v["rule"], g["sku"],
                    v["source"]))
        res.note("%s: fp32 %s, tf32 %s, bf16 %s TFLOPS; %s%s" % (
            label, _fmt(g.get("fp32_tflops")), _fmt(g.get("tf32_tflops")), _fmt(g.get("bf16_tflops")),
            ", ".join("%s %s%s" % (k.split("_")[0], v["verdict"],
                                   " (expected >= %.1f)" % v["floor"] if v["floor"] else "")
                      for k, v in sorted(g["verdict"].items())) or "not judged (cpu)",
            ", MIG slice, share %.3f" % g["mig_share"] if g["mig_share"] else ""))
    unjudged = sorted(set("%s %s" % (g["name"], k.split("_")[0]) for g in per_gpu
                          for k, v in g["verdict"].items() if v["verdict"] == "no reference"))
    if unjudged and device == "cuda":
        res.warn("performance not judged, no reference (measured only): " + ", ".join(unjudged))
    f["no_reference"] = unjudged
    res.summary = "%s: fp32 %s, tf32 %s, bf16 %s TFLOPS%s" % (
        f["gpu_name"] or "cpu", _fmt(f["fp32_tflops"]), _fmt(f["tf32_tflops"]), _fmt(f["bf16_tflops"]),
        (" (%s)" % ", ".join("%s %s" % (k.split("_")[0], v) for k, v in sorted(f["verdict"].items())))
        if f["verdict"] else "")


# --------------------------------------------------------------------------
# bandwidth


def judge_host_copy(gbs, link):
    """The verdict of a pinned host copy against the negotiated ``link``
    ({"gen_current", "width_current", ...}), with the floor and the link."""
    floor = specs.pinned_copy_floor((link or {}).get("gen_current"), (link or {}).get("width_current"))
    if gbs is None:
        return {"verdict": "not measured", "floor": floor}
    if floor is None:
        return {"verdict": "no reference", "floor": None}
    return {"verdict": "pass" if gbs >= floor else "fail", "floor": floor, "ratio": gbs / floor}


def _link_under_load(smi, key, work, seconds=1.0):
    """The PCIe link of GPU ``key`` read by nvidia-smi while ``work()`` runs
    in a loop (copies keep the link at its trained speed)."""
    if not smi or key is None:
        return None
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            work()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        stop.wait(seconds / 2)
        row = gpusample.read_once(smi).get(key)
    finally:
        stop.set()
        t.join(timeout=60)
    if not row:
        return None
    return {"gen_current": row.get("pcie.link.gen.current"), "gen_max": row.get("pcie.link.gen.max"),
            "width_current": row.get("pcie.link.width.current"), "width_max": row.get("pcie.link.width.max")}


def run_bandwidth(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    iters = _iters(ctx)
    warm = max(1, min(ctx.opts.warmup, 5))
    nbytes = (256 << 20) if device == "cuda" else (64 << 20)
    numel = nbytes // 4
    smi = host.find_nvidia_smi() if device == "cuda" else None
    ids = gpusample.pci_ids(smi)
    per_gpu = []
    for dev, name, props in gpu_targets(torch, device):
        out = {"device": dev, "name": name, "bytes": nbytes, "iters": iters}
        key, figures, share = sku_of(name, props, ids.get(gpusample.torch_bus_key(props))) \
            if device == "cuda" else (None, {}, None)
        src = torch.ones(numel, device=dev)
        dst = torch.empty(numel, device=dev)
        ctx.progress("%s copy %d MiB" % (name, nbytes >> 20))
        _copy(out, "d2d", lambda: dst.copy_(src), 2.0 * nbytes, warm, iters, dev,
              None if share else expectations.cell(key, "d2d_gbs"))  # read + write
        if device == "cuda":
            place = numa.placement(numa.bdf(props))
            out["numa"] = dict(place, cpus=len(place["cpus"]) if place["cpus"] else None)
            with numa.bound(place):  # the host buffers pinned from the GPU's own node
                hostbuf = torch.ones(numel, pin_memory=True)
                back = torch.empty(numel, pin_memory=True)
                floor = None if share else expectations.cell(key, "h2d_gbs")
                _copy(out, "h2d", lambda: src.copy_(hostbuf, non_blocking=True), nbytes, warm, iters, dev, floor)
                floor = None if share else expectations.cell(key, "d2h_gbs")
                _copy(out, "d2h", lambda: back.copy_(src, non_blocking=True), nbytes, warm, iters, dev, floor)
                torch.cuda.synchronize(dev)
                if not bool(back.eq(1).all()):
                    res.problem("%s: host copy came back wrong" % name)

                def copies():
                    src.copy_(hostbuf, non_blocking=True)
                    torch.cuda.synchronize(dev)

                out["pcie"] = _link_under_load(smi, gpusample.torch_bus_key(props), copies)
            del hostbuf, back
        else:
            out["h2d_gbs"] = None
            out["d2h_gbs"] = None
        if not bool(dst.eq(1).all()):
            res.problem("%s: device copy came back wrong" % name)
        out.update(_judge_bandwidth(res, out, key, figures, share))
        per_gpu.append(out)
        del src, dst
    _report_bandwidth(res, device, nbytes, per_gpu)


def _copy(out, name, work, nbytes, warm, iters, dev, expected):
    """``out[name + "_gbs"]``: ``nbytes`` per ``work()``, measured again while below
    ``expected``'s floor (timing.best_of), with its spread and tries."""
    stats = []

    def once():
        stats.append(timing.measure(work, warm, iters, dev))
        return nbytes / (stats[-1]["median"] / 1e3) / 1e9

    out[name + "_gbs"], out[name + "_tries"] = timing.best_of(
        once, lambda v: expected is None or v >= expected["floor"])
    out[name + "_iqr_rel"] = stats[-1]["iqr_rel"]


def _judged_by_table(key, figure, gbs):
    """expectations.judge of one copy, with the reason the line shows."""
    if gbs is None:
        return {"verdict": "not measured", "floor": None, "why": "not measured"}
    v = expectations.judge(key, figure, gbs)
    v["why"] = "%s: %s" % (v["rule"], v["source"]) if v["floor"] is not None else v["why"]
    return v


def _judge_bandwidth(res, g, key, figures, share):
    """Verdicts for one GPU's copies; problems recorded on ``res``."""
    label = "%s (%s)" % (g["name"], g["device"])
    spec = {"d2d_gbs": figures["mem_gbs"], "h2d_gbs": figures.get("pcie_gbs"),
            "d2h_gbs": figures.get("pcie_gbs")} if figures else {}
    verdict: dict[str, Any] = {}
    if g["device"] == "cpu":
        return {"sku": None, "spec": {}, "ratio": {}, "verdict": {}, "mig_share": None}
    if share:
        for k in BANDWIDTH_KEYS:
            verdict[k] = {"verdict": "no reference", "why": "MIG slice (share %.3f): copy engines and "
                          "memory are partitioned, no public figure for a slice" % share}
    else:
        verdict["d2d_gbs"] = _judged_by_table(key, "d2d_gbs", g.get("d2d_gbs"))
        link = g.get("pcie")
        for k in ("h2d_gbs", "d2h_gbs"):
            if expectations.cell(key, k) or g.get(k) is None:
                verdict[k] = _judged_by_table(key, k, g.get(k))
            elif figures and figures.get("host_link") != "pcie":
                verdict[k] = {"verdict": "no reference", "why": "host link is %s, not PCIe" % figures["host_link"]}
            else:  # no figure for the model: the negotiated link's floor
                v = judge_host_copy(g.get(k), link)
                v["why"] = ("negotiated link gen %s x%s: floor %s GB/s (Azure HPC health checks)"
                            % ((link or {}).get("gen_current"), (link or {}).get("width_current"),
                               _fmt(v.get("floor"))) if link else "link not read (no nvidia-smi)")
                verdict[k] = v
        if link:
            finding = specs.link_downtrained(link)
            if finding:
                # a link trained below its maximum under load is the slot, riser or
                # card: hands on the hardware (drain)
                res.problem("%s: %s (read under load)" % (label, finding), actions.DRAIN_RMA)
    for k, v in sorted(verdict.items()):
        if v["verdict"] == "fail":
            mode = k.split("_")[0]
            res.problem("%s %s %.1f GB/s below %.1f (best of %d tries; %s)" % (
                label, mode, g[k], v["floor"], len(g.get(mode + "_tries") or [1]), v["why"]))
    return {"sku": key, "spec": spec, "ratio": specs.ratios(g, spec, BANDWIDTH_KEYS), "verdict": verdict,
            "mig_share": share}


def _report_bandwidth(res, device, nbytes, per_gpu):
    first = per_gpu[0]
    f = res.figures
    for k in BANDWIDTH_KEYS:
        f[k] = first.get(k)
    f.update({"device": device, "gpu_name": first["name"] if device == "cuda" else None, "bytes": nbytes,
              "spec_gpu": first["sku"], "spec": first["spec"], "ratio": first["ratio"],
              "floor": dict((k, v.get("floor")) for k, v in first["verdict"].items()),
              "pcie": first.get("pcie"),
              "verdict": dict((k, v["verdict"]) for k, v in first["verdict"].items()), "per_gpu": per_gpu})
    unjudged = sorted(set("%s %s" % (g["name"], k.split("_")[0]) for g in per_gpu
                          for k, v in g["verdict"].items() if v["verdict"] == "no reference"))
    if unjudged:
        res.warn("bandwidth not judged, no reference (measured only): " + ", ".join(unjudged))
    for g in per_gpu:
        res.note("%s (%s): d2d %s, h2d %s, d2h %s GB/s; host memory %s; link %s; %s" % (
            g["name"], g["device"], _fmt(g.get("d2d_gbs")), _fmt(g.get("h2d_gbs")), _fmt(g.get("d2h_gbs")),
            (g.get("numa") or {}).get("note") or "-",
            "gen %s/%s x%s/x%s" % tuple((g.get("pcie") or {}).get(k) for k in
                                        ("gen_current", "gen_max", "width_current", "width_max"))
            if g.get("pcie") else "-",
            "; ".join("%s %s (%s)" % (k.split("_")[0], v["verdict"], v.get("why", ""))
                      for k, v in sorted(g["verdict"].items())) or "not judged (cpu)"))
    res.summary = "%s: d2d %s, h2d %s, d2h %s GB/s%s" % (
        f["gpu_name"] or "cpu", _fmt(f["d2d_gbs"]), _fmt(f["h2d_gbs"]), _fmt(f["d2h_gbs"]),
        (" (%s)" % ", ".join("%s %s" % (k.split("_")[0], v) for k, v in sorted(f["verdict"].items())))
        if f["verdict"] else "")
