"""torch_import and torch_cuda.

torch_import: torch and torchvision import; versions, the CUDA version torch
was built with, cuDNN version as torch sees it, TF32 flags, the build's GPU
architectures; torch.__config__.show() as an artefact.

torch_cuda: torch.cuda.is_available() (never passes without it), device count
(vs --expect-gpus), per device name, capability, memory, SM count, whether the
build has kernels for it; torch.backends.cudnn.version(); a matmul+elementwise
op and a cuDNN convolution on every GPU compared with the CPU result.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import compat, torchenv, versions
from ..core import CheckFailed


def tf32_flags(torch):
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out["matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        except Exception:
            out["matmul_allow_tf32"] = None
        try:
            out["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        except Exception:
            out["cudnn_allow_tf32"] = None
        try:
            out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        except Exception:
            out["float32_matmul_precision"] = None
        # torch >= 2.9 has the fp32_precision API as well
        for key, obj in (("matmul_fp32_precision", getattr(torch.backends.cuda, "matmul", None)),
                         ("cudnn_fp32_precision", getattr(torch.backends, "cudnn", None))):
            val = getattr(obj, "fp32_precision", None) if obj is not None else None
            if val is not None:
                out[key] = str(val)
    return out


def cudnn_version(torch):
    try:
        v = torch.backends.cudnn.version()
    except Exception:
        v = None
    return v, versions.cudnn_version_string(v)


def run_import(ctx, res):
    torch = ctx.torch()
    f = res.figures
    f["torch"] = torch.__version__
    f["torch_path"] = getattr(torch, "__file__", None)
    f["build_cuda"] = getattr(torch.version, "cuda", None)
    f["build_hip"] = getattr(torch.version, "hip", None)
    f["cudnn_int"], f["cudnn"] = cudnn_version(torch)
    try:
        f["cudnn_available"] = bool(torch.backends.cudnn.is_available())
    except Exception:
        f["cudnn_available"] = False
    f["tf32"] = tf32_flags(torch)
    try:
        f["arch_list"] = torch.cuda.get_arch_list()
    except Exception:
        f["arch_list"] = []
    f["threads"] = torch.get_num_threads()
    f["numpy"] = torchenv.version_of("numpy")
    try:
        tv = torchenv.torchvision()
        f["torchvision"] = tv.__version__
    except torchenv.Missing as exc:
        f["torchvision"] = None
        res.problem(str(exc))
    try:
        with open(ctx.artefact(res, "torch_config.txt"), "w") as fh:
            fh.write(torch.__config__.show())
    except Exception as exc:
        res.note("torch.__config__.show() failed: %s" % exc)
    res.note("torch %s from %s" % (f["torch"], f["torch_path"]))
    res.note("built with CUDA %s, cuDNN %s (%s), archs %s" % (
        f["build_cuda"], f["cudnn"], f["cudnn_int"], " ".join(f["arch_list"]) or "-"))
    res.note("TF32: %s" % ", ".join("%s=%s" % kv for kv in sorted(f["tf32"].items())))
    res.note("torchvision %s, numpy %s, %d CPU threads" % (f["torchvision"], f["numpy"], f["threads"]))
    res.summary = "torch %s (CUDA %s, cuDNN %s), torchvision %s; TF32 matmul %s, cuDNN %s" % (
        f["torch"], f["build_cuda"] or "none", f["cudnn"] or "none", f["torchvision"] or "missing",
        "on" if f["tf32"].get("matmul_allow_tf32") else "off",
        "on" if f["tf32"].get("cudnn_allow_tf32") else "off")


def _compare(torch, a, b):
    """max |a-b| / max |b| (both moved to the CPU in float64)."""
    a = a.detach().double().cpu()
    b = b.detach().double().cpu()
    scale = float(b.abs().max()) or 1.0
    return float((a - b).abs().max()) / scale


def _device_record(torch, i, arch_list):
    """One GPU as torch sees it: name, capability, memory, SMs, and whether this build has
    kernels for it (``compat.kernel_support``)."""
    p = torch.cuda.get_device_properties(i)
    support, via = compat.kernel_support(p.major, p.minor, arch_list)
    free, _ = torch.cuda.mem_get_info(i)
    return {
        "index": i,
        "name": p.name,
        "capability": "%d.%d" % (p.major, p.minor),
        "memory_gib": round(p.total_memory / 2.0 ** 30, 2),
        "free_gib": round(free / 2.0 ** 30, 2),
        "multiprocessors": p.multi_processor_count,
        "arch_supported": support != compat.NONE,
        "arch_support": support,
        "arch_via": via,
    }


def _judge_kernels(res, dev, arch_list):
    """No kernels for the GPU in this build fails; PTX only (JIT by the driver) is a warning."""
    i, name = dev["index"], dev["name"]
    sm = "sm_%s" % dev["capability"].replace(".", "")
    if not dev["arch_supported"]:
        res.problem("GPU %d (%s, %s) has no kernels in this torch build (archs %s)"
                    % (i, name, sm, " ".join(arch_list)))
    elif dev["arch_support"] == compat.PTX:
        res.note("warning: GPU %d (%s): no %s-compatible cubin in this torch build, only PTX (%s), "
                 "JIT-compiled by the driver: slow first runs" % (i, name, sm, dev["arch_via"]))
        res.figures.setdefault("warnings", []).append("GPU %d: kernels by PTX JIT only (%s)" % (i, dev["arch_via"]))


def _judge_agreement(res, dev):
    """The GPU's matmul/elementwise op and cuDNN convolution against the CPU's (TF32 off)."""
    i = dev["index"]
    if dev["op_rel_error"] > 1e-4:
        res.problem("GPU %d: matmul/elementwise differs from the CPU (rel. error %.2g)" % (i, dev["op_rel_error"]))
    if dev["conv_rel_error"] > 1e-4:
        res.problem("GPU %d: cuDNN convolution differs from the CPU (rel. error %.2g)" % (i, dev["conv_rel_error"]))
    res.note("GPU %d: %s, cc %s, %.1f GiB (%.1f free), %d SMs, op rel. err %.2g, conv rel. err %.2g"
             % (i, dev["name"], dev["capability"], dev["memory_gib"], dev["free_gib"], dev["multiprocessors"],
                dev["op_rel_error"], dev["conv_rel_error"]))


def _set_tf32(torch, matmul, cudnn):
    """TF32 flags set (a None leaves one as it is)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if matmul is not None:
            torch.backends.cuda.matmul.allow_tf32 = matmul
        if cudnn is not None:
            torch.backends.cudnn.allow_tf32 = cudnn


