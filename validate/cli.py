"""Command line: ``python3 -m validate --out DIR [options]``.

Exit status: 0 when every required check passed, 1 otherwise ("not
validated"), 2 for bad command-line input (one line on stderr), 130 when
interrupted (results so far are written).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import sys
import time
from typing import Any

from . import TOOL, __version__, expectations, host, infiniband, output, profile, torchenv
from .core import CHECK_NAMES, CHECKS, PASS, SKIP, Context, Result, apply_warn_only, not_selected, run_check
from .specs import DEFAULT_FLOOR

# `--models classic`: the 31 classic ImageNet classifiers of torchvision's first model zoo
# (AlexNet, VGG, ResNet, DenseNet, MobileNet...), the set the original bench_all.sh timed, in
# its order; comparable with bench_torch.log files written by that script.
CLASSIC_MODELS = [
    "alexnet", "densenet121", "densenet161", "densenet169", "densenet201",
    "mnasnet0_5", "mnasnet1_0", "mobilenet_v2", "mobilenet_v3_large",
    "mobilenet_v3_small", "resnet101", "resnet152", "resnet18", "resnet34",
    "resnet50", "resnext101_32x8d", "resnext50_32x4d", "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0", "squeezenet1_0", "squeezenet1_1", "vgg11", "vgg11_bn",
    "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "wide_resnet101_2", "wide_resnet50_2",
]
# --quick: a few models that span small and large.
QUICK_MODELS = ["resnet50", "resnet18", "mobilenet_v3_small"]

# Defaults that depend on where the work runs.  On a GPU the original script's numbers are
# honoured (10 warm-up, 100 timed runs); on a CPU the same protocol would take
# most of an hour for the classic list, so fewer runs and a smaller batch.
GPU_DEFAULTS = {"warmup": 10, "iters": 100, "batch": [1, 64], "stress_seconds": 60.0, "stress_seconds_quick": 15.0}
CPU_DEFAULTS = {"warmup": 2, "iters": 10, "batch": [1, 8], "stress_seconds": 2.0, "stress_seconds_quick": 2.0}


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _csv_list(text):
    return [p.strip() for p in text.split(",") if p.strip()]


def build_parser():
    p = _Parser(
        prog="python3 -m validate",
        description="Validate a GPU instance: cuDNN sample, torch CUDA checks, benchmarks, GPU health.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    p.add_argument("--checks", metavar="A,B",
                   help="run only these checks (they become required, unless one cannot apply here: "
                        "p2p on one GPU, fabric without NVSwitch; that one is reported n/a and not counted)")
    p.add_argument("--skip", metavar="A,B", help="do not run these checks")
    p.add_argument("--models", metavar="LIST|classic|all",
                   help="bench models: comma list, 'classic' (the 31 classic torchvision classifiers, "
                        "default; 'seed' is the old name) or 'all'")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="auto (default): the GPU, and a machine without one is not validated")
    p.add_argument("--warmup", type=int, metavar="N", help="untimed runs before timing (GPU 10, CPU 2)")
    p.add_argument("--iters", type=int, metavar="N", help="timed runs per measurement (GPU 100, CPU 10)")
    p.add_argument("--batch", metavar="1,64",
                   help="batch sizes: 1 for latency, the largest for throughput (GPU 1,64; CPU 1,8)")
    p.add_argument("--amp", action="store_true",
                   help="also time batch-1 latency under AMP (GPU) / measure bf16 AMP throughput (CPU)")
    p.add_argument("--weights", metavar="DIR", help="folder with ResNet50 weights (resnet50-*.pth)")
    p.add_argument("--image", metavar="PATH", help="image to classify (default: the packaged photo)")
    p.add_argument("--expect-gpus", type=int, metavar="N", dest="expect_gpus",
                   help="fail unless exactly N GPUs are visible")
    p.add_argument("--quick", action="store_true",
                   help="system, cudnn_*, torch_*, stress (15 s), xid, and bench with a few models")
    p.add_argument("--floor", type=float, default=DEFAULT_FLOOR, metavar="F",
                   help="ignored: kept for old command lines; the floors are validate/expectations.py's")
    p.add_argument("--stress-seconds", type=float, metavar="S", dest="stress_seconds",
                   help="duration of the stress check (GPU: 60, 15 with --quick; CPU: 2)")
    p.add_argument("--kernel-log", metavar="PATH", dest="kernel_log",
                   help="kernel log to scan for Xid errors (default: journalctl -k -b, else dmesg)")
    p.add_argument("--profile", metavar="FILE|JSON",
                   help="the node's profile: expected GPUs, PCIe, IB ports, floors, tolerance, waivers "
                        "(validate/profile.py; gpuprov passes the inventory's node_profile)")
    p.add_argument("--sysfs-root", metavar="DIR", dest="sysfs_root",
                   help="read InfiniBand ports from DIR/class/infiniband (a recorded tree; default /sys)")
    p.add_argument("--version", action="version", version="%s %s" % (TOOL, __version__))
    return p


def _check_list(opts, attr):
    """--checks / --skip as a list of known check names (None when not given)."""
    raw = getattr(opts, attr)
    names = _csv_list(raw) if raw is not None else None
    if raw is not None and not names:
        raise UsageError("--%s needs at least one check name" % attr)
    for n in names or []:
        if n not in CHECK_NAMES:
            raise UsageError("unknown check %r in --%s (known: %s)" % (n, attr, ",".join(CHECK_NAMES)))
    return names


def _batch_sizes(raw):
    """--batch as sorted distinct positive integers."""
    try:
        batches = [int(b) for b in _csv_list(raw)]
    except ValueError:
        raise UsageError("--batch takes comma-separated positive integers, got %r" % raw) from None
    if not batches or any(b < 1 for b in batches):
        raise UsageError("--batch takes comma-separated positive integers, got %r" % raw)
    return sorted(set(batches))


def parse_args(argv):
    """Options, each checked after argparse: one ``UsageError`` line naming the option."""
    opts = build_parser().parse_args(argv)
    for attr in ("checks", "skip"):
        setattr(opts, attr, _check_list(opts, attr))
    if opts.warmup is not None and opts.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    if opts.iters is not None and opts.iters < 1:
        raise UsageError("--iters must be >= 1")
    if opts.batch is not None:
        opts.batch = _batch_sizes(opts.batch)
    if opts.expect_gpus is not None and opts.expect_gpus < 0:
        raise UsageError("--expect-gpus must be >= 0")
    if not (0.0 < opts.floor <= 1.0):
        raise UsageError("--floor must be in (0, 1]")
    if opts.stress_seconds is not None and not opts.stress_seconds > 0:
        raise UsageError("--stress-seconds must be > 0")
    if opts.kernel_log is not None and not os.path.isfile(opts.kernel_log):
        raise UsageError("--kernel-log %s: no such file" % opts.kernel_log)
    if opts.sysfs_root is not None and not os.path.isdir(opts.sysfs_root):
        raise UsageError("--sysfs-root %s: not a folder" % opts.sysfs_root)
    opts.profile_doc = None
    if opts.profile is not None:
        try:
            opts.profile_doc = profile.load(opts.profile, CHECK_NAMES)
        except profile.BadProfile as exc:
            raise UsageError(str(exc)) from None
    if opts.weights is not None and not os.path.isdir(opts.weights):
        raise UsageError("--weights %s: not a folder" % opts.weights)
    if opts.image is not None and not os.path.isfile(opts.image):
        raise UsageError("--image %s: no such file" % opts.image)
    if os.path.exists(opts.out) and not os.path.isdir(opts.out):
        raise UsageError("--out %s: exists and is not a folder" % opts.out)
    opts.model_list = resolve_models(opts)
    return opts


def resolve_models(opts):
    """``--models`` as a list of names (None: 'all', which the bench check resolves).  The
    names are checked against torchvision only when the bench check, their one user, is
    selected: ``--checks xid --models resnet50`` imports no torch (seconds, and a broken
    torch would end a run that never uses it)."""
    spec = opts.models
    if spec is None:
        return list(QUICK_MODELS) if opts.quick else list(CLASSIC_MODELS)
    if spec in ("classic", "seed"):  # "seed": the option's old spelling, kept working
        return list(CLASSIC_MODELS)
    if spec == "all":
        return None  # resolved by the bench check from torchvision itself
    names = _csv_list(spec)
    if not names:
        raise UsageError("--models needs a list, 'classic' or 'all'")
    for n in names:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", n):
            raise UsageError("--models: %r is not a model name" % n)
    benched = any(chosen for check, chosen, _, _ in select(opts) if check.name == "bench")
    known = _known_models() if benched else None
    if known is not None:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError("--models: unknown torchvision model(s) %s" % ",".join(unknown))
    return names


def _known_models():
    try:
        tv = torchenv.torchvision()
    except torchenv.Missing:
        return None  # cannot check here; the bench check reports it
    try:
        return set(tv.models.list_models(module=tv.models))
    except Exception:
        return set(n for n in dir(tv.models) if not n.startswith("_"))


def needs_torch(plan):
    """Whether a selected check of ``plan`` (``select``) imports torch (``Spec.torch``)."""
    return any(chosen and spec.torch for spec, chosen, _, _ in plan)


def resolve_defaults(opts, torch_needed=True):
    """Fill warm-up/iterations/batch from the device the run will use.  Without a
    check that uses torch (``torch_needed`` false) they stay as given (None: not
    used), and torch is not asked."""
    if not torch_needed:
        return
    gpu = False
    if opts.device != "cpu":
        gpu = torchenv.cuda_state()["available"]
    base = GPU_DEFAULTS if gpu else CPU_DEFAULTS
    if opts.warmup is None:
        opts.warmup = base["warmup"]
    if opts.iters is None:
        opts.iters = base["iters"]
    if opts.batch is None:
        opts.batch = list(base["batch"])  # type: ignore[call-overload]  # base: a dict of mixed values
    if opts.stress_seconds is None:
        opts.stress_seconds = base["stress_seconds_quick" if opts.quick else "stress_seconds"]


def select(opts):
    """[(spec, selected, required, why-not)] in the fixed check order."""
    explicit = set(opts.checks or [])
    out = []
    for spec in CHECKS:
        if opts.checks is not None:
            chosen = spec.name in explicit
            why = "not selected (--checks)"
        elif opts.quick:
            chosen = spec.quick
            why = "not part of --quick"
        else:
            chosen = True
            why = ""
        if chosen and opts.skip and spec.name in opts.skip:
            chosen = False
            why = "skipped (--skip)"
        required = spec.required(opts.device) or spec.name in explicit
        out.append((spec, chosen, required, why))
    return out


def options_document(opts):
    return {
        "out": opts.out,
        "checks": opts.checks,
        "skip": opts.skip,
        "models": opts.models if opts.models is not None else ("quick" if opts.quick else "classic"),
        "model_list": opts.model_list,
        "device": opts.device,
        "warmup": opts.warmup,
        "iters": opts.iters,
        "batch": opts.batch,
        "amp": opts.amp,
        "weights": opts.weights,
        "image": opts.image,
        "expect_gpus": opts.expect_gpus,
        "quick": opts.quick,
        "floor": opts.floor,
        "stress_seconds": opts.stress_seconds,
        "kernel_log": opts.kernel_log,
        "profile": opts.profile_doc["document"] if opts.profile_doc else None,
        "sysfs_root": opts.sysfs_root,
    }


def host_document(ctx, torch_needed=True):
    """What the run saw of the host.  Without a check that uses torch (``torch_needed``
    false) torch is not asked: torch, torchvision and cuda are null (not examined), and
    so is the device unless ``--device cpu`` named it.  The GPUs are nvidia-smi's as the
    system check found them (else torch's, when it sees CUDA); without either, gpu_count
    is null (not examined), never 0."""
    doc = host.basic_facts()
    smi = ctx.shared.get("nvidia_smi")  # set by the system check alone
    gpus = (smi or {}).get("gpus") or []
    state = torchenv.cuda_state() if torch_needed else {"available": False, "build_cuda": None}
    doc["gpu_name"] = gpus[0].get("name") if gpus else None
    doc["gpu_count"] = len(gpus) if smi is not None else None
    doc["driver"] = gpus[0].get("driver_version") if gpus else None
    torch_mod = torchenv._load("torch")[0] if torch_needed else None
    if not gpus and state["available"] and torch_mod is not None:
        try:
            doc["gpu_count"] = torch_mod.cuda.device_count()
            doc["gpu_name"] = torch_mod.cuda.get_device_name(0)
        except Exception:
            pass
    doc["torch"] = torchenv.version_of("torch") if torch_needed else None
    doc["torchvision"] = torchenv.version_of("torchvision") if torch_needed else None
    doc["cuda"] = state.get("build_cuda")
    if ctx.device_used:
        doc["device"] = ctx.device_used
    elif ctx.device_mode == "cpu":
        doc["device"] = "cpu"
    elif not torch_needed:
        doc["device"] = None  # nothing ran on a device, and torch was not asked which it would be
    else:
        doc["device"] = "cuda" if state["available"] else "cpu"
    return doc


def no_reference(opts, prof):
    """The GPU models of this node that neither the table nor the profile's floors
    judge (said once on top of the run); [] on the CPU."""
    if opts.device == "cpu" or prof["floors"]:
        return []
    from .checks import node
    out = []
    for row in node.gpu_rows() or []:
        name = row.get("name") or "?"
        try:
            model = expectations.identify(name, row.get("pci.device_id"), row.get("pci.sub_device_id"))[0]
        except ValueError:
            model = expectations.identify(name)[0]
        if model not in expectations.TABLE and name not in out:
            out.append(name)
    return out


def _terminate_as_interrupt():
    """SIGTERM/SIGHUP (a dropped SSH session, a timeout) end the run like
    Ctrl-C: the results so far are still written."""
    def handler(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main thread
            pass


def _ignore_signals():
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (ValueError, OSError):
                pass


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _judge(args, stream):
    """``--judge FILE.json [--profile FILE|JSON]``: its exit status."""
    from . import judge
    if args[0] != "--judge" or len(args) not in (2, 4) or (len(args) == 4 and args[2] != "--profile"):
        stream.write("validate: error: usage: python3 -m validate --judge FILE.json [--profile FILE|JSON]\n")
        return 2
    prof = None
    if len(args) == 4:  # the profile's node, floors and tolerance, as a run on the node would use them
        try:
            prof = profile.load(args[3], CHECK_NAMES)
        except profile.BadProfile as exc:
            stream.write("validate: error: %s\n" % exc)
            return 2
        expectations.use_profile(prof["floors"], prof["tolerance"])
    return judge.main(args[1], stderr=stream, prof=prof)


def main(argv=None, stream=None):
    stream = stream if stream is not None else sys.stderr
    args = sys.argv[1:] if argv is None else list(argv)
    if "--health" in args:  # the fast subset: its own options, no torch (validate/health.py)
        from . import health
        return health.main(args, stderr=stream)
    if "--judge" in args:  # recorded figures against the table (validate/judge.py); no torch
        return _judge(args, stream)
    # Kineto (torch.profiler) logs errors on machines without a GPU straight
    # to stderr; keep the progress stream readable.
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    try:
        opts = parse_args(args)
        os.makedirs(opts.out, exist_ok=True)
        if not os.access(opts.out, os.W_OK):
            raise UsageError("--out %s: not writable" % opts.out)
    except UsageError as exc:
        stream.write("validate: error: %s\n" % exc)
        stream.flush()
        return 2
    except OSError as exc:
        stream.write("validate: error: --out %s: %s\n" % (opts.out, exc.strerror or exc))
        stream.flush()
        return 2

    _terminate_as_interrupt()
    started = _utc_now()
    t0 = time.perf_counter()
    ctx = Context(opts, os.path.abspath(opts.out), stream=stream)
    plan = select(opts)
    ctx.progress("%s %s: %d of %d checks, device %s, output %s" % (
        TOOL, __version__, sum(1 for p in plan if p[1]), len(plan), opts.device, ctx.out_dir), check="validate")
    torch_needed = needs_torch(plan)
    resolve_defaults(opts, torch_needed)
    results: list[Any] = []
    interrupted = False
    prof = opts.profile_doc or profile.empty()
    expectations.use_profile(prof["floors"], prof["tolerance"])
    ctx.shared["ib_before"] = infiniband.read_ports(opts.sysfs_root or "/sys")
    unreferenced = no_reference(opts, prof)
    if unreferenced:
        ctx.progress("no reference: %s: in no table (validate/expectations.py) and no profile floor; its "
                     "performance is measured and reported, not judged" % ", ".join(unreferenced), check="validate")

    def flush_outputs(final):
        req = [r for r in results if r.required]
        ok = final and not interrupted and all(r.status == PASS for r in req)
        doc = output.results_document(started, time.perf_counter() - t0, ok,
                                      options_document(opts), host_document(ctx, torch_needed), results,
                                      unreferenced)
        output.write_json_atomic(os.path.join(ctx.out_dir, output.RESULTS), doc)
        if final:
            output.write_log(os.path.join(ctx.out_dir, output.LOG), doc, results)
        return ok

    for spec, chosen, required, why in plan:
        if interrupted:
            r = Result(spec.name, required)
            r.status = SKIP
            r.reason = "not run: interrupted"
            results.append(r)
            continue
        if not chosen:
            results.append(not_selected(spec, why))
            continue
        try:
            results.append(run_check(ctx, spec, required, named=spec.name in (opts.checks or [])))
            apply_warn_only(results[-1], prof["warn_only"])
        except KeyboardInterrupt:
            interrupted = True
            _ignore_signals()  # let the results be written
            r = Result(spec.name, required)
            r.status = "fail"
            r.reason = "interrupted"
            results.append(r)
        flush_outputs(False)
    ok = flush_outputs(True)
    warned = [r.name for r in results if r.warnings]
    # named in --checks and not counted: n/a here
    uncounted = [r for r in results if r.name in (opts.checks or []) and r.waived and not r.required]
    ctx.progress("%s: %s%s%s (%.1fs); see %s" % (
        "VALIDATED" if ok else "NOT VALIDATED",
        ", ".join("%s %s" % (r.name, r.status) for r in results if r.required) or "no check counted",
        "; not counted: %s" % ", ".join("%s n/a" % r.name for r in uncounted) if uncounted else "",
        "; warnings from %s" % ", ".join(warned) if warned else "",
        time.perf_counter() - t0, os.path.join(ctx.out_dir, output.LOG)), check="validate")
    if interrupted:
        return 130
    return 0 if ok else 1
