"""inference: classify an image with ResNet50 and report the top-5 with
ImageNet class names; check that GPU and CPU agree.

Weights come from ``--weights DIR`` or the torch hub cache
(``$TORCH_HOME/hub/checkpoints``), never from the network: the file names of
torchvision's ResNet50 checkpoints (resnet50-0676ba61.pth = IMAGENET1K_V1,
resnet50-11ad3fa6.pth = IMAGENET1K_V2), else any resnet50*.pth.  Without
weights the classification is skipped with that reason.  Either way the same
randomly initialised ResNet50 runs on the GPU and on the CPU (TF32 off) and
their logits must agree (relative error < 1e-3, same top-1).

Status: in GPU mode the GPU/CPU agreement decides (a missing GPU fails); in
``--device cpu`` mode a done classification passes, otherwise the check is
skipped with the reasons.
"""

from __future__ import annotations

import glob
import os
import warnings
from typing import Any

from .. import resources, timing
from .torch_checks import tf32_flags

DEFAULT_IMAGE = ("data", "grace_hopper.jpg")  # in the package (validate/resources.py)
TOP5_FILE = "inference_top5.txt"
AGREE_TOL = 1e-3


def find_weights(torch, weights_dir):
    """(path, weights-enum member name or None, where) or (None, None, searched)."""
    dirs = []
    if weights_dir:
        dirs.append(weights_dir)
    try:
        dirs.append(os.path.join(torch.hub.get_dir(), "checkpoints"))
    except Exception:
        pass
    known = {"resnet50-0676ba61.pth": "IMAGENET1K_V1", "resnet50-11ad3fa6.pth": "IMAGENET1K_V2"}
    for d in dirs:
        for fname, member in known.items():
            p = os.path.join(d, fname)
            if os.path.isfile(p):
                return p, member, d
        others = sorted(glob.glob(os.path.join(d, "resnet50*.pth")) + glob.glob(os.path.join(d, "resnet50*.pt")))
        if others:
            return others[0], None, d
    return None, None, dirs


def load_image(tv, path, transform):
    try:
        from PIL import Image

        with Image.open(path) as im:
            return transform(im.convert("RGB"))
    except ImportError:
        img = tv.io.read_image(path, mode=tv.io.ImageReadMode.RGB)
        return transform(img)


