"""stress: GEMMs on every GPU at once for ``--stress-seconds``, every result
checked, clocks/power/temperature/throttle sampled under the load.

One thread per GPU (each on its own device and stream) repeats C = A.B in
the GPU's tensor-core format (n=8192; a 256x256 fp32 product on the CPU):
bf16 from compute capability 8 (torch.cuda.is_bf16_supported's own test,
major >= 8), fp16 on Volta/Turing (V100, T4: fp16 tensor cores, no bf16),
fp32 before.  The first product is
verified in full (validate/verify.py); every later one must equal it bit for
bit, as gpu-burn compares each result with its reference: cuBLAS gives "the
same bit-wise results at every run when executed on GPUs with the same
architecture and the same number of SMs" (cuBLAS docs, "Results
reproducibility"), so any difference, NaN or Inf is a fault.  nvidia-smi is
read every second meanwhile (validate/gpusample.py).  Fails on a mismatch,
on thermal / power-brake / HW slowdown seen under load (NVML clock event
reasons; SW power cap is the normal limit of a GEMM and passes, as in
Azure's azure_gpu_clock_throttling.nhc), and on a GPU whose throughput is
below 0.8 x the median of its peers of the same model (PEER_FRACTION; an
A100 next to H100s is not slow, it is an A100), below its model's sustained
GEMM floor, and on a GPU drawing less power under the load than its model's
floor (DCGM's targeted_power rule, validate/expectations.py) while its
enforced power limit allows it.

Why bit for bit is right here: each GPU runs one stream, one thread and one
cuBLAS handle, the condition of cuBLAS's guarantee (it "holds when a single
CUDA stream is active only").  gpu-burn does the same in effect: its
compare.cu allows |C - C_ref| <= 0.001 on products of about 10^5, below one
fp32 ulp there, with the comment "there are no rounding errors due to results
being accumulated in an arbitrary order".  On the CPU (CI only) BLAS gives no
such guarantee (oneMKL: "may produce slightly different results depending on
the ordering of internal operations"), which a fixed thread count and the
same buffers make unlikely but not impossible.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from .. import actions, expectations, gpusample, host, verify
from ..smi import BAD_THROTTLE
from .gpu_health import sku_of

GPU_N = 8192
CPU_N = 256


def gemm_mode(major):
    """The format a GPU of compute capability ``major`` stresses its tensor
    cores in: "bf16", "fp16" or "fp32" (a verify.ROUNDOFF key)."""
    if major >= 8:
        return "bf16"
    if major == 7:
        return "fp16"
    return "fp32"


# Peers cannot see a GPU that is alone, or a node that is slow as a whole: the
# sustained rate is also held against the model's "stress_bf16_tflops" cell
# (validate/expectations.py: half of the public bf16 figure).
# A GPU below this fraction of its peers' median is slow: 5 % and more spread
# between the GPUs of one node is normal (ml-engineering, "Not all accelerators
# are created equal"); the 0.8 is ours, unsourced.
PEER_FRACTION = 0.8


def expected_tflops(model, share, mode):
    """The table's cell a healthy GPU of ``model`` sustains in ``mode``
    (scaled for a MIG slice), or None when nobody measured it."""
    return expectations.cell(model, "stress_%s_tflops" % mode, share)


def power_verdict(model, share, sampled):
    """DCGM's targeted_power rule on the highest power drawn under the load:
    not judged for a MIG slice, or when the enforced limit is below the
    floor (DCGM: then only informational)."""
    expected = None if share else expectations.cell(model, "power_w")
    drawn = sampled.get("power_max_w")
    if drawn is None:
        return None
    limit = sampled.get("power_limit_w")
    if expected and limit is not None and limit < expected["floor"]:
        return expectations.verdict(None, drawn, "power limit %.0f W is below the floor %.0f W"
                                    % (limit, expected["floor"]))
    return expectations.verdict(expected, drawn)


def _error(g, peers, fraction):
    return "%s: %s" % (g["label"], g["error"]) if g.get("error") else None


def _mismatches(g, peers, fraction):
    if not g.get("mismatches"):
        return None
    return "%s: %d of %d results differ from the verified first product" % (
        g["label"], g["mismatches"], g["iterations"])


def _throttled(g, peers, fraction):
    seen: set[str] = set()
    for row in g.get("samples") or []:
        seen.update(r for r in (row.get("throttle") or []) if r in BAD_THROTTLE)
    return "%s: clocks held back under load by %s" % (g["label"], ", ".join(sorted(seen))) if seen else None


def _below_peers(g, peers, fraction):
    speeds = peers.get(g.get("name"), [])
    peer = statistics.median(speeds) if len(speeds) > 1 else None
    if not peer or g.get("tflops") is None or g["tflops"] >= fraction * peer:
        return None
    return "%s: %.1f TFLOPS under load, below %.0f%% of its peers' median %.1f (%d x %s)" % (
        g["label"], g["tflops"], 100 * fraction, peer, len(speeds), g.get("name"))


def _below_floor(g, peers, fraction):
    e = g.get("expected")
    if not e or g.get("tflops") is None or expectations.verdict(e, g["tflops"])["verdict"] != "fail":
        return None
    return "%s: %.1f TFLOPS under load, below %.1f (%s on a healthy %s: %s)" % (
        g["label"], g["tflops"], e["floor"], e["rule"], g.get("name"), e["source"])


def _low_power(g, peers, fraction):
    power = g.get("power")
    if not power or power["verdict"] != "fail":
        return None
    return "%s: drew at most %.0f W under load, below %.0f (%s: %s)" % (
        g["label"], power["value"], power["floor"], power["rule"], power["source"])


# What fails a GPU under load, in the order its problems are listed: each rule gets the GPU's
# entry, its peers' TFLOPS by model name and the peer fraction, and says a problem or None.
RULES = (_error, _mismatches, _throttled, _below_peers, _below_floor, _low_power)


def judge(per_gpu, fraction=PEER_FRACTION):
    """Problems for a stress run.  ``per_gpu``: [{"label", "name", "tflops",
    "mismatches", "expected": expected_tflops(...) or None, "samples": [typed
    nvidia-smi rows], "power": power_verdict(...) or None}]."""
    peers: dict[Any, list[float]] = {}
    for g in per_gpu:
        if g.get("tflops"):
            peers.setdefault(g.get("name"), []).append(g["tflops"])
    said = (rule(g, peers, fraction) for g in per_gpu for rule in RULES)
    return [p for p in said if p is not None]


def summarize_samples(rows):
    """Per-GPU figures from the sampled rows."""
    def vals(key):
        return [r[key] for r in rows if r.get(key) is not None]

    clocks = vals("clocks.sm")
    out: dict[str, Any] = {"samples": len(rows)}
    if clocks:
        out.update(sm_clock_min_mhz=min(clocks), sm_clock_median_mhz=statistics.median(clocks))
    for key, name in (("temperature.gpu", "temperature_max_c"), ("power.draw", "power_max_w")):
        v = vals(key)
        if v:
            out[name] = max(v)
    limit = vals("power.limit")
    if limit:
        out["power_limit_w"] = limit[-1]
    reasons: set[str] = set()
    for r in rows:
        reasons.update(r.get("throttle") or [])
    out["throttle_seen"] = sorted(reasons)
    return out


def _worker(torch, dev, n, mode, seconds, out):
    try:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[mode]
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen).to(dev, dtype)
        b = torch.randn(n, n, generator=gen).to(dev, dtype)
        ref = torch.mm(a, b)
        ok, err = verify.product_ok(torch, a, b, ref, mode)
        out["check_error"] = err
        if not ok:
            out["error"] = "the first product is wrong (error %.3g x its rounding tolerance)" % err
            return
        c = torch.empty_like(ref)
        bad = torch.zeros((), dtype=torch.int64, device=dev)
        cuda = str(dev).startswith("cuda")
        iters = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                torch.mm(a, b, out=c)
                bad += (c != ref).any().to(torch.int64)  # NaN != NaN: counted too
                iters += 1
            if cuda:
                torch.cuda.synchronize(dev)
        elapsed = time.perf_counter() - t0
        out["iterations"] = iters
        out["mismatches"] = int(bad)
        out["tflops"] = 2.0 * n ** 3 * iters / elapsed / 1e12
        out["seconds"] = elapsed
    except Exception as exc:  # an OOM or a dead GPU: the GPU's own result
        out["error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")


def _targets(torch, device):
    """([(device, torch's properties or None)], names, GEMM modes, n)."""
    if device != "cuda":
        return [("cpu", None)], ["cpu"], ["fp32"], CPU_N
    targets = [("cuda:%d" % i, torch.cuda.get_device_properties(i)) for i in range(torch.cuda.device_count())]
    return targets, [p.name for _, p in targets], [gemm_mode(p.major) for _, p in targets], GPU_N


def _entries(targets, names, modes, ids):
    """Each device's entry: its label, model, MIG share, dtype and expected TFLOPS."""
    results = []
    for (dev, p), name, m in zip(targets, names, modes):
        model, _, share = sku_of(name, p, ids.get(gpusample.torch_bus_key(p))) if p else (None, {}, None)
        results.append({"label": "GPU %s" % dev.split(":")[-1] if dev != "cpu" else "cpu", "device": dev,
                        "name": name, "model": model, "mig_share": share, "dtype": m,
                        "expected": expected_tflops(model, share, m) if p else None})
    return results


def _load(torch, targets, results, n, seconds, smi):
    """One GEMM thread per device, all at once, nvidia-smi sampling meanwhile; each entry gets
    its samples, their summary and its power verdict."""
    with gpusample.Sampler(smi) as sampler:
        threads = [threading.Thread(target=_worker, args=(torch, dev, n, out["dtype"], seconds, out))
                   for (dev, _), out in zip(targets, results)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for (_, props), g in zip(targets, results):
        key = gpusample.torch_bus_key(props) if props is not None else None
        g["samples"] = sampler.for_gpu(key) if key is not None else []
        g["sampled"] = summarize_samples(g["samples"])
        g["power"] = power_verdict(g.get("model"), g.get("mig_share"), g["sampled"]) if props is not None else None


def _note(g):
    s = g["sampled"]
    return ("%s: %s %s TFLOPS (floor %s), %s iterations, %s mismatches; SM clock min %s MHz, max %s C, "
            "max %s W, throttle %s"
            % (g["label"], g["dtype"], "%.1f" % g["tflops"] if g.get("tflops") else "-",
               "%.1f" % g["expected"]["floor"] if g.get("expected") else "none",
               g.get("iterations", "-"),
               g.get("mismatches", "-"), s.get("sm_clock_min_mhz", "-"), s.get("temperature_max_c", "-"),
               s.get("power_max_w", "-"), ",".join(s.get("throttle_seen") or []) or "-"))


def _summary(results, seconds, mode, n):
    return "%d device(s), %.0f s %s GEMM n=%d: %s" % (
        len(results), seconds, mode, n,
        ", ".join("%s %s TFLOPS%s" % (g["label"], "%.1f" % g["tflops"] if g.get("tflops") else "-",
                                       (" %s C" % g["sampled"]["temperature_max_c"])
                                       if g["sampled"].get("temperature_max_c") is not None else "")
                  for g in results))


def run(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    seconds = ctx.opts.stress_seconds
    targets, names, modes, n = _targets(torch, device)
    mode = "/".join(sorted(set(modes)))
    smi = host.find_nvidia_smi() if device == "cuda" else None
    ctx.progress("%d x %s GEMM n=%d on %d device(s) for %.0f s" % (2, mode, n, len(targets), seconds))
    results = _entries(targets, names, modes, gpusample.pci_ids(smi))
    _load(torch, targets, results, n, seconds, smi)
    for p in judge(results):
        # wrong products, throttling or a GPU far below its peers under load:
        # the GPU (or its cooling / power) needs hands on it
        res.problem(p, actions.DRAIN_RMA)
    res.figures.update({"device": device, "n": n, "dtype": mode, "seconds": seconds,
                        "sampled_by": "nvidia-smi every 1 s" if smi else None,
                        "per_gpu": [dict((k, v) for k, v in g.items() if k != "samples") for g in results]})
    if not smi:
        res.note("clocks, power and temperature not sampled: no nvidia-smi")
    for g in results:
        res.note(_note(g))
    res.summary = _summary(results, seconds, mode, n)