def _each_gpu(ctx, res, torch, count, arch_list):
    """Every GPU's record, its op and convolution compared with the CPU's, judged in turn."""
    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(512, 512, generator=gen)
    b = torch.randn(512, 512, generator=gen)
    img = torch.randn(2, 3, 64, 64, generator=gen)
    w = torch.randn(16, 3, 3, 3, generator=gen)
    ref_op = torch.sin(a @ b) + torch.exp(-a.abs())
    ref_conv = torch.nn.functional.conv2d(img, w, padding=1)
    devices = []
    for i in range(count):
        dev = _device_record(torch, i, arch_list)
        d = torch.device("cuda", i)
        dev["op_rel_error"] = _compare(torch, torch.sin(a.to(d) @ b.to(d)) + torch.exp(-a.to(d).abs()), ref_op)
        dev["conv_rel_error"] = _compare(torch, torch.nn.functional.conv2d(img.to(d), w.to(d), padding=1), ref_conv)
        torch.cuda.synchronize(d)
        devices.append(dev)
        ctx.progress("GPU %d %s: op rel. error %.2g, conv %.2g" % (i, dev["name"], dev["op_rel_error"],
                                                                   dev["conv_rel_error"]))
        _judge_kernels(res, dev, arch_list)
        _judge_agreement(res, dev)
    return devices


def _arch_list(torch):
    try:
        return torch.cuda.get_arch_list()
    except Exception:
        return []


def run_cuda(ctx, res):
    torch = ctx.torch()
    state = torchenv.cuda_state()
    f = res.figures
    f["available"] = state["available"]
    f["device_count"] = state["count"]
    f["build_cuda"] = state["build_cuda"]
    f["cudnn_int"], f["cudnn"] = cudnn_version(torch)
    expect = ctx.opts.expect_gpus
    f["expected"] = expect
    if not state["available"]:
        f["reason"] = state["reason"]
        raise CheckFailed("CUDA not available: %s" % state["reason"])
    count = state["count"]
    if expect is not None and count != expect:
        res.problem("%d CUDA devices visible, expected %d" % (count, expect))
    arch_list = _arch_list(torch)
    prev = tf32_flags(torch)
    _set_tf32(torch, False, False)
    try:
        devices = _each_gpu(ctx, res, torch, count, arch_list)
    finally:
        _set_tf32(torch, prev.get("matmul_allow_tf32"), prev.get("cudnn_allow_tf32"))
    f["devices"] = devices
    names = sorted(set(d["name"] for d in devices))
    res.summary = "%dx %s (cc %s, %.1f GiB), cuDNN %s; ops match the CPU" % (
        count, "/".join(names), devices[0]["capability"] if devices else "?",
        devices[0]["memory_gib"] if devices else 0, f["cudnn"])