def _set_tf32(torch, matmul, cudnn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn


def _device(ctx, res):
    """(use CUDA, why the GPU is not usable or None); a problem in GPU mode without one."""
    mode = ctx.device_mode
    gpu_reason = ctx.gpu_unavailable_reason() if mode != "cpu" else None
    use_cuda = mode != "cpu" and gpu_reason is None
    if mode == "cuda" and gpu_reason:
        res.problem("CUDA requested (--device cuda) but not available: %s" % gpu_reason)
    elif mode == "auto" and gpu_reason:
        res.problem("CUDA not available (%s): GPU/CPU agreement not checked" % gpu_reason)
    ctx.device_used = ctx.device_used or ("cuda" if use_cuda else "cpu")
    return use_cuda, gpu_reason


def _trained_model(ctx, torch, tv, path):
    ctx.progress("loading %s" % path)
    model = tv.models.resnet50(weights=None)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # torch < 1.13 has no weights_only
        state = torch.load(path, map_location="cpu")
    model.load_state_dict(state)
    model.eval()
    return model


def _probabilities(ctx, torch, model, batch, devs, cls):
    """Class probabilities on each device, each device's batch-1 latency into ``cls``."""
    outputs = {}
    with torch.inference_mode():
        for d in devs:
            m = model.to(d)
            outputs[d] = torch.softmax(m(batch.to(d)).float(), dim=1)[0].cpu()
            lat = timing.measure(lambda: m(batch.to(d)), 1, max(1, min(ctx.opts.iters, 10)), d)
            cls.setdefault("latency_ms", {})[d] = lat["median"]
    return outputs


def _classify(ctx, res, torch, tv, image, use_cuda, cls):
    """1. The image classified with real weights, into ``cls`` (a warning and a skip without them)."""
    from torchvision.models import ResNet50_Weights

    path, member, where = find_weights(torch, ctx.opts.weights)
    if path is None:
        cls["status"] = "skip"
        cls["reason"] = "no ResNet50 weights in %s (offline: never downloaded; pass --weights DIR)" % (
            " or ".join(where) or "--weights")
        res.warn("classification skipped: " + cls["reason"])
        return
    wenum = getattr(ResNet50_Weights, member) if member else ResNet50_Weights.IMAGENET1K_V1
    categories = wenum.meta["categories"]
    model = _trained_model(ctx, torch, tv, path)
    batch = load_image(tv, image, wenum.transforms()).unsqueeze(0)
    devs = ["cuda", "cpu"] if use_cuda else ["cpu"]
    outputs = _probabilities(ctx, torch, model, batch, devs, cls)
    top = torch.topk(outputs[devs[0]], 5)
    cls.update({"status": "done", "weights": path, "weights_tag": member, "device": devs[0],
                "top5": [{"index": int(i), "class": categories[int(i)], "prob": float(p)}
                         for p, i in zip(top.values, top.indices)]})
    lines = ["%s (%s) on %s, weights %s" % (os.path.basename(image), image, devs[0], path)]
    lines += ["%-28s %6.2f%%" % (t["class"], 100 * t["prob"]) for t in cls["top5"]]
    with open(ctx.artefact(res, TOP5_FILE), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    for line in lines:
        res.note(line)
    if use_cuda:
        cpu_top = torch.topk(outputs["cpu"], 5).indices.tolist()
        cls["cpu_top5_same"] = cpu_top == top.indices.tolist()
        if cpu_top[0] != int(top.indices[0]):
            res.problem("trained ResNet50: GPU top-1 %s, CPU top-1 %s" % (
                categories[int(top.indices[0])], categories[cpu_top[0]]))


def _agreement(res, torch, tv, use_cuda, gpu_reason):
    """2. GPU vs CPU on the same randomly initialised model (TF32 off)."""
    if not use_cuda:
        return {"status": "skip", "reason": gpu_reason or "--device cpu"}
    torch.manual_seed(0)
    model = tv.models.resnet50(weights=None).eval()
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    prev = tf32_flags(torch)
    _set_tf32(torch, False, False)
    try:
        with torch.inference_mode():
            ref = model(x).double()
            got = model.to("cuda")(x.to("cuda")).double().cpu()
    finally:
        _set_tf32(torch, bool(prev.get("matmul_allow_tf32")), bool(prev.get("cudnn_allow_tf32")))
    rel = float((got - ref).abs().max() / ref.abs().max())
    same_top1 = got.argmax(1).tolist() == ref.argmax(1).tolist()
    res.note("random-init ResNet50, GPU vs CPU: rel. error %.2g (tol %g), same top-1: %s"
             % (rel, AGREE_TOL, same_top1))
    if rel > AGREE_TOL or not same_top1:
        res.problem("GPU and CPU outputs differ: rel. error %.2g, same top-1 %s" % (rel, same_top1))
    return {"status": "done", "rel_error": rel, "tolerance": AGREE_TOL, "same_top1": same_top1}


def _summarise(res, image, cls, agree, mode):
    if cls.get("status") == "done":
        t = cls["top5"][0]
        res.summary = "%s: %s %.1f%%" % (os.path.basename(image), t["class"], 100 * t["prob"])
        if agree.get("status") == "done":
            res.summary += "; GPU=CPU (rel. error %.1g)" % agree["rel_error"]
    elif agree.get("status") == "done":
        res.summary = "GPU=CPU on random-init ResNet50 (rel. error %.1g); classification skipped: no weights" % (
            agree["rel_error"])
    else:
        res.summary = ""
        if mode == "cpu":
            res.skip("%s; GPU/CPU agreement not applicable with --device cpu" % cls["reason"])


def run(ctx, res):
    torch = ctx.torch()
    tv = ctx.torchvision()
    f = res.figures
    use_cuda, gpu_reason = _device(ctx, res)
    image = ctx.opts.image or resources.resource(*DEFAULT_IMAGE)
    f["image"] = image
    cls: dict[str, Any] = {}
    f["classification"] = cls  # filled as it goes: what a failure midway leaves is recorded
    _classify(ctx, res, torch, tv, image, use_cuda, cls)
    agree: dict[str, Any] = {}
    f["gpu_cpu_agreement"] = agree
    agree.update(_agreement(res, torch, tv, use_cuda, gpu_reason))
    _summarise(res, image, cls, agree, ctx.device_mode)
