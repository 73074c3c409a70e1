"""fusion: does kernel fusion work, and what does it buy?

A row-wise softmax written as five separate tensor ops (max, subtract, exp,
sum, divide) and daxpy (alpha*x + y) run three ways: eager ("naive"),
TorchScript (torch.jit.script, which fuses element-wise chains on the GPU) and
torch.compile (Inductor; on the CPU its C++ build costs tens of seconds per
function, so it only runs there with GPUPROV_VALIDATE_COMPILE=1).  Each result
must match a float64 reference with allclose; each is timed with
torch.utils.benchmark (blocked_autorange), and torch.softmax is timed as the
library baseline.  Optional check.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from .. import timing

RTOL = 1e-5
ATOL = 1e-6


def naive_softmax(x):
    row_max = x.max(dim=1)[0]
    shifted = x - row_max[:, None]
    num = shifted.exp()
    den = num.sum(dim=1)
    return num / den[:, None]


def daxpy(alpha, x, y):
    return alpha * x + y


def _variants(torch, fn, device):
    out: list[tuple[str, Any, Any]] = [("naive", fn, None)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(("scripted", torch.jit.script(fn), None))
    except Exception as exc:
        out.append(("scripted", None, "torch.jit.script failed: %s" % str(exc).splitlines()[0]))
    if not hasattr(torch, "compile"):
        out.append(("compiled", None, "torch.compile not available in torch %s" % torch.__version__))
    elif device == "cpu" and os.environ.get("GPUPROV_VALIDATE_COMPILE") != "1":
        out.append(("compiled", None, "skipped on the CPU (Inductor's C++ build takes ~30 s per function "
                                      "on a small machine; set GPUPROV_VALIDATE_COMPILE=1)"))
    else:
        out.append(("compiled", torch.compile(fn), None))
    return out


def run(ctx, res):
    torch = ctx.torch()
    device = ctx.device(res)
    n = 4096 if device == "cuda" else 1024
    min_time = max(0.05, min(1.0, ctx.opts.iters * 0.01))
    f = res.figures
    f.update({"device": device, "shape": [n, n], "min_run_time_s": min_time, "timer": "torch.utils.benchmark"})
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, n, generator=gen).to(device)
    y = torch.randn(n, n, generator=gen).to(device)
    alpha = torch.rand(1, generator=gen).to(device)
    ref_soft = torch.softmax(x.double(), dim=1)
    ref_daxpy = alpha.double() * x.double() + y.double()
    cases = {
        "softmax": (naive_softmax, (x,), ref_soft, lambda: torch.softmax(x, dim=1)),
        "daxpy": (daxpy, (alpha, x, y), ref_daxpy, lambda: torch.add(y, x, alpha=float(alpha))),
    }
    summary = []
    for case, (fn, args, ref, library) in cases.items():
        entry = {}
        for name, impl, skipped in _variants(torch, fn, device):
            if impl is None:
                entry[name] = {"skipped": skipped}
                res.note("%s %s: %s" % (case, name, skipped))
                continue
            ctx.progress("%s %s" % (case, name))
            try:
                got = impl(*args)
                ok = bool(torch.allclose(got.double(), ref, rtol=RTOL, atol=ATOL))
                err = float((got.double() - ref).abs().max())
                tb = timing.torch_benchmark(lambda: impl(*args), min_time, label=case, sub_label=name,
                                            description=device)
            except Exception as exc:
                entry[name] = {"error": "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")}
                res.problem("%s %s raised %s" % (case, name, entry[name]["error"]))
                continue
            entry[name] = {"median_ms": tb["median"], "iqr_ms": tb["iqr"], "runs": tb["iters"],
                           "allclose": ok, "max_abs_error": err}
            if not ok:
                res.problem("%s %s does not match the float64 reference (max abs error %.2g)" % (case, name, err))
        tb = timing.torch_benchmark(library, min_time, label=case, sub_label="torch", description=device)
        entry["torch"] = {"median_ms": tb["median"], "iqr_ms": tb["iqr"], "runs": tb["iters"]}
        base = entry["naive"].get("median_ms")
        for name in ("scripted", "compiled", "torch"):
            m = entry.get(name, {}).get("median_ms")
            if base and m:
                entry[name]["speedup_vs_naive"] = base / m
        for name in ("naive", "scripted", "compiled", "torch"):
            e = entry.get(name, {})
            if "median_ms" in e:
                res.note("%s %-9s %.4f ms (IQR %.4f, %d runs)%s%s" % (
                    case, name, e["median_ms"], e["iqr_ms"], e["runs"],
                    "" if "allclose" not in e else (", allclose" if e["allclose"] else ", MISMATCH"),
                    (", %.2fx naive" % e["speedup_vs_naive"]) if "speedup_vs_naive" in e else ""))
        f[case] = entry
        best = max((k for k in ("scripted", "compiled") if "speedup_vs_naive" in entry.get(k, {})),
                   key=lambda k: entry[k]["speedup_vs_naive"], default=None)
        summary.append("%s naive %.3f ms%s" % (
            case, base or 0, (", %s %.2fx" % (best, entry[best]["speedup_vs_naive"])) if best else ""))
    res.summary = "; ".join(summary) + " (%s, %dx%d)" % (device, n, n)
